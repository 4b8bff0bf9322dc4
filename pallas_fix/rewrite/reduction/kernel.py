"""R2's kernel side: one loop iteration per step of a new sequential grid axis. The carry is
initialised in `_init` on the first step, the body runs once per step between the carry's
loads and stores (carry_io), and what followed the loop runs in `_finalize` on the last step,
the statement that used the loop's result inside a larger expression first (loop_result_use).
What moves keeps its meaning (reduction_scopes, before_loop)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import libcst as cst

from pallas_fix.analysis.context import walk
from pallas_fix.rewrite.loops.before_loop import init_only_statements, side_effect_statements
from pallas_fix.rewrite.reduction.carries import Carry
from pallas_fix.rewrite.reduction.carry_io import (
    body_and_result, body_without_return, result_loads, step_bound_names, step_loads, store, unpack_to_drop, unpacked_names,
)
from pallas_fix.rewrite.reduction.carry_names import result_bound_names
from pallas_fix.rewrite.text.edits import remove_statement
from pallas_fix.rewrite.reduction.grid_reads import hoist_grid_reads
from pallas_fix.rewrite.loops.regions import LoopRegion
from pallas_fix.rewrite.loops.result_use import EmbeddedResult
from pallas_fix.rewrite.reduction.hygiene import WHEN_DEFS, check_reduction_scopes
from pallas_fix.rewrite.reduction.lanes import LaneLayout, final_statements, step_statements
from pallas_fix.rewrite.reduction.strip import Strip
from pallas_fix.rewrite.text.scopes import bindings
from pallas_fix.rewrite.blocks.scratch import add_params
from pallas_fix.rewrite.text.statements import capture, comments_only, siblings_of, stmt, strip_leading_blank_lines, when_def, with_blank_line
from pallas_fix.rewrite.text.syntax import code


@dataclass(frozen=True)
class Step:
    """What the kernel's rewrite needs to know: one loop iteration per step of grid axis `axis`."""

    region: LoopRegion
    pl: str  # how the file spells jax.experimental.pallas
    axis: int
    guard: Optional[str]  # the loop's traced upper bound, when steps past it must do nothing
    carry: Carry
    dropped: tuple = ()  # statements after the loop that go (deleted_results)
    embedded: Optional[EmbeddedResult] = None  # the statement using the result in a larger expression
    lanes: Optional[LaneLayout] = None  # (rows, 1) leaves kept lane-dense (reduction.lanes)
    strip: Optional[Strip] = None  # several windows per step, walked by a Python `for` (reduction.strip)
    jnp: str = "jnp"  # how the file spells jax.numpy (the strip helper reads it)

    @property
    def program_id(self) -> str:
        return f"{self.pl}.program_id({self.axis})"

    @property
    def steps_run(self) -> str:
        """How many iterations the loop ran, as the code after it (in `_finalize`) can say."""
        if self.guard is None:
            return f"{self.pl}.num_programs({self.axis})"
        step = self.region.loop.step
        return self.guard if step is None or self.region.env.static_int(step) == 1 else f"{self.pl}.cdiv({self.guard}, {code(step)})"


def kernel_edits(edits: dict, step: Step, lifted_ids: set[int]) -> None:
    """Init on the first step, the body once per step, and what followed the loop on the last."""
    region = step.region
    ctx = region.ctx
    effect_stmts = side_effect_statements(region.analysis, region.site, region.before)
    if step.strip is not None and step.strip.local is None:
        lifted_ids = set()  # the windows stay, inside the strip's blocks, and so does what computes their starts
    removable = list(region.dead_slice_statements(lifted_ids))
    if step.guard is None:
        removable += list(region.bound_stmts)  # the causal guard still reads the bound
    result = result_bound_names(region)
    embedded = step.embedded
    readers = region.after + ([embedded.without_call()] if embedded is not None else [])
    init_only = init_only_statements(region.before, region.loop, readers, result)
    removable += [s for s in init_only if s not in removable and s not in effect_stmts]
    if embedded is not None:  # what the statement reads besides the loop call stays bound
        removable = [s for s in removable if not set(bindings(s, nested=False)) & embedded.rest_names]
    unpack = unpack_to_drop(region, step.carry)
    removable += list(step.dropped)
    removed = [region.statement, region.body_def_stmt, *removable]
    check_reduction_scopes(ctx, region, removed, step_bound_names(region, step.carry, unpack), result, embedded)
    effects, after = [], []
    for s in effect_stmts:
        edits[s] = capture(effects)
    for s in region.after:
        edits[s] = capture(after)
    need_index = step.strip is None and (region.index_needed(lifted_ids) or step.guard is not None)
    body_holder = region.take_body_def(edits)
    edits[region.statement] = _replace_loop(step, need_index, effects, body_holder, unpack, after)
    edits[region.site.kernel] = _finish_kernel(step, after)
    for s in removable:
        remove_statement(edits, s, siblings_of(ctx, s))


def _replace_loop(step: Step, need_index: bool, effects: list, body_holder: dict, unpack, after: list):
    """The loop statement becomes the init, the loads, the body and the stores; a statement that
    used the result inside a larger expression goes first into `after`, over the carry's value."""
    region, pid, carry = step.region, step.program_id, step.carry
    index = region.loop.index_name

    def replace(updated: cst.CSTNode):
        if carry.leaves:
            stmts, result = body_and_result(region.updated_body(body_holder, updated), drop_unpack=unpack is not None)
            if step.lanes is not None:
                stmts, result = step_statements(region.ctx, step.lanes, carry, stmts, result, unpack)
        else:
            stmts, result = body_without_return(region.updated_body(body_holder, updated)), None
        out: list[cst.BaseStatement] = []
        step_id = pid
        if need_index:
            out.append(stmt(f"{index} = {region.index_value_text(pid)}"))
            if region.index_value_text(pid) == pid:
                step_id = index
        init_body = list(effects) + [stmt(f"{l.place} = {code(l.init)}") for l in carry.scratch]
        if init_body:  # a carry of step counters alone has nothing to initialise
            out.append(when_def(step.pl, f"{step_id} == 0", "_init", init_body))
        if step.strip is not None:
            body = strip_statements(step, unpack, step_id, stmts, result)
        elif carry.leaves:
            body = step_loads(region, carry, unpack, step_id) + stmts + store(result, carry)
        else:
            body = stmts
        if step.guard is not None and step.strip is None:  # a strip tests each window (strip_statements)
            out.append(when_def(step.pl, f"{index} < {step.guard}", "_step", body))
        else:
            body[0] = with_blank_line(body[0])
            out.extend(body)
        out[0] = _with_comments(out[0], updated, body_holder)
        if step.embedded is not None:
            final = step.embedded.finalize_form(updated, carry.value_text(step.steps_run, final=True))
            after.insert(0, final.with_changes(leading_lines=[]))  # its comments stay with the step code
        return cst.FlattenSentinel(out)

    return replace


def strip_statements(step: Step, unpack, step_id: str, stmts: list, result) -> list[cst.BaseStatement]:
    """The carry loaded once, the step's windows walked by a Python `for` over static window
    numbers (each iteration the body, then the carry rebound to its result), the carry stored
    once (reduction.strip)."""
    region, carry = step.region, step.carry
    assert step.strip is not None
    index = region.loop.index_name
    if step.guard is not None:  # a causal bound: each window under it, the carry through scratch (reduction.strip)
        assert step.strip.local is not None  # strip_plan binds the global index where there is a guard
        body = step_loads(region, carry, unpack, step_id) + stmts + store(result, carry) if carry.leaves else stmts
        window = [stmt(f"{index} = {step.strip.global_index}"), when_def(step.pl, f"{index} < {step.guard}", "_step", body)]
        return [_for(step.strip.local, step.strip.count, window)]
    if step.strip.local is not None:  # the body reads the index beyond its windows: its global value
        stmts = [stmt(f"{index} = {step.strip.global_index}"), *stmts]
        index = step.strip.local
    if not carry.leaves:
        return [_for(index, step.strip.count, stmts)]
    if unpack is not None:
        target = unpack.body[0].targets[0].target  # type: ignore[attr-defined]
        names = unpacked_names(carry, unpack)  # every leaf named (strip_plan)
        stores = [stmt(f"{leaf.place} = {names[n]}") for n, leaf in enumerate(carry.leaves) if leaf.ref is not None]
    else:
        target = cst.Name(region.carry_name)
        stores = store(target, carry)
    return step_loads(region, carry, unpack, step_id) + [_for(index, step.strip.count, stmts + _rebind(target, result))] + stores


def _rebind(target: cst.BaseExpression, result: cst.BaseExpression) -> list[cst.BaseStatement]:
    """`target = result` at the end of a window, less the names the body already left bound to
    their new values (`acc += ...; return acc`; `m, l, acc = m_new, l, acc` -> `m = m_new`)."""
    if code(target) == code(result):
        return []
    pairs = _name_pairs(target, result)
    if pairs is None:
        return [stmt(f"{code(target)} = {code(result)}")]
    pairs = [(t, v) for t, v in pairs if t != v]  # the right side is read before any name is bound
    if not pairs:
        return []
    return [stmt(f"{', '.join(t for t, _ in pairs)} = {', '.join(v for _, v in pairs)}")]


def _name_pairs(target: cst.BaseExpression, result: cst.BaseExpression) -> Optional[list[tuple[str, str]]]:
    """(name, value text) per element where both sides are flat tuples of the same length and
    the target's elements are plain names; None otherwise."""
    if not isinstance(target, cst.Tuple) or not isinstance(result, cst.Tuple):
        return None
    if len(target.elements) != len(result.elements) or any(isinstance(e, cst.StarredElement) for e in (*target.elements, *result.elements)):
        return None
    if not all(isinstance(e.value, cst.Name) for e in target.elements):
        return None
    return [(e.value.value, code(v.value)) for e, v in zip(target.elements, result.elements)]


def _for(index: str, count: str, body: list) -> cst.For:
    loop = cst.parse_statement(f"for {index} in range({count}):\n    pass\n")
    assert isinstance(loop, cst.For)
    body = list(body)
    if body and hasattr(body[0], "leading_lines"):  # its comments stay, a blank line above them goes
        lines = list(body[0].leading_lines)
        while lines and lines[0].comment is None:
            lines.pop(0)
        body[0] = body[0].with_changes(leading_lines=lines)
    return loop.with_changes(body=loop.body.with_changes(body=body))


def _with_comments(first: cst.BaseStatement, loop_stmt: cst.CSTNode, body_holder: dict) -> cst.BaseStatement:
    """Comments above the loop and above `def body` stay with the code that replaces them."""
    comments = [l for l in getattr(loop_stmt, "leading_lines", ()) if l.comment is not None]
    comments += body_holder.get("comments", [])
    if not comments or not hasattr(first, "leading_lines"):
        return first
    lines = list(first.leading_lines)
    blank = [l for l in lines if l.comment is None][:1]
    return first.with_changes(leading_lines=blank + comments + [l for l in lines if l.comment is not None])


def _finish_kernel(step: Step, after: list):
    """Scratch ref parameters, and the code after the loop in a `_finalize` on the last step."""

    def finish(fn: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(fn, cst.FunctionDef)
        fn = add_params(fn, [l.ref for l in step.carry.scratch])
        lanes = step.lanes
        if after and lanes is not None:
            after[:] = final_statements(step.region.ctx, lanes, step.carry, step.region, after)
        if after:
            used = {x.value for st in after for x in walk(st) if isinstance(x, cst.Name)}
            loads = result_loads(step.region, step.carry, used, step.steps_run)
            last = f"{step.program_id} == {step.pl}.num_programs({step.axis}) - 1"
            moved = [comments_only(after[0]), *after[1:]]  # no blank line under the loads
            fdef = when_def(step.pl, last, "_finalize", loads + moved)
            fn = fn.with_changes(body=fn.body.with_changes(body=[*fn.body.body, fdef]))
        fn = strip_leading_blank_lines(hoist_grid_reads(fn, step.pl, set(WHEN_DEFS)))
        helpers = []
        if lanes is not None and any(isinstance(n, cst.Name) and n.value == lanes.helper for n in walk(fn)):
            helpers.append(lanes.helper_def())
        if step.strip is not None and step.strip.windows.added:
            helpers.append(step.strip.helper_def(step.jnp))
        if helpers:
            blank = [l for l in fn.leading_lines if l.comment is None] or [cst.EmptyLine()]
            return cst.FlattenSentinel([h.with_changes(leading_lines=blank) for h in helpers] + [fn])
        return fn

    return finish
