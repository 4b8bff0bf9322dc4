"""Where a file's example calls come from, client side (no jax is imported here): recorded runs,
`# pallas-fix: example` comments, the `__main__` block, annotations, and candidates synthesised
from what the code says about shapes, cached between runs.

May import core; the worker is started only through verify.runner."""
