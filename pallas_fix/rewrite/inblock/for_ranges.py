"""Which static `for v in range(...)` binds a loop variable read in a kernel.

A kernel may walk two phases with the same name (`for c in range(n): ...` to build chunks, then
`for c in range(n): ...` to copy them out, as the embedding lookups of the real corpus do): the
name then has several bindings, but a read inside one loop's body means that loop's variable,
as long as nothing else in that body binds the name again.
"""

from __future__ import annotations

from typing import Optional

import libcst as cst

from pallas_fix.analysis.context import walk


def for_range_iter(ctx, expr: cst.Name, binds: list) -> Optional[cst.BaseExpression]:
    """The iterable of the `for` binding `expr`: its one binding, or, where every binding of the
    name is a `for`, the nearest enclosing `for` over it whose body binds it no other way."""
    if not binds or any(kind != "for" for kind, *_ in binds):
        return None
    if len(binds) == 1:
        return binds[0][1]
    loop = next((a for a in ctx.ancestors(expr) if isinstance(a, cst.For) and _targets(a.target, expr.value)), None)
    if loop is None:
        return None
    inner = [n for n in walk(loop.body) if isinstance(n, (cst.For, cst.AssignTarget, cst.NamedExpr, cst.AugAssign))
             and _targets(getattr(n, "target", None), expr.value)]
    return None if inner else loop.iter


def _targets(target, name: str) -> bool:
    return isinstance(target, cst.Name) and target.value == name
