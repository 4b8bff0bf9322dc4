"""R2 moves code between scopes; no name may change meaning on the way (the reduction's hygiene).

The rewrite splits one kernel scope three ways:
- the loop body runs inline, at kernel level, on every grid step: its own bindings, the index
  (`k = pl.program_id(n)`) and the loads of the carry become kernel-level names;
- the code after the loop moves into `_finalize`, a function of its own: what it binds is local
  there, and it reads the loop's result from loads at its top;
- statements with an effect move into `_init` (before_loop.side_effect_statements).

So, besides R1's guarantee (loop_checks.check_hygiene: the body's bindings and the index mean
nothing at kernel level yet), the rewrite's own kernel-level names (the carry's loads, `_init`,
`_step`, `_finalize`) must be fresh; code after the loop must not read a name the step now binds
at kernel level (in the original it saw the kernel's own binding, or none) unless `_finalize`
binds it itself; and nothing that stays at kernel level may mention a name `_finalize` binds: a
closure defined before the loop that reads the result would read the kernel-level name, which no
longer holds it, and a name bound both before and after the loop would be local to `_finalize`
and unbound where it is first read there.
"""

from __future__ import annotations

import libcst as cst

from pallas_fix.analysis.context import ModuleContext, walk
from pallas_fix.core.plans import Refuse
from pallas_fix.rewrite.loops.checks import check_hygiene
from pallas_fix.rewrite.text.scopes import bindings, param_names
from pallas_fix.rewrite.text.statements import body_statements
from pallas_fix.rewrite.text.syntax import variable_names

WHEN_DEFS = ("_init", "_step", "_finalize")


def check_reduction_scopes(ctx: ModuleContext, region, removed: list, step_names: set[str], result_names: set[str],
                           embedded=None) -> None:
    """`removed`: the kernel statements the rewrite deletes; `step_names`: what the step's loads
    bind at kernel level; `result_names`: what the loop's result target binds; `embedded`: the
    loop statement when it uses the result inside a larger expression (it moves to `_finalize`
    too, less the loop call: loop_result_use.EmbeddedResult)."""
    kernel = region.site.kernel
    loop = region.loop
    after = list(region.after)
    _refuse_scope_statements(ctx, [region.body, *after])
    check_hygiene(ctx, kernel, loop, None, removed + after)
    skip = {id(s) for s in removed + after}
    kept = [s for s in body_statements(kernel) if id(s) not in skip]
    taken = _used_names(kernel)
    clash = sorted(taken & set(WHEN_DEFS))
    if clash:
        raise Refuse(f"the kernel already uses the name `{clash[0]}`, which the rewrite defines")
    _refuse_mentions(ctx, kernel, kept, step_names - {loop.index_name}, "inlining the loop body would bind")
    step_level = {loop.index_name} | step_names | _own_bindings(region.body)
    finalize_locals = result_names | {n for s in after for n in bindings(s, nested=False)}
    moved = [(s, variable_names(s)) for s in after]
    if embedded is not None:
        finalize_locals |= set(bindings(embedded.statement, nested=False))
        moved.insert(0, (embedded.statement, set(embedded.rest_names)))
    for stmt, names in moved:
        reads = sorted((names & step_level) - finalize_locals)
        if reads:
            raise Refuse(
                f"the code after the loop (line {ctx.span(stmt).line}) reads `{reads[0]}`, which the loop body would "
                "bind at kernel level once it runs on every grid step; rename it in the body"
            )
    _refuse_mentions(ctx, kernel, kept, finalize_locals, "the code after the loop moves into `_finalize`, where it binds")


def _refuse_mentions(ctx: ModuleContext, kernel, kept: list, names: set[str], why: str) -> None:
    """No kernel parameter is one of `names`, and no statement that stays mentions one."""
    clash = sorted(names & param_names(kernel))
    if clash:
        raise Refuse(f"{why} `{clash[0]}`, a parameter of the kernel; rename it")
    for stmt in kept:
        clash = sorted(names & variable_names(stmt))
        if clash:
            raise Refuse(f"{why} `{clash[0]}`, which line {ctx.span(stmt).line} also uses; rename it")


def _refuse_scope_statements(ctx: ModuleContext, roots: list) -> None:
    """`global` / `nonlocal` would mean another scope once the body is inline or the code after the
    loop sits in `_finalize`."""
    for root in roots:
        for node in walk(root):
            if isinstance(node, (cst.Global, cst.Nonlocal)):
                raise Refuse(f"`{ctx.code(node).strip()}` (line {ctx.span(node).line}) would name another scope after the rewrite")


def _used_names(kernel: cst.FunctionDef) -> set[str]:
    return {n.value for n in walk(kernel) if isinstance(n, cst.Name)}


def _own_bindings(body) -> set[str]:
    if not isinstance(body, cst.FunctionDef):
        return set()
    return {n for s in body_statements(body) for n in bindings(s, nested=False)}
