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

Recipe: match a fori_loop, or a `@pl.loop(..., init_carry=...)` (the decorated name is bound to
the final carry), at kernel level whose body slices refs with its index and carries a value;
check the backend runs grid axes in order (never Triton), that every carry leaf has an initial
value of known shape and exactly known dtype (a weakly typed `jnp.full(shape, 0)`, a Python
number or a Python `int` dtype is refused: the scratch buffer must have the carry's dtype) and
that the sizes can be written at the call site (carry_shapes follows `d = q.shape[-1]` back to
the ref `q` was loaded from); then move each carry leaf to scratch (a tuple, list, dict,
NamedTuple or nested carry is flattened to its leaves, carry_tree; a 0-d leaf gets a (1,) SMEM
buffer), initialise it on the first step, run the body once per step, and run what followed the
loop on the last step. A leaf that only counts steps (`jnp.int32(0)` returned as `n + 1`) needs
no buffer: its value follows from pl.program_id (carry_counters). A statement that uses the
result inside a larger expression (`o_ref[...] = fori_loop(...) + b`) runs in `_finalize` over
the carry's value (loop_result_use). Inputs the index slices become blocks along the new axis,
and so do outputs each step writes its own block of (a scan); other outputs stay resident. A
trip count that depends on pl.program_id (causal attention) becomes a full-length axis whose
body is guarded by `pl.when(k < upper)`, and the inputs' index_maps ask those skipped steps for
block 0, the block the next computing step reads, so the pipeline copies nothing for them (as
JAX's flash attention does). On TPU, `(rows, 1)` float32 carries that each step broadcasts
across wider values (an online softmax's running max and sum) live lane-dense in `(rows, 128)`
scratch, widened with a `_lanes_like` helper where they meet wider values (reduction.lanes):
measured on a v5e, this brings the lifted flash attention to JAX's kernel's speed at the same
blocks. When nothing carries from step to step (a carry of
step counters alone) the new axis is parallel.

Where the call is already pipelined over other grid axes on TPU (core.speed.Pipelined), one
window per step would multiply its steps (0.6-0.85x the original on a v5e), so the lift is
strip-mined (reduction.strip, issue 27): the new axis moves a block of `windows_per_step` loop
windows, a count the wrapper binds through a `_windows_per_step` helper the rewrite adds (the
most that divide the trip count, at most 8, double-buffered within 8 MiB of VMEM), and the
kernel walks them with a Python `for` over static window numbers, the carry loaded before and
stored after, as JAX's flash attention walks block_k inside block_k_major. An index the body
reads beyond its windows (a mask, a position) is bound to `pl.program_id(axis) * windows +
window`. Under a causal bound each window runs under `pl.when(k < upper)` on its global number,
the carry through scratch, and a step whose windows are all past the bound asks for block 0. A
reversed walk (`(n - 1 - k) * bk`) moves strips from the last, each walked last to first. A
step counter, outputs or scalar indices moved by the index, and --lift-for-memory keep one
window per step; but for --lift-for-memory, the fix message says why ("one window per step, not
strip-mined: ..."), as that lift multiplies the steps of a call already pipelined.

A loop (`fori_loop` or `pl.loop`) that carries nothing but accumulates into an output or scratch
ref at a place every iteration shares (`o_ref[...] = 0` before it, `o_ref[...] += x @ y` in it:
the PF101 form of the same reduction) is lifted the same way with no scratch: the output block is
the accumulator, resident across the new innermost sequential axis, and what zeroed it before
the loop runs in `_init`. Inputs stay read-only blocks; a body that writes an input is refused.

A loop at the top level of a helper the kernel calls once is lifted after that helper (and, where
the call's specs cannot be read, the wrapper's helper that builds them) is inlined, as one plan
(rewrite.loops.inlined_plans). What moves keeps its meaning: the statements before the loop that write a ref (through any call,
analysis.effects.model) move into `_init` only when nothing that stays depends on their order
(before_loop.side_effect_statements); the carry is bound as the body binds it (carry_io); and
no name changes meaning where the body now runs at kernel level or where the code after the
loop now runs inside `_finalize` (reduction_scopes).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial
from typing import Optional

import libcst as cst

from pallas_fix.analysis.context import walk
from pallas_fix.core.model import Backend, FixSafety, IndexUse, LoopInfo, Origin
from pallas_fix.core.plans import FixPlan, Recipe, Refuse
from pallas_fix.rewrite.text import imports
from pallas_fix.rewrite.loops.before_loop import side_effect_statements
from pallas_fix.rewrite.blocks.edits import CallEdits, NewAxis, RefBlock, guards_note, packed_tuple
from pallas_fix.rewrite.blocks.blockspecs import unwritten_steps_problem
from pallas_fix.rewrite.blocks.plan import NEW_INDEX
from pallas_fix.rewrite.blocks.grid_params import pipelined
from pallas_fix.rewrite.callsite.ranks import hypothesis_doubt
from pallas_fix.rewrite.callsite.reading import CallSite
from pallas_fix.rewrite.common import attempt, check_single_call, per_use
from pallas_fix.rewrite.reduction.carries import Carry, carry_model
from pallas_fix.rewrite.reduction.carry_names import deleted_results
from pallas_fix.rewrite.text.edits import apply_edits
from pallas_fix.rewrite.extents.extent_reads import extent_edits
from pallas_fix.rewrite.loops.helper_inline import held_loop
from pallas_fix.rewrite.loops.inlined_plans import plan_inlined, plan_with_specs_inlined
from pallas_fix.rewrite.loops.regions import LoopRegion, grid_translator, loop_region, uses_by_loop
from pallas_fix.rewrite.loops.result_use import EmbeddedResult, embedded_result
from pallas_fix.rewrite.kernel.output_reads import check_group_written_before_read
from pallas_fix.rewrite.reduction.kernel import Step, kernel_edits
from pallas_fix.rewrite.reduction.lanes import lane_layout, lane_leaf
from pallas_fix.rewrite.reduction.strip import reversed_index, strip_plan, window_edits
from pallas_fix.rewrite.callsite.spelling.operands import CallSiteError
from pallas_fix.rewrite.kernel.ref_access import accessed_slots, check_kernel_ref_uses, is_write, lifted_block, lifted_element_ids, ref_accesses
from pallas_fix.rewrite.loops.strip_mines import refuse_strip_mine
from pallas_fix.rewrite.reduction.takes import is_reduction, trip_reads_program_id
from pallas_fix.rewrite.kernel.scalar_lift import block_subscript_edit
from pallas_fix.rewrite.blocks.scratch import add_scratch, scratch_spelling
from pallas_fix.rewrite.blocks.windows_count import add_windows_count
from pallas_fix.rewrite.text.stale_comments import stale_comments_note
from pallas_fix.rewrite.proofs.one_step import runs_a_step
from pallas_fix.rewrite.text.statements import body_statements
from pallas_fix.rewrite.text.syntax import code, paren_text

NAME = "lift-reduction"


# -- match and check --------------------------------------------------------------------------------
def _plan(analysis, loop: LoopInfo, uses: list[IndexUse], *, windows_required: bool = True) -> FixPlan:
    ctx = analysis.ctx
    site = uses[0].kernel_site
    refuse_strip_mine(analysis, site, loop)  # true of the loop whatever else its kernel's shape allows: said first
    _check_site(analysis, site, loop)
    again = partial(_plan, windows_required=windows_required)
    held = held_loop(ctx, site.kernel, loop)  # a loop at the top level of a helper the kernel calls once
    if held is not None:
        return plan_inlined(analysis, loop, uses, held, again)
    inlined = plan_with_specs_inlined(analysis, loop, uses, again)  # specs a helper of the wrapper builds
    return inlined if inlined is not None else _lift(analysis, site, loop, uses, windows_required)


def _lift(analysis, site, loop: LoopInfo, uses: list[IndexUse], windows_required: bool) -> FixPlan:
    ctx = analysis.ctx
    cs = CallSite(ctx, site, analysis.detection.envs.get(site.kernel))
    region = loop_region(analysis, site, loop, reduction=True)
    dropped = deleted_results(region)
    region.after = [s for s in region.after if s not in dropped]
    written = {ref for ref, group in ref_accesses(analysis, region, loop).items() if group.written}
    embedded = embedded_result(region, written)
    translate = grid_translator(ctx, site, cs)
    access = _blocks(analysis, region, cs, translate, windows_required)
    blocks = access.blocks
    extent_reads: list = []  # `n_rows = x_ref.shape[0]` of a lifted dim (rewrite.extents.extent_reads)
    # a pl.program_id trip count stays as the guard (_trip_count)
    upper_stays = trip_reads_program_id(region) and region.env.static_int(loop.lower) == 0
    check_kernel_ref_uses(analysis, site, region, {b.param for b in blocks}, extent_reads, upper_stays=upper_stays)
    trip, guard = _trip_count(region, cs, translate, blocks[0] if blocks else None)
    steps_guard = runs_a_step(cs, trip, blocks) if guard is None else []  # `assert trip >= 1`, from the examples
    jnp = imports.spelling(ctx, imports.NUMPY)
    skipped = _skipped_index(region, translate, guard, jnp.text)
    if guard is not None:
        _check_skipped_writes(cs, access, blocks[0])
    blocked = {(b.param, b.dim) for b in blocks}
    carry = carry_model(analysis, region, loop, translate, blocked) if loop.carries else _no_carry(region)
    counters_after = [l for l in carry.leaves if l.counter is not None and (l.read_after or embedded is not None)]
    if guard is not None and counters_after:
        raise Refuse(f"the loop's step count `{guard}` depends on pl.program_id, and the code after it reads a counter "
                     "that would have to say how many steps ran; count them from the bound instead")
    lanes = lane_layout(ctx, region, carry, region.after, embedded, site.backend, jnp.text)
    if lanes is not None:  # an online softmax's (rows, 1) statistics, kept lane-dense (reduction.lanes)
        carry = Carry([lane_leaf(l) if n in lanes.leaves else l for n, l in enumerate(carry.leaves)], carry.tree)
    semantics = _semantics(analysis, region, site, carry, access, embedded)
    scratch, space = scratch_spelling(ctx, site.backend)
    scratch_shapes = [f"{scratch.text}.{'SMEM' if l.scalar else space}({code(l.shape)}, {code(l.dtype)})" for l in carry.scratch]
    axis = NewAxis(trip=trip, name=loop.index_name, semantics=semantics, skipped_index=skipped,
                   undo_strip_mines=analysis.config.lift_for_memory)
    pipe = pipelined(cs, scratch=bool(carry.scratch))
    pl = imports.spelling(ctx, imports.PALLAS)
    strip = strip_plan(analysis, region, site, blocks, cs.slots, carry, guard, lifted_element_ids(blocks), extent_reads, pipe,
                       len(cs.grid), pl.text, code(trip))
    one_window = strip if isinstance(strip, str) else None  # why a wanted strip is not written: the message says it
    strip = None if isinstance(strip, str) else strip
    built = None
    if strip is not None:  # several windows per step where the call is already pipelined (reduction.strip)
        try:
            skipped_blocks = _skipped_index(region, translate, guard, jnp.text, strip.windows.name)
            built = _call_edits(cs, [_strip_block(b, strip) for b in blocks],
                                replace(axis, windows=strip.windows, skipped_index=skipped_blocks), scratch_shapes, steps_guard)
        except (Refuse, CallSiteError) as why:
            strip = None  # what the strip needs cannot be written: the one-window lift, refused or not on its own
            one_window = str(why)
    if built is None:
        built = _call_edits(cs, blocks, axis, scratch_shapes, steps_guard)
    call_edits, edits = built
    if strip is None:
        for b in blocks:
            for sub, dims in b.subscripts:
                edits[sub] = block_subscript_edit(b, dims, packed_tuple(analysis, sub, dims))
    else:
        pipe = replace(pipe, windows=strip.words())
        edits.update(window_edits(ctx, strip, blocks))
    edits.update(extent_edits(cs, extent_reads, blocks, {"new": (len(cs.grid), trip)}, pl.text))
    step = Step(region, pl.text, len(cs.grid), guard, carry, tuple(dropped), embedded, lanes, strip, jnp.text)
    kernel_edits(edits, step, lifted_element_ids(blocks))
    needed = [pl.add, scratch.add] + ([jnp.add] if lanes is not None or skipped is not None or strip is not None else [])

    def rewrite(module: cst.Module) -> cst.Module:
        return imports.drop_unused_loop_imports(imports.add_imports(apply_edits(module, edits)[0], needed), module)

    comma = ',' if strip is None else ''  # the strip's words end with a comma
    if semantics == "parallel" and guard is not None:  # independent steps whose count reads the program id
        what, kind, resident = "loop", "parallel", f"{comma} the steps past its bound skipped"
    else:
        what, kind, resident = "reduction", "sequential", f"{comma} its outputs resident across it"
    description = (
        f"lifted the {what} over `{loop.index_name}` in `{site.kernel_name}` into {kind} grid axis {step.axis}"
        f"{', ' + strip.words() + ',' if strip is not None else ''}"
        f"{' with scratch ' + ', '.join(l.ref for l in carry.scratch) if carry.scratch else resident}"
        f"{'; one window per step, not strip-mined (reduction.strip): ' + one_window if one_window else ''}"
        f"{region.loop_comments_note()}"
        f"{stale_comments_note(ctx, site.kernel, {b.param for b in blocks})}"
        f"{'; ' + guards_note(call_edits.guards) if call_edits.guards else ''}"
        f"{'; ' + hypothesis_doubt(None, cs.hypotheses) if cs.hypotheses else ''}"
    )
    return FixPlan(NAME, FixSafety.UNSAFE, uses, description, rewrite, site=site,
                   guards=tuple(g.failing() for g, _why in call_edits.guards),
                   pipelined=pipe)


def _call_edits(cs: CallSite, blocks: list[RefBlock], axis: NewAxis, scratch_shapes: list[str], steps_guard: list) -> tuple[CallEdits, dict]:
    """The call-side edits: grid, specs, scratch. `guarding`: blocks the code does not prove
    inside their arrays may be proved by a shape fact written into the wrapper as a check
    (rewrite.guards.shape_guards); a reduction is unsafe anyway. `steps_guard`: the check that
    the new axis has a step (rewrite.proofs.one_step.runs_a_step), written with those."""
    call_edits = CallEdits(cs, blocks, axis, guarding=True)
    call_edits.bounds.guards.extend(steps_guard)
    if scratch_shapes:
        add_scratch(cs, call_edits, scratch_shapes)
    edits = call_edits.build()
    if axis.windows is not None:  # a strip-mined lift: the wrapper counts its windows per step
        add_windows_count(edits, cs, axis, [b.param for b in blocks], call_edits.specs.window_shapes)
    return call_edits, edits


def _strip_block(b: RefBlock, strip) -> RefBlock:
    """`b` moving `strip.windows.name` windows a step; a reversed walk's block counted in strips."""
    index = reversed_index(b.index, strip.windows.name) if strip.reversed else None
    return replace(b, windows=strip.windows.name, strip_index=index)


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
    if sum(1 for s in analysis.sites if s.kernel is site.kernel) > 1:
        raise Refuse(f"kernel `{site.kernel_name}` is used by more than one pallas_call")
    check_single_call(analysis, site)  # also: no decorator or other caller runs the kernel's body


def plan_without_windows(analysis, loop: LoopInfo, uses: list[IndexUse]) -> FixPlan:
    """R2 for a loop that slices no ref by its index, only reads a table at it: R6 (scalar
    prefetch) lifts such a loop (paged attention's loop over pages) before its table picks the
    blocks. On its own R2 does not lift it: nothing would be pipelined."""
    return _plan(analysis, loop, uses, windows_required=False)


@dataclass(frozen=True)
class _Access:
    blocks: list[RefBlock]  # the refs blocked along the new axis
    moving_outputs: list[str]  # outputs among them: each step writes its own block (a scan)
    resident_writes: list[str]  # outputs and scratch written at a place every step shares


def _blocks(analysis, region: LoopRegion, cs: CallSite, translate, required: bool = True) -> _Access:
    """The refs the loop index slices, as blocks along the new axis: inputs, and outputs each
    step writes its own block of; the refs it does not slice stay resident."""
    blocks: list[RefBlock] = []
    outputs: list[str] = []
    resident: list[str] = []
    for ref, group, slot in accessed_slots(analysis, region, cs):
        if not group.lifted:
            if group.written and slot.kind not in ("out", "scratch"):
                raise Refuse(f"the loop body writes the {slot.noun} `{ref}`; only the carry, outputs and scratch may "
                             "change between iterations")
            if group.written:
                resident.append(ref)
            continue  # an output (or scratch) the new axis does not move: resident across its steps
        if slot.kind not in ("in", "out"):
            raise Refuse(f"`{ref}` is a {slot.kind} buffer; only inputs can be blocked along the reduction")
        if slot.kind == "in" and any(is_write(analysis.ctx, s) for s in group.subscripts):
            raise Refuse(f"the loop body writes `{ref}`")
        blocks.append(lifted_block(group, region.loop, ref, translate))
        if slot.kind == "out":
            check_group_written_before_read(analysis.ctx, region.body, group, cs.aliased)
            outputs.append(ref)
    if not blocks and required:
        raise Refuse("no ref is sliced by the loop index in block-shaped windows")
    return _Access(blocks, outputs, resident)


def _semantics(analysis, region: LoopRegion, site, carry: Carry, access: _Access, embedded: Optional[EmbeddedResult]) -> str:
    """"parallel" when nothing carries from one step to the next (a carry of step counters
    alone, no resident ref written, nothing to initialise or finalise); else the backend's
    in-order axis."""
    finalize = region.after or embedded is not None
    if not (carry.scratch or access.resident_writes or finalize or side_effect_statements(analysis, site, region.before)):
        return "parallel"
    return "arbitrary" if site.backend is Backend.TPU else "sequential"


def _check_skipped_writes(cs: CallSite, access: _Access, first: RefBlock) -> None:
    """The steps `pl.when(k < upper)` skips still write back the blocks they visit: an output
    moving with the new axis must not lose rows there that another step wrote
    (blockspecs.unwritten_steps_problem)."""
    window_dim = cs.kernel_shape_dim(first.param, first.dim)
    for block in access.blocks:
        if block.param not in access.moving_outputs:
            continue
        problem = unwritten_steps_problem(cs, block.param, block.dim, window_dim)
        if problem is not None:
            raise Refuse(f"the output `{block.param}` is sliced by the loop index, whose trip count depends on "
                         f"pl.program_id: the grid steps past it would write back blocks the loop never wrote, and {problem}")


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
    if upper_val.origin is not Origin.PROGRAM_ID:
        raise Refuse(f"the trip count `{code(loop.upper)}` is traced and not a function of pl.program_id")
    if env.static_int(loop.lower) != 0:
        raise Refuse(
            f"the loop runs from `{code(loop.lower)}` to `{code(loop.upper)}`, a bound that depends on pl.program_id; "
            "pallas-fix lifts such a loop only when it starts at 0, as a full axis whose steps past the bound "
            "`pl.when(k < upper)` skips"
        )
    if first is None:
        raise Refuse(f"the trip count `{code(loop.upper)}` depends on pl.program_id and no ref sliced by the loop index sizes the axis")
    full = cs.kernel_shape_dim(first.param, first.dim)
    if full is None:
        raise Refuse(f"cannot write the full length of `{first.param}` at the pallas_call for the causal axis")
    return cst.parse_expression(f"{paren_text(code(full))} // {paren_text(code(first.size))}"), code(loop.upper)


def _skipped_index(region: LoopRegion, translate, guard: Optional[str], jnp: str, windows: Optional[str] = None) -> Optional[str]:
    """The block index of the steps `pl.when(k < upper)` skips: 0, the block the next computing
    step reads (the next row of causal attention starts at k = 0), so the pipeline copies
    nothing for them. None (every step copies its own block) when `upper` has no index_map form.
    Strip-mined (`windows` per step): a step computes iff its first window, `block * windows`,
    is under the bound (reduction.strip)."""
    if guard is None:
        return None
    bound = translate.grid_expression(region.loop.upper, region.env)
    if bound is None:
        return None
    first = NEW_INDEX if windows is None else f"{NEW_INDEX} * {windows}"
    return f"{jnp}.where({first} < {code(bound)}, {NEW_INDEX}, 0)"


def _planner(analysis) -> dict:
    """Loops that carry a value, and loops that carry nothing but accumulate into a ref every
    iteration writes at the same place (`o_ref[...] += x_ref[:, pl.ds(k * bk, bk)] @ ...`): both
    are reductions. Other carry-less loops are lift-loop's (R1) alone."""
    groups = [(loop, uses) for loop, uses in uses_by_loop(analysis) if is_reduction(analysis, loop, uses)]
    return per_use(groups, lambda loop, uses: attempt(NAME, _plan, analysis, loop, uses))


RECIPE = Recipe(
    NAME, frozenset({"PF101", "PF102"}), _planner, command="LiftReduction",
    description="Lift reductions (a carried value, or accumulation into a resident output) into sequential grid axes (R2).",
)
