"""R2 — lift a reduction loop into a sequential grid axis with scratch carries (fixes PF102).

Before (inside a (M // bm, N // bn) grid):
    def kernel(x_ref, y_ref, o_ref):
        def body(k, acc):
            return acc + jnp.dot(x_ref[:, pl.ds(k * bk, bk)], y_ref[pl.ds(k * bk, bk), :],
                                 preferred_element_type=jnp.float32)
        acc = lax.fori_loop(0, K // bk, body, jnp.zeros((bm, bn), jnp.float32))
        o_ref[...] = acc.astype(o_ref.dtype)

After (grid (M // bm, N // bn, K // bk), scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)]):
    def kernel(x_ref, y_ref, o_ref, acc_ref):
        @pl.when(pl.program_id(2) == 0)
        def _init():
            acc_ref[...] = jnp.zeros((bm, bn), jnp.float32)

        acc = acc_ref[...]
        acc_ref[...] = acc + jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32)

        @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
        def _finalize():
            acc = acc_ref[...]
            o_ref[...] = acc.astype(o_ref.dtype)

Recipe: match a fori_loop at kernel level whose body slices refs with its index and carries a
value; check the backend runs grid axes in order (never Triton), that every carry leaf has an
initial value of known shape and exactly known dtype (a weakly typed `jnp.full(shape, 0)` or a
Python `int` dtype is refused: the scratch buffer must have the carry's dtype), that only inputs
are sliced by the index (outputs stay resident) and that the sizes can be written at the call
site; then move each carry leaf to scratch, initialise it on the first step, run the body once
per step, and run what followed the loop on the last step. A trip count that depends on
pl.program_id (causal attention) becomes a full-length axis whose body is guarded by
`pl.when(k < upper)`.

A loop (`fori_loop` or `pl.loop`) that carries nothing but accumulates into an output or scratch
ref at a place every iteration shares (`o_ref[...] = 0` before it, `o_ref[...] += x @ y` in it:
the PF101 form of the same reduction) is lifted the same way with no scratch: the output block is
the accumulator, resident across the new innermost sequential axis, and what zeroed it before
the loop runs in `_init`. Inputs stay read-only blocks; a body that writes an input is refused.

What moves keeps its meaning: the statements before the loop that write a ref (through any call,
analysis.effects) move into `_init` only when nothing that stays depends on their order
(before_loop.side_effect_statements); the carry is bound as the body binds it (carry_io); and
no name changes meaning where the body now runs at kernel level or where the code after the
loop now runs inside `_finalize` (reduction_scopes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import libcst as cst

from pallas_fix.analysis.context import walk
from pallas_fix.core.model import Backend, FixSafety, IndexUse, LoopInfo, Origin
from pallas_fix.core.plans import FixPlan, Recipe, Refuse
from pallas_fix.rewrite import imports
from pallas_fix.rewrite.before_loop import init_only_statements, side_effect_statements
from pallas_fix.rewrite.blockplan import CallEdits, NewAxis, RefBlock, kernel_subscript_edit
from pallas_fix.rewrite.callsite import CallSite
from pallas_fix.rewrite.common import attempt, check_single_call, per_use
from pallas_fix.rewrite.carries import Carry, carry_model, result_bound_names
from pallas_fix.rewrite.carry_io import (
    body_and_result, body_without_return, result_loads, step_bound_names, step_loads, store, unpack_to_drop,
)
from pallas_fix.rewrite.edits import apply_edits, remove_statement
from pallas_fix.rewrite.grid_reads import hoist_grid_reads
from pallas_fix.rewrite.loop_regions import LoopRegion, grid_translator, loop_region, uses_by_loop
from pallas_fix.rewrite.reduction_scopes import WHEN_DEFS, check_reduction_scopes
from pallas_fix.rewrite.ref_access import accessed_slots, check_kernel_ref_uses, is_write, lifted_block, lifted_element_ids, ref_accesses
from pallas_fix.rewrite.scratch import add_params, add_scratch, scratch_spelling
from pallas_fix.rewrite.statements import body_statements, capture, siblings_of, stmt, strip_leading_blank_lines, when_def, with_blank_line
from pallas_fix.rewrite.syntax import code, paren_text

NAME = "lift-reduction"


# -- match and check --------------------------------------------------------------------------------
def _plan(analysis, loop: LoopInfo, uses: list[IndexUse], *, windows_required: bool = True) -> FixPlan:
    ctx = analysis.ctx
    site = uses[0].kernel_site
    _check_site(analysis, site, loop)
    cs = CallSite(ctx, site, analysis.detection.envs.get(site.kernel))
    region = loop_region(analysis, site, loop, reduction=True)
    translate = grid_translator(ctx, site, cs)
    blocks = _input_blocks(analysis, region, cs, translate, windows_required)
    check_kernel_ref_uses(analysis, site, region, {b.param for b in blocks})
    trip, guard = _trip_count(region, cs, translate, blocks[0] if blocks else None)
    carry = carry_model(analysis, region, loop, translate) if loop.carries else _no_carry(region)
    semantics = "arbitrary" if site.backend is Backend.TPU else "sequential"
    call_edits = CallEdits(cs, blocks, NewAxis(trip=trip, name=loop.index_name, semantics=semantics))
    scratch, space = scratch_spelling(ctx, site.backend)
    if carry.leaves:
        add_scratch(cs, call_edits, [f"{scratch.text}.{space}({code(l.shape)}, {code(l.dtype)})" for l in carry.leaves])
    edits = call_edits.build()
    for b in blocks:
        for sub, dims in b.subscripts:
            edits[sub] = kernel_subscript_edit(dims)
    pl = imports.spelling(ctx, imports.PALLAS)
    step = _Step(region, pl.text, len(cs.grid), guard, carry)
    _kernel_edits(edits, step, lifted_element_ids(blocks))
    needed = [pl.add, scratch.add]

    def rewrite(module: cst.Module) -> cst.Module:
        return imports.drop_unused_loop_imports(imports.add_imports(apply_edits(module, edits)[0], needed))

    description = (
        f"lifted the reduction over `{loop.index_name}` in `{site.kernel_name}` into sequential grid axis {step.axis}"
        f"{' with scratch ' + ', '.join(l.ref for l in carry.leaves) if carry.leaves else ', its outputs resident across it'}"
        f"{region.loop_comments_note()}"
    )
    return FixPlan(NAME, FixSafety.UNSAFE, uses, description, rewrite, site=site)


def _no_carry(region: LoopRegion) -> Carry:
    """A loop that accumulates into a resident ref: nothing to keep in scratch between steps. Its
    (unused) carry parameter must be read nowhere but a final `return`: the inlined body has none."""
    if region.loop.result_target is not None:
        raise Refuse("the loop carries nothing, but its result is used")
    name = region.carry_name
    if name is not None and isinstance(region.body, cst.FunctionDef):
        stmts = body_statements(region.body)
        last = stmts[-1] if stmts else None
        final = last.body[-1] if isinstance(last, cst.SimpleStatementLine) and isinstance(last.body[-1], cst.Return) else None
        reads = [n for n in walk(region.body.body) if isinstance(n, cst.Name) and n.value == name
                 and not (final is not None and n is final.value)]
        if reads:
            raise Refuse(f"the loop body reads its carry `{name}`, which the lifted kernel would not have")
    return Carry([], None)


def _check_site(analysis, site, loop: LoopInfo) -> None:
    if site is None or site.kernel is None:
        raise Refuse("the kernel is not defined in this module")
    if site.backend is Backend.TRITON:
        raise Refuse("Triton runs grid axes as independent programs, so a reduction cannot live on a grid axis")
    if site.backend is Backend.UNKNOWN:
        raise Refuse("the backend is unknown (no compiler_params or backend import); name it with --backend tpu|mosaic-gpu")
    if loop.kind != "fori_loop" and loop.carries:
        raise Refuse("only lax.fori_loop reductions are lifted (pl.loop with init_carry is not yet)")
    if sum(1 for s in analysis.sites if s.kernel is site.kernel) > 1:
        raise Refuse(f"kernel `{site.kernel_name}` is used by more than one pallas_call")
    check_single_call(analysis, site)  # also: no decorator or other caller runs the kernel's body


def plan_without_windows(analysis, loop: LoopInfo, uses: list[IndexUse]) -> FixPlan:
    """R2 for a loop that slices no ref by its index, only reads a table at it: R6 (scalar
    prefetch) lifts such a loop (paged attention's loop over pages) before its table picks the
    blocks. On its own R2 does not lift it: nothing would be pipelined."""
    return _plan(analysis, loop, uses, windows_required=False)


def is_reduction(analysis, loop: LoopInfo, uses: list[IndexUse]) -> bool:
    """The loops R2's planner takes (the rest are R1's): a carry, or an output accumulated in place."""
    return loop.carries or _accumulates(analysis, loop, uses)


def _input_blocks(analysis, region: LoopRegion, cs: CallSite, translate, required: bool = True) -> list[RefBlock]:
    """The inputs the loop index slices, as blocks along the new axis; outputs stay resident."""
    blocks: list[RefBlock] = []
    for ref, group, slot in accessed_slots(analysis, region, cs):
        if not group.lifted:
            if group.written and slot.kind not in ("out", "scratch"):
                raise Refuse(f"the loop body writes the {slot.kind} `{ref}`; only the carry, outputs and scratch may "
                             "change between iterations")
            continue  # an output (or scratch) the new axis does not move: resident across its steps
        if slot.kind == "out":
            raise Refuse(f"the output `{ref}` is sliced by the loop index, so its block could not stay resident")
        if slot.kind != "in":
            raise Refuse(f"`{ref}` is a {slot.kind} buffer; only inputs can be blocked along the reduction")
        if any(is_write(analysis.ctx, s) for s in group.subscripts):
            raise Refuse(f"the loop body writes `{ref}`")
        blocks.append(lifted_block(group, region.loop, ref, translate))
    if not blocks and required:
        raise Refuse("no ref is sliced by the loop index in block-shaped windows")
    return blocks


def _trip_count(region: LoopRegion, cs: CallSite, translate, first: Optional[RefBlock]) -> tuple[cst.BaseExpression, Optional[str]]:
    """The new axis's size, and the `pl.when` guard a trip count that depends on pl.program_id
    (causal attention) needs: then the axis runs the full length of the first blocked input."""
    loop, env = region.loop, region.env
    upper_val = env.value(loop.upper)
    if not upper_val.dynamic:
        trip = region.trip_count(translate)
        if trip is None:
            raise Refuse(f"the trip count ({code(loop.lower)} to {code(loop.upper)}) cannot be written at the pallas_call")
        return trip, None
    if upper_val.origin is not Origin.PROGRAM_ID or env.static_int(loop.lower) != 0:
        raise Refuse(f"the trip count `{code(loop.upper)}` is traced and not a function of pl.program_id")
    if first is None:
        raise Refuse(f"the trip count `{code(loop.upper)}` depends on pl.program_id and no ref sliced by the loop index sizes the axis")
    full = cs.kernel_shape_dim(first.param, first.dim)
    if full is None:
        raise Refuse(f"cannot write the full length of `{first.param}` at the pallas_call for the causal axis")
    return cst.parse_expression(f"{paren_text(code(full))} // {paren_text(code(first.size))}"), code(loop.upper)


# -- rewrite the kernel -----------------------------------------------------------------------------
@dataclass(frozen=True)
class _Step:
    """What the kernel's rewrite needs to know: one loop iteration per step of grid axis `axis`."""

    region: LoopRegion
    pl: str  # how the file spells jax.experimental.pallas
    axis: int
    guard: Optional[str]  # the loop's traced upper bound, when steps past it must do nothing
    carry: Carry

    @property
    def program_id(self) -> str:
        return f"{self.pl}.program_id({self.axis})"


def _kernel_edits(edits: dict, step: _Step, lifted_ids: set[int]) -> None:
    """Init on the first step, the body once per step, and what followed the loop on the last."""
    region = step.region
    ctx = region.ctx
    effect_stmts = side_effect_statements(region.analysis, region.site, region.before)
    removable = list(region.dead_slice_statements(lifted_ids))
    if step.guard is None:
        removable += list(region.bound_stmts)  # the causal guard still reads the bound
    result = result_bound_names(region)
    init_only = init_only_statements(region.before, region.loop, region.after, result)
    removable += [s for s in init_only if s not in removable and s not in effect_stmts]
    unpack = unpack_to_drop(region, step.carry)
    removed = [region.statement, region.body_def_stmt, *removable]
    check_reduction_scopes(ctx, region, removed, step_bound_names(region, unpack), result)
    effects, after = [], []
    for s in effect_stmts:
        edits[s] = capture(effects)
    for s in region.after:
        edits[s] = capture(after)
    need_index = region.index_needed(lifted_ids) or step.guard is not None
    body_holder = region.take_body_def(edits)
    edits[region.statement] = _replace_loop(step, need_index, effects, body_holder, unpack)
    edits[region.site.kernel] = _finish_kernel(step, after)
    for s in removable:
        remove_statement(edits, s, siblings_of(ctx, s))


def _replace_loop(step: _Step, need_index: bool, effects: list, body_holder: dict, unpack):
    region, pid, carry = step.region, step.program_id, step.carry
    index = region.loop.index_name

    def replace(updated: cst.CSTNode):
        if carry.leaves:
            stmts, result = body_and_result(region.updated_body(body_holder, updated), drop_unpack=unpack is not None)
        else:
            stmts, result = body_without_return(region.updated_body(body_holder, updated)), None
        out: list[cst.BaseStatement] = []
        step_id = pid
        if need_index:
            out.append(stmt(f"{index} = {region.index_value_text(pid)}"))
            if region.index_value_text(pid) == pid:
                step_id = index
        init_body = list(effects) + [stmt(f"{l.ref}[...] = {code(l.init)}") for l in carry.leaves]
        out.append(when_def(step.pl, f"{step_id} == 0", "_init", init_body))
        body = step_loads(region, carry, unpack) + stmts + store(result, carry) if carry.leaves else stmts
        if step.guard is not None:
            out.append(when_def(step.pl, f"{index} < {step.guard}", "_step", body))
        else:
            body[0] = with_blank_line(body[0])
            out.extend(body)
        out[0] = _with_comments(out[0], updated, body_holder)
        return cst.FlattenSentinel(out)

    return replace


def _with_comments(first: cst.BaseStatement, loop_stmt: cst.CSTNode, body_holder: dict) -> cst.BaseStatement:
    """Comments above the loop and above `def body` stay with the code that replaces them."""
    comments = [l for l in getattr(loop_stmt, "leading_lines", ()) if l.comment is not None]
    comments += body_holder.get("comments", [])
    if not comments or not hasattr(first, "leading_lines"):
        return first
    lines = list(first.leading_lines)
    blank = [l for l in lines if l.comment is None][:1]
    return first.with_changes(leading_lines=blank + comments + [l for l in lines if l.comment is not None])


def _finish_kernel(step: _Step, after: list):
    """Scratch ref parameters, and the code after the loop in a `_finalize` on the last step."""

    def finish(fn: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(fn, cst.FunctionDef)
        fn = add_params(fn, [l.ref for l in step.carry.leaves])
        if after:
            used = {x.value for st in after for x in walk(st) if isinstance(x, cst.Name)}
            loads = result_loads(step.region, step.carry, used)
            last = f"{step.program_id} == {step.pl}.num_programs({step.axis}) - 1"
            fdef = when_def(step.pl, last, "_finalize", loads + list(after))
            fn = fn.with_changes(body=fn.body.with_changes(body=[*fn.body.body, fdef]))
        fn = hoist_grid_reads(fn, step.pl, set(WHEN_DEFS))
        return strip_leading_blank_lines(fn)

    return finish


def _planner(analysis) -> dict:
    """Loops that carry a value, and loops that carry nothing but accumulate into a ref every
    iteration writes at the same place (`o_ref[...] += x_ref[:, pl.ds(k * bk, bk)] @ ...`): both
    are reductions. Other carry-less loops are lift-loop's (R1) alone."""
    groups = [(loop, uses) for loop, uses in uses_by_loop(analysis) if loop.carries or _accumulates(analysis, loop, uses)]
    return per_use(groups, lambda loop, uses: attempt(NAME, _plan, analysis, loop, uses))


def _accumulates(analysis, loop: LoopInfo, uses: list[IndexUse]) -> bool:
    site = uses[0].kernel_site
    if site is None or site.kernel is None:
        return False
    try:
        region = loop_region(analysis, site, loop, reduction=True)
        return any(g.written and not g.lifted for g in ref_accesses(analysis, region, loop).values())
    except Refuse:
        return False


RECIPE = Recipe(
    NAME, frozenset({"PF101", "PF102"}), _planner, command="LiftReduction",
    description="Lift reductions (a carried value, or accumulation into a resident output) into sequential grid axes (R2).",
)
