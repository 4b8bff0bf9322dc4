"""Integer arrays that are contiguous ranges: the Triton idiom for a block's positions.

`rows = start + jnp.arange(bm)` (either order, `lax.iota(dtype, n)` for the arange, or
`jnp.arange(n)` alone, start 0; through `pl.multiple_of` / `pltriton.max_contiguous` hints), broadcast for an outer-product index as `rows[:, None]` /
`rows[None, :]` or built broadcast as `lax.broadcasted_iota(dtype, (bm, 1), 0)`: indexing a dim
with it reads the window `pl.ds(start, bm)` of that dim. `start` must be a scalar (a traced
integer, or Python arithmetic); a step (`2 * jnp.arange(n)`), a reversal (`n - jnp.arange(n)`) or a
table read through the range (`table[jnp.arange(n)]`) is no range and gives None.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import libcst as cst

from pallas_fix.core import names as N
from pallas_fix.analysis.context import walk

_WHERE = frozenset({"jax.numpy.where"})
_IOTA = "jax.lax.iota"
_BROADCASTED = "jax.lax.broadcasted_iota"


@dataclass(frozen=True)
class Range:
    """`start + arange(size)`, laid along `axis` of a broadcast of rank `rank` (its other dims 1)."""

    start: Optional[cst.BaseExpression]  # None: 0
    size: cst.BaseExpression
    axis: int = 0
    rank: int = 1


def contiguous_range(env, expr: cst.BaseExpression, depth: int = 0) -> Optional[Range]:
    """The range `expr` is, read where it is written under `env` (names through the binding that
    reaches them), or None."""
    if depth > 8:
        return None
    ctx = env.ctx
    if isinstance(expr, cst.Name):
        value = env.reaching_assignment(expr)
        return None if value is None or not isinstance(ctx.parent(value), cst.Assign) else contiguous_range(env, value, depth + 1)
    bare = unhinted(ctx, expr)
    if bare is not expr:
        return contiguous_range(env, bare, depth + 1)  # a hint: its value is its argument's
    if isinstance(expr, cst.Call):
        return _arange(env, expr)
    if isinstance(expr, cst.Subscript):
        inner = contiguous_range(env, expr.value, depth + 1)
        return None if inner is None or inner.rank != 1 else _broadcast(inner, expr)
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Add):
        for ranged, offset in ((expr.left, expr.right), (expr.right, expr.left)):
            inner = contiguous_range(env, ranged, depth + 1)
            if inner is not None and inner.start is None and _scalar_int(env, offset):
                return Range(offset, inner.size, inner.axis, inner.rank)
        return None
    return None


def unhinted(ctx, expr: cst.BaseExpression) -> cst.BaseExpression:
    """`expr` without the compiler hints around it, whose value is their first argument
    (`pltriton.max_contiguous(pl.multiple_of(rows, bm), bm)`: `rows`)."""
    while isinstance(expr, cst.Call) and ctx.imports.is_(expr.func, N.VALUE_HINTS) and expr.args and not expr.args[0].star:
        expr = expr.args[0].value
    return expr


def redirected_range(env, expr: cst.BaseExpression) -> Optional[tuple[cst.BaseExpression, Range]]:
    """`jnp.where(valid, rows, 0)` (through a name) with `rows` a range: the range with some lanes
    sent elsewhere, as (the `where` call, the range); None otherwise."""
    if isinstance(expr, cst.Name):
        expr = env.reaching_assignment(expr)
    if not isinstance(expr, cst.Call) or not env.ctx.imports.is_(expr.func, _WHERE) or len(expr.args) != 3:
        return None
    for arg in expr.args[1:]:
        found = contiguous_range(env, arg.value)
        if found is not None:
            return expr, found
    return None


def _arange(env, call: cst.Call) -> Optional[Range]:
    ctx = env.ctx
    if not ctx.imports.is_(call.func, N.ARANGE) or any(a.star for a in call.args):
        return None
    positional = [a.value for a in call.args if a.keyword is None]
    keywords = {a.keyword.value for a in call.args if a.keyword is not None}
    name = ctx.imports.qualify(call.func)
    if name == _BROADCASTED:
        return _broadcasted(env, positional) if not keywords else None
    at = 1 if name == _IOTA else 0
    if len(positional) != at + 1 or keywords - {"dtype"}:
        return None  # `jnp.arange(start, stop)` or a step: not read here
    return Range(None, positional[at]) if env.static_int(positional[at]) is not None or _python_int(env, positional[at]) else None


def _broadcasted(env, args: list[cst.BaseExpression]) -> Optional[Range]:
    """`lax.broadcasted_iota(dtype, (1, n), 1)`: its shape written in place, every dim but `dimension` 1."""
    if len(args) != 3 or not isinstance(args[1], cst.Tuple) or env.static_int(args[2]) is None:
        return None
    dims = [e.value for e in args[1].elements]
    axis = env.static_int(args[2])
    if not 0 <= axis < len(dims) or any(env.static_int(d) != 1 for k, d in enumerate(dims) if k != axis):
        return None
    return Range(None, dims[axis], axis, len(dims)) if _python_int(env, dims[axis]) else None


def _broadcast(inner: Range, sub: cst.Subscript) -> Optional[Range]:
    """`rows[:, None]`, `rows[None, :]`: one whole dim, the rest new axes (`rows[None]`: the dims
    left out after the index are whole, as in numpy)."""
    kinds = []
    for el in sub.slice:
        if isinstance(el.slice, cst.Slice) and el.slice.lower is None and el.slice.upper is None and el.slice.step is None:
            kinds.append(":")
        elif isinstance(el.slice, cst.Index) and isinstance(el.slice.value, cst.Name) and el.slice.value.value == "None":
            kinds.append("None")
        else:
            return None
    if inner.rank == 1 and ":" not in kinds:
        kinds.append(":")
    if kinds.count(":") != 1:
        return None
    return Range(inner.start, inner.size, kinds.index(":"), len(kinds))


def _scalar_int(env, expr: cst.BaseExpression) -> bool:
    """A traced integer scalar, or Python arithmetic on names and numbers."""
    val = env.value(expr)
    return val.vtype == "int" if val.dynamic else _python_int(env, expr)


def _python_int(env, expr: cst.BaseExpression) -> bool:
    """Python arithmetic on names, numbers and `.shape` reads: no call or other subscript that could
    make an array."""
    if env.value(expr).dynamic:
        return False
    for node in walk(expr):
        if isinstance(node, cst.Call):
            return False
        if isinstance(node, cst.Subscript) and not (isinstance(node.value, cst.Attribute) and node.value.attr.value == "shape"):
            return False
    return True
