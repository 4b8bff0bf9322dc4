"""Shapes and dtypes of ordinary array expressions, read without running them: arithmetic with
broadcasting and jax.numpy's promotion, reshapes, slicing, reductions, `*_like` constructors and
random draws. What `verify.examples.main_block` follows to turn a `__main__` block's arrays into
example arguments. Client side: no jax is imported here.

May import core only."""
