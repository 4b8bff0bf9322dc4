"""Which assignment a read of a name sees when the name is assigned more than once.

Wrappers reuse names in straight-line code (`kernel = partial(dx_kernel, ...)`, a pallas_call of
`kernel`, then `kernel = partial(dw_kernel, ...)` and another pallas_call; `method = ...` for each
call): a read sees the last assignment before it. Only that straight-line case is answered;
an assignment in a branch or a loop, or any other binding of the name, leaves it open.
Imports analysis.context and analysis.values.bindings."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from pallas_fix.analysis.context import ModuleContext
from pallas_fix.analysis.values.bindings import binding_count


def reaching_value(ctx: ModuleContext, name: cst.Name, at: cst.CSTNode) -> Optional[cst.BaseExpression]:
    """The value of the last `name = value` before `at` when the name is assigned several times,
    each a plain statement of the one straight-line body that also holds `at`'s statement
    (`kernel = partial(dx_kernel, ...)`, a pallas_call, then `kernel = partial(dw_kernel, ...)`
    and another): what Python reads there. None when any other statement of the scope binds the
    name (a loop target, `with ... as`, `del`, an import, a `match` capture, an augmented or
    nested assignment, `global`)."""
    scope = ctx.scope_of(at)
    body = ctx.body_statements(scope)
    values = ctx.assignments(name.value, scope)
    if len(values) < 2 or isinstance(scope, cst.Module):
        return None
    owners = [ctx.statement_of(v) for v in values]
    position = {id(stmt): k for k, stmt in enumerate(body)}
    if any(o is None or id(o) not in position for o in owners):
        return None  # one assignment sits in a branch or a loop: which one ran is not fixed
    if binding_count(ctx, scope, name.value) != len(values):  # `from m import kernel`, `case kernel:`, ...
        return None
    anchor = next((k for k, stmt in enumerate(body) if stmt is at or any(a is stmt for a in ctx.ancestors(at))), None)
    if anchor is None or (any(position[id(o)] == anchor for o in owners) and len(body[anchor].body) > 1):
        return None  # `kernel = b; f(kernel)`: which small statement of the line runs first is not placed here
    # the last in source order (`kernel = a; kernel = b` on one line: b)
    before = [v for o, v in zip(owners, values) if position[id(o)] < anchor]
    return before[-1] if before else None
