"""The value of an `if` test a launcher branches on, where the source fixes it:

    config = PallasConfig("triton", ...)                      # in `launch`
    make_pallas_call(kernel, ..., config, grid)
        if config.backend == "triton":                        # in `make_pallas_call`
            kwargs["compiler_params"] = pltriton.CompilerParams(...)

A comparison (`==`, `!=`, `in`, `not in`) of literals, module constants, parameters the chain of
calls handing the kernel on passes (analysis.relays.passed_in.chain_value) and fields of a
module `NamedTuple` built with literal arguments. Anything else is unknown (None): a setting made
under such a test does not count."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from pallas_fix.analysis.context import ModuleContext
from pallas_fix.analysis.relays.passed_in import chain_value
from pallas_fix.core.model import KernelSite

_UNKNOWN = object()


def test_value(ctx: ModuleContext, site: KernelSite, test: cst.BaseExpression) -> Optional[bool]:
    """True / False where the test's value is fixed by the source, None otherwise."""
    if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1):
        return None
    left, right = _static(ctx, site, test.left), _static(ctx, site, test.comparisons[0].comparator)
    if left is _UNKNOWN or right is _UNKNOWN:
        return None
    op = test.comparisons[0].operator
    try:
        if isinstance(op, cst.Equal):
            return left == right
        if isinstance(op, cst.NotEqual):
            return left != right
        if isinstance(op, cst.In):
            return left in right  # type: ignore[operator]
        if isinstance(op, cst.NotIn):
            return left not in right  # type: ignore[operator]
    except TypeError:
        return None
    return None


def _static(ctx: ModuleContext, site: KernelSite, expr: cst.BaseExpression, depth: int = 0) -> object:
    if depth > 8:
        return _UNKNOWN
    if isinstance(expr, cst.SimpleString):
        return expr.evaluated_value
    if isinstance(expr, cst.Integer):
        return int(expr.value)
    if isinstance(expr, (cst.Tuple, cst.List)):
        items = [_static(ctx, site, e.value, depth + 1) for e in expr.elements if not isinstance(e, cst.StarredElement)]
        return _UNKNOWN if len(items) < len(expr.elements) or _UNKNOWN in items else tuple(items)
    if isinstance(expr, cst.Name):
        value = _bound(ctx, site, expr)
        return _UNKNOWN if value is None else _static(ctx, site, value, depth + 1)
    if isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name):
        built = _bound(ctx, site, expr.value)
        field = _field(ctx, built, expr.attr.value) if isinstance(built, cst.Call) else None
        return _UNKNOWN if field is None else _static(ctx, site, field, depth + 1)
    return _UNKNOWN


def _bound(ctx: ModuleContext, site: KernelSite, name: cst.Name) -> Optional[cst.BaseExpression]:
    """What `name` holds where it is read: through the chain's arguments, then its one assignment."""
    passed, _ = chain_value(ctx, site, name, to_outer=False, reads_ok=True)
    if passed is None:
        return None
    value = ctx.resolve_value(passed, passed)
    return None if value is name else value


def _field(ctx: ModuleContext, built: cst.Call, attr: str) -> Optional[cst.BaseExpression]:
    """`PallasConfig("triton", ...).backend`: the argument given for the field, or its default,
    where `PallasConfig` is a module-level `class ...(NamedTuple)` of annotated fields."""
    cls = next((c for c in ctx.nodes_of(cst.ClassDef) if isinstance(built.func, cst.Name) and c.name.value == built.func.value
                and ctx.scope_of(c) is ctx.module), None)
    if cls is None or not any(ctx.code(b.value).strip() in ("NamedTuple", "typing.NamedTuple") for b in cls.bases):
        return None
    fields = [s.body[0] for s in cls.body.body if isinstance(s, cst.SimpleStatementLine) and len(s.body) == 1
              and isinstance(s.body[0], cst.AnnAssign) and isinstance(s.body[0].target, cst.Name)]
    names = [f.target.value for f in fields]
    if attr not in names or any(a.star for a in built.args):
        return None
    at = names.index(attr)
    positional = [a for a in built.args if a.keyword is None]
    if at < len(positional):
        return positional[at].value
    given = next((a.value for a in built.args if a.keyword is not None and a.keyword.value == attr), None)
    return given if given is not None else fields[at].value
