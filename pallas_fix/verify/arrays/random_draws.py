"""Random arrays a ``__main__`` block draws, read with :mod:`ast`: their shape, dtype and range.

``jax.random.normal(key, shape, dtype)`` / ``uniform`` / ``randint`` / ``bernoulli`` /
``truncated_normal`` (the key itself is never needed: a key from anywhere will do), numpy's
``np.random.randn`` / ``rand`` / ``standard_normal`` / ``random`` / ``normal`` / ``uniform`` /
``randint`` and the same methods of a generator (``rng = np.random.default_rng(0)``,
``np.random.RandomState(0)``, with ``integers``). numpy draws float64 and int64; jax, without
x64, turns them into f32 and i32, which is what the example says.
"""

from __future__ import annotations

import ast
from typing import Any, Callable, Optional

from pallas_fix.core.example_values import DTYPE_ALIASES, INT_BOUNDS
from pallas_fix.verify.arrays.values import ArrayValue, is_dim, is_number
from pallas_fix.verify.examples.ast_reading import argument, tail

RNG = object()  # a numpy generator: its methods draw arrays
_JAX = ("normal", "truncated_normal", "uniform", "randint", "bernoulli")

Reader = Callable[[Optional[ast.AST]], Any]  # an expression's value in the block


def dtype_of(node: Optional[ast.AST]) -> Optional[str]:
    """``jnp.float32`` / ``np.int32`` / ``"bfloat16"`` -> the grammar's short name."""
    if node is None:
        return None
    name = node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else tail(node)
    return DTYPE_ALIASES.get(name)


def shape_of(value: Any) -> Optional[tuple]:
    """An int or a tuple of ints as a shape; None for anything else."""
    if is_dim(value):
        return (value,)
    if isinstance(value, tuple) and all(is_dim(d) for d in value):
        return value
    return None


def _bounds(low: Any, high: Any, integer: bool) -> Optional[tuple]:
    if integer:
        ok = isinstance(low, int) and isinstance(high, int) and not isinstance(low, bool) and low < high
        return (low, high) if ok else None
    return (float(low), float(high)) if is_number(low) and is_number(high) and low < high else None


def jax_random(node: ast.Call, name: str, value: Reader) -> Any:
    """A ``jax.random`` draw, or None."""
    if name not in _JAX or not node.args:
        return None
    if name == "bernoulli":
        shape = shape_of(value(argument(node, 2, "shape")))
        return ArrayValue("bool", shape) if shape is not None else None
    shape = shape_of(value(argument(node, 1, "shape")) if argument(node, 1, "shape") is not None else ())
    if shape is None:
        return None
    if name == "randint":
        dt = dtype_of(argument(node, 4, "dtype")) or "i32"
        low, high = value(argument(node, 2, "minval")), value(argument(node, 3, "maxval"))
        return ArrayValue(dt, shape, _bounds(low, high, True) if dt in INT_BOUNDS else None)
    dt = dtype_of(argument(node, 2, "dtype")) or "f32"
    if name == "uniform":
        low, high = (value(argument(node, k, n) or ast.Constant(d)) for k, n, d in ((3, "minval", 0.0), (4, "maxval", 1.0)))
        return ArrayValue(dt, shape, _bounds(low, high, False))
    return ArrayValue(dt, shape)


def _size(node: ast.Call, index: int, value: Reader) -> Optional[tuple]:
    size = argument(node, index, "size")
    return () if size is None else shape_of(value(size))


def numpy_random(node: ast.Call, name: str, value: Reader) -> Any:
    """A draw of numpy's module-level ``np.random`` functions or of a generator, or None."""
    if name in ("default_rng", "RandomState", "Generator"):
        return RNG
    dt = dtype_of(argument(node, 1, "dtype")) if name in ("standard_normal", "random") else None
    if name in ("randn", "rand"):
        shape = shape_of(tuple(value(a) for a in node.args))
        return ArrayValue("f32", shape) if shape is not None else None
    if name in ("standard_normal", "random", "random_sample"):
        shape = _size(node, 0, value)
        return ArrayValue(dt or "f32", shape) if shape is not None else None
    if name == "normal":
        shape = _size(node, 2, value)
        return ArrayValue("f32", shape) if shape is not None else None
    if name == "uniform":
        shape = _size(node, 2, value)
        low, high = (value(argument(node, k, n)) if argument(node, k, n) is not None else d
                     for k, n, d in ((0, "low", 0.0), (1, "high", 1.0)))
        return ArrayValue("f32", shape, _bounds(low, high, False)) if shape is not None else None
    if name in ("randint", "integers"):
        return _integers(node, value)
    return None


def _integers(node: ast.Call, value: Reader) -> Any:
    """``randint(low, high=None, size=None, dtype=int)``: one bound is the high one."""
    low = value(argument(node, 0, "low"))
    high_node = argument(node, 1, "high")
    low, high = (0, low) if high_node is None else (low, value(high_node))
    shape = _size(node, 2, value)
    dt = dtype_of(argument(node, 3, "dtype")) or "i32"
    if shape is None:
        return None
    return ArrayValue(dt, shape, _bounds(low, high, True) if dt in INT_BOUNDS else None)
