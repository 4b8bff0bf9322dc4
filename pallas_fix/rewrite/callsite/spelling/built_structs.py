"""An out_shape that code builds, read as its list of `jax.ShapeDtypeStruct`s.

- `tuple(jax.ShapeDtypeStruct(x.shape, x.dtype) for x in (r, w, k))`, or the list comprehension:
  one struct per item of the literal tuple, `x` replaced by the item (the node at the call).
- `a + b` of such parts and of tuple or list literals; `[jax.ShapeDtypeStruct(...)] * 3`.
- `_out_shape(r)`, a call of a builder def of this module: what it returns, in the call's names
  (rewrite.callsite.spelling.returned_structs), read again by these rules.

`read_structs` gives the structs in order, or None for anything else (the caller reads that as
before: one output named, not spelled). The structs it builds are new nodes around the source's
own (grafts.py): their sizes read `r.shape[2] // CHUNK` of the very `r` the call passes.
"""

from __future__ import annotations

from typing import Optional

import libcst as cst

from pallas_fix.analysis.context import ModuleContext
from pallas_fix.analysis.values.bindings import binding_count
from pallas_fix.rewrite.callsite.spelling.grafts import substitute
from pallas_fix.rewrite.callsite.spelling.operands import CallSiteError
from pallas_fix.rewrite.callsite.spelling.returned_structs import returned_value
from pallas_fix.rewrite.text.syntax import elements

_MAX_REPEAT = 64  # `[s] * n`: more outputs than any kernel has says the reading went wrong


def read_structs(ctx: ModuleContext, expr: cst.BaseExpression, at: cst.CSTNode) -> Optional[tuple[list[cst.BaseExpression], bool]]:
    """The structs of an out_shape built by code, in order (see the module's docstring), and
    whether it is one struct, not a list of them (a builder returning `jax.ShapeDtypeStruct(...)`:
    the out_specs is then one spec too); None when `expr` is a literal list or one struct (the
    caller's own reading) or not built so."""
    value = ctx.resolve_value(expr, at)
    if elements(value) is not None or is_struct(value):
        return None
    items = _parts(ctx, expr, at)
    if items is None or not all(is_struct(i) for i in items):
        return None
    return items, len(items) == 1 and is_struct(_whole(ctx, value))


def _whole(ctx: ModuleContext, value: cst.BaseExpression) -> cst.BaseExpression:
    """What a builder call returns (itself for anything else): one struct or a list of them."""
    return (returned_value(ctx, value) or value) if isinstance(value, cst.Call) else value


def is_struct(expr: cst.BaseExpression) -> bool:
    """`jax.ShapeDtypeStruct(...)` (under any import of it)."""
    if not isinstance(expr, cst.Call):
        return False
    func = expr.func
    return (isinstance(func, cst.Name) and func.value == "ShapeDtypeStruct") or (
        isinstance(func, cst.Attribute) and func.attr.value == "ShapeDtypeStruct")


def _parts(ctx: ModuleContext, expr: cst.BaseExpression, at: cst.CSTNode) -> Optional[list[cst.BaseExpression]]:
    expr = ctx.resolve_value(expr, at) if isinstance(expr, cst.Name) else expr
    items = elements(expr)
    if items is not None:
        return [ctx.resolve_value(i, at) if isinstance(i, cst.Name) else i for i in items]
    if is_struct(expr):
        return [expr]
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Add):
        left, right = _parts(ctx, expr.left, at), _parts(ctx, expr.right, at)
        return None if left is None or right is None else left + right
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Multiply):
        return _repeated(ctx, expr, at)
    if isinstance(expr, (cst.GeneratorExp, cst.ListComp)):
        return _comprehension(ctx, expr, at)
    if isinstance(expr, cst.Call):
        inner = _converted(ctx, expr, at)
        if inner is not None:
            return _parts(ctx, inner, at)
        value = returned_value(ctx, expr)
        if value is None:
            return None
        found = _parts(ctx, value, at)
        if found is None or not all(is_struct(i) for i in found):
            raise CallSiteError(f"the out_shape `{ctx.code(expr).strip()}` returns `{ctx.code(value).strip()}`, which pallas-fix "
                                "does not read as a list of `jax.ShapeDtypeStruct`s; write the list at the call (sizes named "
                                "there) to get this fix")
        return found
    return None


def _converted(ctx: ModuleContext, call: cst.Call, at: cst.CSTNode) -> Optional[cst.BaseExpression]:
    """`tuple(E)` / `list(E)` of the builtins: `E`."""
    func = call.func
    if not (isinstance(func, cst.Name) and func.value in ("tuple", "list") and len(call.args) == 1):
        return None
    arg = call.args[0]
    if arg.keyword is not None or arg.star or any(binding_count(ctx, s, func.value) for s in ctx.scope_chain(at)):
        return None  # a `tuple` the module binds is not the builtin
    return arg.value


def _repeated(ctx: ModuleContext, expr: cst.BinaryOperation, at: cst.CSTNode) -> Optional[list[cst.BaseExpression]]:
    """`[s] * 3` or `3 * (s,)`: the items, repeated."""
    for seq, count in ((expr.left, expr.right), (expr.right, expr.left)):
        count = ctx.resolve_value(count, at) if isinstance(count, cst.Name) else count
        if isinstance(count, cst.Integer) and 0 < int(count.evaluated_value) <= _MAX_REPEAT:
            items = _parts(ctx, seq, at) if elements(ctx.resolve_value(seq, at) if isinstance(seq, cst.Name) else seq) is not None else None
            return None if items is None else items * int(count.evaluated_value)
    return None


def _comprehension(ctx: ModuleContext, comp, at: cst.CSTNode) -> Optional[list[cst.BaseExpression]]:
    """`(E for x in (a, b, c))`: E with `x` replaced by each item. One `for` over a tuple or list
    literal (or a name bound to one), no `if`, a plain name as its target."""
    loop = comp.for_in
    if loop.inner_for_in is not None or loop.ifs or loop.asynchronous is not None or not isinstance(loop.target, cst.Name):
        return None
    source = ctx.resolve_value(loop.iter, at) if isinstance(loop.iter, cst.Name) else loop.iter
    values = elements(source)
    if values is None:
        return None
    target = loop.target.value
    return [substitute(comp.elt, lambda n, v=v: v if n.value == target else None) for v in values]  # type: ignore[misc]
