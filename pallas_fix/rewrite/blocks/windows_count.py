"""A strip-mined lift's count of windows per step (rewrite.reduction.strip), bound in the
wrapper before the statement that runs the pallas_call: `windows_per_step =
_windows_per_step(trip, (window block shape, dtype), ...)` over the strip-mined operands, the
helper the rewrite adds choosing it for the chip at trace time. Where the guards go
(rewrite.guards.shape_guards.placement): the operands and sizes exist there."""

from __future__ import annotations

import libcst as cst

from pallas_fix.rewrite.blocks.plan import NewAxis
from pallas_fix.rewrite.callsite.dtypes import operand_dtype
from pallas_fix.rewrite.callsite.reading import CallSite
from pallas_fix.rewrite.callsite.spelling.operands import CallSiteError
from pallas_fix.rewrite.guards.shape_guards import placement
from pallas_fix.rewrite.text.edits import Edit, chain
from pallas_fix.analysis.binders import none_tested
from pallas_fix.analysis.context import walk
from pallas_fix.rewrite.text.scopes import bindings
from pallas_fix.rewrite.text.syntax import code, variable_names


def add_windows_count(edits: dict, cs: CallSite, axis: NewAxis, params: list[str], window_shapes: dict[str, str]) -> None:
    """Put the count before the call's statement (before its guards, a comment above it kept
    above); CallSiteError where it cannot be written."""
    windows = axis.windows
    assert windows is not None
    if cs.site.forwarded:
        raise CallSiteError("the sizes are passed in by a helper's call; the windows per step are not counted there")
    anchor = placement(cs.ctx, cs.site)
    if anchor is None:
        raise CallSiteError("no statement of the wrapper runs the pallas_call to count the windows per step before")
    blocks = []
    function = cs.ctx.enclosing_function(anchor)
    for param in params:
        dtype = operand_dtype(cs, param)
        if dtype is None or param not in window_shapes:
            raise CallSiteError(f"cannot write the dtype or the window of `{param}` at the call site (pass its operand to "
                                "the pallas_call as a plain name of the wrapper)")
        text = code(dtype)
        if isinstance(dtype, cst.Attribute) and _tested_for_none(function, code(dtype.value)):
            text = f'getattr({code(dtype.value)}, "dtype", "float32")'  # an optional operand: counted as f32 when None
        blocks.append(f"({window_shapes[param]}, {text})")
    value = f"{windows.helper}({code(axis.trip)}, {', '.join(blocks)})"
    at = _first_use(cs, anchor, params, variable_names(cst.parse_expression(value)))
    chain(edits, at, _before(cst.parse_statement(f"{windows.name} = {value}")))


def _first_use(cs: CallSite, anchor: cst.CSTNode, params: list[str], reads: set[str]) -> cst.CSTNode:
    """The statement the count goes before: the first of the anchor's block that reads it (the
    grid or a spec may be built before the call), where every name the count reads has the value
    it has at the call (none is bound again from there on)."""
    parent = cs.ctx.parent(anchor)
    siblings = list(getattr(parent, "body", ()))
    end = next(n for n, s in enumerate(siblings) if s is anchor)
    start = end
    for node in _uses(cs, params):
        chain_up = [node, *cs.ctx.ancestors(node)]
        n = next((n for n, s in enumerate(siblings) if any(a is s for a in chain_up)), None)
        if n is None:
            raise CallSiteError(f"the grid or a BlockSpec is built away from the statement that runs the pallas_call "
                                f"(line {cs.ctx.span(node).line}), where the windows per step cannot be counted first")
        start = min(start, n)
    rebound = set().union(*(set(bindings(s, nested=True)) for s in siblings[start:end]))
    if reads & rebound:
        raise CallSiteError(f"`{sorted(reads & rebound)[0]}` is bound again between where the grid or a BlockSpec is "
                            "built and the pallas_call; the windows per step cannot be counted once for both")
    return siblings[start]


def _tested_for_none(function, name: str) -> bool:
    """Does the wrapper test `name is None` / `is not None` (an optional operand)?"""
    return any((tested := none_tested(node)) is not None and code(tested) == name
               for node in (walk(function) if function is not None else ()))


def _uses(cs: CallSite, params: list[str]) -> list[cst.CSTNode]:
    """Where the count is read: the grid, and the strip-mined operands' specs (as written, and
    what a name there is bound to), which must all be evaluated after the count is bound."""
    nodes = []
    for expr in [cs.site.kw("grid"), cs.site.grid_spec]:
        if expr is not None:
            nodes += [expr, cs.ctx.resolve_value(expr, cs.anchor(expr))]
    for param in params:
        slot = cs.slots[param]
        container = cs.in_specs_expr if slot.kind == "in" else cs.out_specs_expr
        if container is None:
            continue  # written as a new keyword of the call
        expr = cs.spec_list(slot.kind)[slot.index]
        nodes += [container, cs.ctx.resolve_value(container, cs.anchor(container))]
        if expr is not None:
            nodes += [expr, cs.ctx.resolve_value(expr, cs.anchor(expr))]
    return [n for n in nodes if n is not None]


def _before(count: cst.BaseStatement) -> Edit:
    def edit(out: cst.CSTNode):
        rest = list(out.nodes) if isinstance(out, cst.FlattenSentinel) else [out]
        first = count
        if hasattr(rest[0], "leading_lines"):  # comments above the call stay above the count
            first = count.with_changes(leading_lines=rest[0].leading_lines)
            rest[0] = rest[0].with_changes(leading_lines=())
        return cst.FlattenSentinel([first, *rest])

    return edit
