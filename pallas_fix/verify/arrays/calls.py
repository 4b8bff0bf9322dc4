"""The functions and methods of arrays a ``__main__`` block calls, read with :mod:`ast`.

:class:`ArrayCalls` is the part of :class:`~pallas_fix.verify.examples.main_block.MainReader` that
reads calls: PRNG keys and generators, random draws (:mod:`~pallas_fix.verify.arrays.random_draws`),
constructors (``jnp.ones`` / ``zeros`` / ``full`` / ``empty``, their ``_like`` forms, ``arange``,
``eye``, ``linspace``, ``array([[...]])`` literals), element-wise functions (``jnp.exp``,
``jax.nn.relu``, ``maximum``, ``where``, ``clip``), ``dot`` / ``matmul``, ``concatenate`` /
``stack``, and what ``x.method(...)`` and ``jnp.method(x, ...)`` share: ``reshape``,
``transpose``, ``swapaxes``, reductions, ``broadcast_to``, ``expand_dims``; ``.astype`` and
``x.at[...].set(...)``. Shapes and dtypes come from :mod:`~pallas_fix.verify.arrays.values`.
"""

from __future__ import annotations

import ast
from typing import Any, Iterator, Optional

from pallas_fix.core.example_values import INT_BOUNDS
from pallas_fix.verify.arrays import values as av
from pallas_fix.verify.arrays.values import ArrayValue, is_dim, is_number
from pallas_fix.verify.examples.ast_reading import argument, dotted, keyword, tail
from pallas_fix.verify.arrays.random_draws import RNG, dtype_of, jax_random, numpy_random, shape_of

KEY = object()  # a PRNG key: known to exist, never an argument
UNKNOWN = object()  # what a name holds when the reader cannot tell
_CONSTRUCTORS = ("ones", "zeros", "empty", "full")
_LIKE = ("ones_like", "zeros_like", "empty_like", "full_like")
_FLOAT_FUNCTIONS = {"exp", "exp2", "log", "log1p", "log2", "expm1", "tanh", "sin", "cos", "sqrt", "rsqrt",
                    "sigmoid", "gelu", "silu", "softplus", "erf", "softmax", "log_softmax"}
_SAME_FUNCTIONS = {"abs", "negative", "square", "relu", "floor", "ceil", "round", "sign", "clip", "asarray",
                   "array", "device_put", "block_until_ready", "copy", "stop_gradient"}
_PAIR_FUNCTIONS = {"maximum": "max", "minimum": "min", "add": "add", "subtract": "sub", "multiply": "mul",
                   "divide": "div", "true_divide": "div", "power": "pow"}
_REDUCTIONS = ("sum", "mean", "max", "min")


def known(v: Any) -> Any:
    """None (an array function could not tell) as UNKNOWN."""
    return UNKNOWN if v is None else v


class ArrayCalls:
    """Call reading for a reader that has ``value(node)``, ``numpy_names`` and ``python_random``."""

    numpy_names: frozenset
    python_random: frozenset

    def value(self, node: Optional[ast.AST]) -> Any:  # pragma: no cover - the reader's
        raise NotImplementedError

    def _call(self, node: ast.Call) -> Any:
        name = tail(node.func)
        if isinstance(node.func, ast.Attribute):
            owner = self.value(node.func.value)
            if owner is RNG:
                return known(numpy_random(node, name, self.value))
            method = self._method(node, owner)
            if method is not UNKNOWN:
                return method
        if name in ("PRNGKey", "key", "split", "fold_in"):
            return KEY
        head = dotted(node.func).split(".")
        if head[0] in self.python_random:
            return UNKNOWN
        if "random" in head[:-1]:
            numpy = head[0] in self.numpy_names
            return known(numpy_random(node, name, self.value) if numpy else jax_random(node, name, self.value))
        return self._function(node, name)

    def _function(self, node: ast.Call, name: str) -> Any:
        """A ``jnp`` / ``np`` / ``jax.nn`` function of arrays, by its last name."""
        args = [self.value(a) for a in node.args]
        first = args[0] if args else UNKNOWN
        if name in _CONSTRUCTORS:
            shape = shape_of(self.value(argument(node, 0, "shape")))
            dt = dtype_of(argument(node, 2 if name == "full" else 1, "dtype")) or "f32"
            return ArrayValue(dt, shape) if shape is not None else UNKNOWN
        if name in _LIKE and isinstance(first, ArrayValue):
            return ArrayValue(dtype_of(keyword(node, "dtype")) or first.dtype, first.shape)
        if name == "arange":
            return self._arange(node)
        if name in ("array", "asarray") and node.args and not isinstance(first, ArrayValue):
            return self._literal_array(node)
        if name == "eye" and is_dim(first):
            cols = args[1] if len(args) > 1 and is_dim(args[1]) else first
            return ArrayValue(dtype_of(keyword(node, "dtype")) or "f32", (first, cols))
        if name == "linspace" and len(args) >= 3 and is_dim(args[2]):
            return ArrayValue(dtype_of(keyword(node, "dtype")) or "f32", (args[2],))
        if name in ("concatenate", "stack") and isinstance(first, tuple):
            axis = self.value(argument(node, 1, "axis")) if argument(node, 1, "axis") is not None else 0
            return known((av.concatenate if name == "concatenate" else av.stack)(first, axis))
        if not isinstance(first, ArrayValue) and name not in ("where",):
            return UNKNOWN
        return self._array_function(node, name, args)

    def _array_function(self, node: ast.Call, name: str, args: list) -> Any:
        first = args[0] if args else UNKNOWN
        if name in ("array", "asarray") and dtype_of(argument(node, 1, "dtype")):
            return ArrayValue(dtype_of(argument(node, 1, "dtype")), first.shape)
        if name in _SAME_FUNCTIONS:
            return first if name != "clip" else ArrayValue(first.dtype, first.shape)
        if name in _FLOAT_FUNCTIONS:
            return av.to_float(first)
        if name in _PAIR_FUNCTIONS and len(args) == 2:
            return known(av.binary(_PAIR_FUNCTIONS[name], *args))
        if name == "where" and len(args) == 3:
            return known(av.where(*args))
        if name in ("dot", "matmul") and len(args) == 2 and isinstance(args[1], ArrayValue):
            return known(av.matmul(*args)) if name == "matmul" or max(len(a.shape) for a in args) <= 2 else UNKNOWN
        return self._method_like(node, name, first, args[1:], _keywords(node, self.value))

    def _method(self, node: ast.Call, owner: Any) -> Any:
        attr = node.func.attr
        if owner is UNKNOWN and _is_at_update(node.func.value):  # x.at[i].set(v): x's shape
            owner = self.value(node.func.value.value.value)
        if not isinstance(owner, ArrayValue):
            return UNKNOWN
        if _is_at_update(node.func.value):
            return owner
        if attr == "astype" and node.args:
            dt = dtype_of(node.args[0])
            return ArrayValue(dt, owner.shape, owner.value_range if dt in INT_BOUNDS else None) if dt else UNKNOWN
        if attr in ("block_until_ready", "copy"):
            return owner
        args = [self.value(a) for a in node.args]
        return self._method_like(node, attr, owner, args, _keywords(node, self.value))

    def _method_like(self, node: ast.Call, name: str, owner: ArrayValue, args: list, kwargs: dict) -> Any:
        """What ``owner.name(*args)`` and ``jnp.name(owner, *args)`` share."""
        if name == "reshape" and (args or "shape" in kwargs or "newshape" in kwargs):
            new = args[0] if len(args) == 1 else tuple(args) if args else kwargs.get("shape", kwargs.get("newshape"))
            return known(av.reshape(owner, new))
        if name == "transpose":
            axes = args[0] if len(args) == 1 and isinstance(args[0], tuple) else tuple(args) or kwargs.get("axes")
            return known(av.transpose(owner, axes))
        if name == "swapaxes" and len(args) == 2:
            return known(av.swapaxes(owner, *args))
        if name in _REDUCTIONS:
            axis = args[0] if args else kwargs.get("axis")
            return known(av.reduce(owner, name, axis, kwargs.get("keepdims") is True))
        if name == "broadcast_to" and args:
            shape = shape_of(args[0])
            return ArrayValue(owner.dtype, shape, owner.value_range) if shape and av.broadcast(owner.shape, shape) == shape else UNKNOWN
        if name == "expand_dims" and args and isinstance(args[0], int):
            items = [slice(None)] * len(owner.shape)
            pos = args[0] % (len(owner.shape) + 1)
            return known(av.index(owner, items[:pos] + [None] + items[pos:]))
        return UNKNOWN

    def _arange(self, node: ast.Call) -> Any:
        bounds = [self.value(a) for a in node.args]
        if not bounds or not all(isinstance(b, int) and not isinstance(b, bool) for b in bounds):
            return UNKNOWN
        start, stop, step = (0, bounds[0], 1) if len(bounds) == 1 else (bounds + [1])[:3]
        length = max(0, -(-(stop - start) // step)) if step else 0
        dt = dtype_of(keyword(node, "dtype")) or "i32"
        in_range = (min(start, stop), max(start, stop)) if dt in INT_BOUNDS and length else None
        return ArrayValue(dt, (length,), in_range)

    def _literal_array(self, node: ast.Call) -> Any:
        data = self.value(node.args[0])
        shape = _nested_shape(data)
        if shape is None:
            return UNKNOWN
        leaves = list(_flat(data))
        dt = dtype_of(argument(node, 1, "dtype"))
        if dt is None:
            dt = "bool" if all(isinstance(x, bool) for x in leaves) else "i32" if all(isinstance(x, int) for x in leaves) else "f32"
        # the literal's spread, when it has one: [5, 0, 7, 5] indexes blocks 0..7
        ints = dt in INT_BOUNDS and len(set(leaves)) > 1 and all(isinstance(x, int) for x in leaves)
        return ArrayValue(dt, shape, (min(leaves), max(leaves) + 1) if ints else None)




def _keywords(node: ast.Call, value) -> dict:
    return {kw.arg: value(kw.value) for kw in node.keywords if kw.arg is not None}


def _is_at_update(node: ast.AST) -> bool:
    """``x.at[...]``, the head of a functional update."""
    return isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "at"


def _nested_shape(data: Any) -> Optional[tuple]:
    if is_number(data) or isinstance(data, bool):
        return ()
    if not isinstance(data, tuple) or not data:
        return None
    inner = [_nested_shape(x) for x in data]
    if any(s is None for s in inner) or len(set(inner)) != 1:
        return None
    return (len(data),) + inner[0]


def _flat(data: Any) -> Iterator[Any]:
    if isinstance(data, tuple):
        for x in data:
            yield from _flat(x)
    else:
        yield data


