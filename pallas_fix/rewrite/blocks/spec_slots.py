"""Where a new BlockSpec goes at the call site when the old one is bound to a name.

A spec written once and bound to a name (`whole = pl.BlockSpec(x.shape, lambda i: (0, 0))`) may
serve several operands, or several pallas_calls. Editing the bound value would change it for all
of them, so a lifted operand gets its new spec in its own slot (the name's place in the spec list,
or the `out_specs=` value) and the name stays as it is for the others. A binding nobody reads any
more once its slots are rewritten is removed.
"""

from __future__ import annotations

import libcst as cst

from pallas_fix.analysis.binders import is_label
from pallas_fix.analysis.context import walk
from pallas_fix.core import names as N
from pallas_fix.rewrite.callsite.reading import CallSite
from pallas_fix.rewrite.text.edits import remove_statement
from pallas_fix.rewrite.callsite.spelling.operands import CallSiteError
from pallas_fix.rewrite.text.statements import siblings_of


def own_spec_node(cs: CallSite, target: cst.BaseExpression) -> cst.CSTNode:
    """The node a slot's new spec replaces: the spec call itself when only this slot reads it,
    the slot's own mention of the name when others read the name too."""
    resolved = cs.ctx.resolve_value(target, cs.anchor(target))
    if not isinstance(resolved, cst.Call):
        return target
    if not cs.other_reads(target, within_call=False):
        return resolved
    _check_movable(cs, resolved, target)
    return target


def _check_movable(cs: CallSite, spec: cst.Call, slot: cst.BaseExpression) -> None:
    """The new spec is written at the slot, from sizes read in the old spec: each name the old
    spec reads must mean at the slot what it meant where the spec was built (assigned at most
    once in every scope between them)."""
    ctx = cs.ctx
    spec_scope = ctx.scope_of(spec)
    chain = ctx.scope_chain(slot)
    if spec_scope not in chain:
        raise CallSiteError("the shared BlockSpec is built in another scope; give this pallas_call its own BlockSpec")
    between = chain[: chain.index(spec_scope) + 1]
    bound_by_lambdas = {p.name.value for n in walk(spec) if isinstance(n, cst.Lambda) for p in n.params.params}
    for node in walk(spec):
        if not isinstance(node, cst.Name) or node.value in bound_by_lambdas:
            continue
        if is_label(ctx.parent(node), node):
            continue
        if any(len(ctx.assignments(node.value, sc)) > 1 for sc in between):
            raise CallSiteError(
                f"`{node.value}`, read by the shared BlockSpec, is reassigned; give this pallas_call its own BlockSpec"
            )


def drop_unused_spec_names(cs: CallSite, edits: dict) -> None:
    """`whole = pl.BlockSpec(...)` whose every read is a slot the plan rewrites: remove it."""
    ctx = cs.ctx
    for node in [k for k in edits if isinstance(k, cst.Name)]:
        value = ctx.resolve_value(node, cs.site.call)
        if not (isinstance(value, cst.Call) and ctx.imports.is_(value.func, N.BLOCK_SPEC)):
            continue
        if any(r not in edits for r in cs.other_reads(node, within_call=False)):
            continue
        stmt = ctx.statement_of(value)
        if stmt is None or stmt in edits or not _binds_only(stmt, node.value, value):
            continue
        remove_statement(edits, stmt, siblings_of(ctx, stmt))


def _binds_only(stmt: cst.CSTNode, name: str, value: cst.BaseExpression) -> bool:
    """`name = value` and nothing else on the line."""
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return False
    assign = stmt.body[0]
    return (
        isinstance(assign, cst.Assign)
        and assign.value is value
        and len(assign.targets) == 1
        and isinstance(assign.targets[0].target, cst.Name)
        and assign.targets[0].target.value == name
    )


def drop_unused_index_defs(cs: CallSite, edits: dict) -> None:
    """`def idx_map(i, j): return i, 0` read as a lambda (rewrite.callsite.spelling.operands) whose every
    read sits inside a spec the plan rewrites: remove it."""
    ctx = cs.ctx
    defs = {}
    for slot in cs.slots.values():
        if slot.kind in ("in", "out"):
            try:
                fn = cs.spec_of(slot).index_map
            except CallSiteError:
                continue
            if isinstance(fn, cst.FunctionDef):
                defs[id(fn)] = fn
    unused = []
    for fn in defs.values():
        reads = [n for n in walk(ctx.scope_of(fn)) if isinstance(n, cst.Name) and n.value == fn.name.value and n is not fn.name]
        if fn not in edits and all(any(a in edits for a in ctx.ancestors(r)) for r in reads):
            unused.append(fn)
    # Last first, each handing its comments to the next statement that stays: in source order there.
    for fn in sorted(unused, key=lambda f: ctx.span(f).line, reverse=True):
        siblings = siblings_of(ctx, fn)
        after = siblings[siblings.index(fn) + 1 :]
        kept = next((s for s in after if all(s is not u for u in unused)), None)
        remove_statement(edits, fn, [fn] + ([kept] if kept is not None else []))
