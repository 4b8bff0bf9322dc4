"""Shapes and dtypes of array expressions, for reading a ``__main__`` block without running it.

:class:`ArrayValue` is what a name in the block holds when it is an array: its dtype (the example
grammar's short name), its shape and, for tables, the range of its values. The functions here
follow jax.numpy's rules for what an operation gives: broadcasting, type promotion (a Python
scalar is weak: ``x * 3`` keeps ``x``'s dtype, ``i * 0.5`` is f32), indexing and slicing,
``reshape``, ``transpose``, ``concatenate`` / ``stack``, reductions and ``@``. Each returns None
where it cannot be sure (a shape that does not broadcast, an index it cannot read): the caller
then knows nothing, which is better than a wrong example. Nothing here imports jax or numpy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from pallas_fix.core.example_values import INT_BOUNDS, ArgSpec

_FLOAT_BITS = {"bf16": 16, "f16": 16, "f32": 32, "f64": 64}


@dataclass(frozen=True)
class ArrayValue:
    dtype: str
    shape: tuple
    value_range: Optional[tuple] = None  # ints: [low, high); floats: uniform in [low, high)

    def spec(self) -> ArgSpec:
        return ArgSpec(self.dtype, tuple(self.shape), self.value_range)


def is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def is_dim(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _kind(dtype: str) -> str:
    return "b" if dtype == "bool" else dtype[0] if dtype[0] in "iu" else "f"


def _bits(dtype: str) -> int:
    return _FLOAT_BITS.get(dtype) or int(dtype[1:])


def promote(a: str, b: str) -> Optional[str]:
    """The dtype of an operation on two arrays (jax.numpy's lattice, x64 aside); None when the
    two need a rule this does not follow (signed with unsigned)."""
    if a == b:
        return a
    ka, kb = _kind(a), _kind(b)
    if "b" in (ka, kb):
        return b if ka == "b" else a
    if ka == "f" and kb == "f":
        return "f32" if {a, b} == {"bf16", "f16"} else max(a, b, key=_bits)
    if "f" in (ka, kb):
        return a if ka == "f" else b
    if ka != kb:
        return None
    return max(a, b, key=_bits)


def with_scalar(dtype: str, scalar: Any) -> str:
    """An array op a Python scalar: the scalar is weak and takes the array's dtype, except that
    a float makes an integer or bool array f32 and an int makes a bool array i32."""
    if isinstance(scalar, float) and _kind(dtype) in "biu":
        return "f32"
    if isinstance(scalar, int) and not isinstance(scalar, bool) and dtype == "bool":
        return "i32"
    return dtype


def broadcast(*shapes: tuple) -> Optional[tuple]:
    """numpy broadcasting of ``shapes``, or None when they do not broadcast."""
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for dims in zip(*[(1,) * (rank - len(s)) + tuple(s) for s in shapes]):
        sizes = {d for d in dims if d != 1}
        if len(sizes) > 1:
            return None
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


# ---------------------------------------------------------------------------- arithmetic

_TRUE_DIV = "div"


def _scalar_range(op: str, rng: Optional[tuple], k: Any, integer: bool, scalar_left: bool) -> Optional[tuple]:
    """The value range after ``x op k`` (or ``k op x``), where it maps monotonically."""
    if rng is None or not is_number(k):
        return None
    lo, hi = (rng[0], rng[1] - 1) if integer else rng
    if op == "add":
        ends = (lo + k, hi + k)
    elif op == "sub":
        ends = (k - lo, k - hi) if scalar_left else (lo - k, hi - k)
    elif op == "mul":
        ends = (lo * k, hi * k)
    elif op == "floordiv" and not scalar_left and isinstance(k, int) and k > 0:
        ends = (lo // k, hi // k)
    elif op == "mod" and not scalar_left and isinstance(k, int) and k > 0 and integer:
        return (0, k) if lo < 0 or hi >= k else rng
    else:
        return None
    low, high = min(ends), max(ends)
    if integer:
        return (int(low), int(high) + 1) if isinstance(low, int) and isinstance(high, int) else None
    return (float(low), float(high)) if low < high else None


def binary(op: str, a: Any, b: Any) -> Optional[ArrayValue]:
    """``a op b`` where at least one side is an ArrayValue and the other is one or a Python
    number; op: add sub mul div floordiv mod pow max min (an element-wise pair) or a comparison
    ("cmp"). None when the shapes do not broadcast or a side is something else."""
    arrays = [v for v in (a, b) if isinstance(v, ArrayValue)]
    if not arrays or not all(isinstance(v, ArrayValue) or is_number(v) or isinstance(v, bool) for v in (a, b)):
        return None
    if len(arrays) == 2:
        shape, dtype, rng = broadcast(a.shape, b.shape), promote(a.dtype, b.dtype), None
    else:
        arr, k = (a, b) if isinstance(a, ArrayValue) else (b, a)
        shape, dtype = arr.shape, with_scalar(arr.dtype, k)
        integer = dtype in INT_BOUNDS and arr.dtype in INT_BOUNDS
        rng = _scalar_range(op, arr.value_range, k, integer, arr is b) if integer or _kind(dtype) == "f" else None
    if shape is None or dtype is None:
        return None
    if op == "cmp":
        return ArrayValue("bool", shape)
    if op == _TRUE_DIV and _kind(dtype) in "biu":
        dtype, rng = "f32", None
    return ArrayValue(dtype, shape, rng)


def negate(a: ArrayValue) -> ArrayValue:
    rng = a.value_range
    if rng is not None and a.dtype in INT_BOUNDS:
        rng = (-(rng[1] - 1), -rng[0] + 1)
    elif rng is not None:
        rng = (-rng[1], -rng[0])
    return ArrayValue(a.dtype, a.shape, rng)


def to_float(a: ArrayValue) -> ArrayValue:
    """A transcendental function's result: the shape, a float dtype."""
    return ArrayValue(a.dtype if _kind(a.dtype) == "f" else "f32", a.shape)


def where(cond: Any, a: Any, b: Any) -> Optional[ArrayValue]:
    shapes = [v.shape for v in (cond, a, b) if isinstance(v, ArrayValue)]
    values = [v for v in (a, b) if isinstance(v, ArrayValue)]
    if not values or not all(isinstance(v, ArrayValue) or is_number(v) for v in (cond, a, b)):
        return None
    dtype = values[0].dtype if len(values) == 1 else promote(values[0].dtype, values[1].dtype)
    if len(values) == 1:
        other = b if values[0] is a else a
        dtype = with_scalar(dtype, other)
    shape = broadcast(*shapes)
    return ArrayValue(dtype, shape) if shape is not None and dtype is not None else None


def matmul(a: ArrayValue, b: ArrayValue) -> Optional[ArrayValue]:
    """``a @ b``: vectors, matrices and broadcast batches of matrices."""
    dtype = promote(a.dtype, b.dtype)
    if dtype is None or not a.shape or not b.shape:
        return None
    left = a.shape if len(a.shape) > 1 else (1,) + a.shape
    right = b.shape if len(b.shape) > 1 else b.shape + (1,)
    if left[-1] != right[-2]:
        return None
    batch = broadcast(left[:-2], right[:-2])
    if batch is None:
        return None
    shape = batch + left[-2:-1] * (len(a.shape) > 1) + right[-1:] * (len(b.shape) > 1)
    return ArrayValue(dtype, shape)


# ---------------------------------------------------------------------------- shape changes


def reshape(a: ArrayValue, new: Any) -> Optional[ArrayValue]:
    if isinstance(new, int):
        new = (new,)
    if not isinstance(new, tuple) or not all(isinstance(d, int) and not isinstance(d, bool) for d in new):
        return None
    total = math.prod(a.shape)
    known = math.prod(d for d in new if d != -1)
    if list(new).count(-1) == 1 and known and total % known == 0:
        new = tuple(total // known if d == -1 else d for d in new)
    if math.prod(new) != total or not all(d >= 0 for d in new):
        return None
    return ArrayValue(a.dtype, new, a.value_range)


def transpose(a: ArrayValue, axes: Optional[Sequence[Any]] = None) -> Optional[ArrayValue]:
    if not axes:
        return ArrayValue(a.dtype, tuple(reversed(a.shape)), a.value_range)
    rank = len(a.shape)
    if not all(isinstance(x, int) and -rank <= x < rank for x in axes):
        return None
    order = [x % rank for x in axes]
    if sorted(order) != list(range(rank)):
        return None
    return ArrayValue(a.dtype, tuple(a.shape[x] for x in order), a.value_range)


def swapaxes(a: ArrayValue, i: Any, j: Any) -> Optional[ArrayValue]:
    rank = len(a.shape)
    if not all(isinstance(x, int) and -rank <= x < rank for x in (i, j)):
        return None
    order = list(range(rank))
    order[i % rank], order[j % rank] = order[j % rank], order[i % rank]
    return transpose(a, order)


def index(a: ArrayValue, items: Sequence[Any]) -> Optional[ArrayValue]:
    """``a[items]``: each item an int, a ``slice`` of ints, None (a new axis) or Ellipsis;
    anything else (an index array) gives None."""
    if sum(1 for it in items if it is Ellipsis) > 1:
        return None
    used = sum(1 for it in items if it is not None and it is not Ellipsis)
    if used > len(a.shape):
        return None
    expanded: list[Any] = []
    for it in items:
        expanded.extend([slice(None)] * (len(a.shape) - used) if it is Ellipsis else [it])
    if Ellipsis not in items:
        expanded += [slice(None)] * (len(a.shape) - used)
    dims = iter(a.shape)
    shape: list[int] = []
    for it in expanded:
        if it is None:
            shape.append(1)
            continue
        size = next(dims)
        if isinstance(it, slice):
            if not all(p is None or (isinstance(p, int) and not isinstance(p, bool)) for p in (it.start, it.stop, it.step)) or it.step == 0:
                return None
            shape.append(len(range(*it.indices(size))))
        elif isinstance(it, int) and not isinstance(it, bool) and -size <= it < size:
            continue
        else:
            return None
    return ArrayValue(a.dtype, tuple(shape), a.value_range)


def concatenate(parts: Sequence[Any], axis: Any) -> Optional[ArrayValue]:
    if not parts or not all(isinstance(p, ArrayValue) for p in parts) or not isinstance(axis, int):
        return None
    rank = len(parts[0].shape)
    if rank == 0 or any(len(p.shape) != rank for p in parts) or not -rank <= axis < rank:
        return None
    axis %= rank
    rest = {p.shape[:axis] + p.shape[axis + 1:] for p in parts}
    dtype = _promote_all([p.dtype for p in parts])
    if len(rest) != 1 or dtype is None:
        return None
    shape = list(parts[0].shape)
    shape[axis] = sum(p.shape[axis] for p in parts)
    return ArrayValue(dtype, tuple(shape))


def stack(parts: Sequence[Any], axis: Any) -> Optional[ArrayValue]:
    if not parts or not all(isinstance(p, ArrayValue) for p in parts) or not isinstance(axis, int):
        return None
    rank = len(parts[0].shape) + 1
    dtype = _promote_all([p.dtype for p in parts])
    if len({p.shape for p in parts}) != 1 or dtype is None or not -rank <= axis < rank:
        return None
    shape = list(parts[0].shape)
    shape.insert(axis % rank, len(parts))
    return ArrayValue(dtype, tuple(shape))


def _promote_all(dtypes: list[str]) -> Optional[str]:
    out: Optional[str] = dtypes[0]
    for d in dtypes[1:]:
        out = promote(out, d) if out is not None else None
    return out


def reduce(a: ArrayValue, how: str, axis: Any, keepdims: bool) -> Optional[ArrayValue]:
    """``sum`` / ``mean`` / ``max`` / ``min`` over ``axis`` (None: all; an int or a tuple)."""
    rank = len(a.shape)
    axes = range(rank) if axis is None else (axis,) if isinstance(axis, int) else axis
    if not isinstance(axes, (range, tuple)) or not all(isinstance(x, int) and -rank <= x < rank for x in axes):
        return None
    gone = {x % rank for x in axes}
    shape = tuple(1 if i in gone else d for i, d in enumerate(a.shape) if keepdims or i not in gone)
    dtype = a.dtype
    if how == "mean" and _kind(dtype) != "f":
        dtype = "f32"
    elif how == "sum" and dtype == "bool":
        dtype = "i32"
    return ArrayValue(dtype, shape, a.value_range if how in ("max", "min") else None)
