"""Which assignment a read of a name sees when the name is assigned more than once.

Wrappers reuse names in straight-line code (`kernel = partial(dx_kernel, ...)`, a pallas_call of
`kernel`, then `kernel = partial(dw_kernel, ...)` and another pallas_call; `method = ...` for each
call): a read sees the last assignment before it. Only that straight-line case is answered;
an assignment in a branch or a loop, or any other binding of the name, leaves it open.
Imports analysis.context only."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from pallas_fix.analysis.context import ModuleContext, walk


def reaching_value(ctx: ModuleContext, name: cst.Name, at: cst.CSTNode) -> Optional[tuple[cst.BaseExpression, cst.CSTNode]]:
    """The value of the last `name = value` before `at` when the name is assigned several times,
    each a plain statement of the one straight-line body that also holds `at`'s statement
    (`kernel = partial(dx_kernel, ...)`, a pallas_call, then `kernel = partial(dw_kernel, ...)`
    and another): what Python reads there. None when any other statement of the scope binds the
    name (a loop target, `with ... as`, `del`, an augmented or nested assignment, `global`)."""
    scope = ctx.scope_of(at)
    body = ctx.body_statements(scope)
    values = ctx.assignments(name.value, scope)
    if len(values) < 2 or isinstance(scope, cst.Module):
        return None
    owners = [ctx.statement_of(v) for v in values]
    position = {id(stmt): k for k, stmt in enumerate(body)}
    if any(o is None or id(o) not in position for o in owners):
        return None  # one assignment sits in a branch or a loop: which one ran is not fixed
    binds = sum(1 for n in walk(scope) if _binds_name(n, name.value) and ctx.scope_of(n) is scope)
    if binds != len(values):
        return None
    anchor = next((k for k, stmt in enumerate(body) if stmt is at or any(a is stmt for a in ctx.ancestors(at))), None)
    before = [(position[id(o)], v) for o, v in zip(owners, values) if anchor is not None and position[id(o)] < anchor]
    if not before:
        return None
    value = max(before, key=lambda pair: pair[0])[1]
    return value, value


def _binds_name(node: cst.CSTNode, name: str) -> bool:
    """`node` binds `name` in its scope (each plain assignment counts once, by its target)."""
    targets: list[cst.BaseExpression] = []
    if isinstance(node, cst.AssignTarget):
        targets = [node.target]
    elif isinstance(node, (cst.AnnAssign, cst.AugAssign)):
        targets = [node.target]
    elif isinstance(node, (cst.For, cst.CompFor)):
        targets = [node.target]
    elif isinstance(node, cst.AsName):
        targets = [node.name]
    elif isinstance(node, (cst.Del, cst.NamedExpr)):
        targets = [node.target]
    elif isinstance(node, (cst.Global, cst.Nonlocal)):
        return any(n.name.value == name for n in node.names)
    elif isinstance(node, (cst.FunctionDef, cst.ClassDef)):
        return node.name.value == name
    return any(isinstance(n, cst.Name) and n.value == name for t in targets for n in walk(t))
