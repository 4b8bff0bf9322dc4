"""R1 — lift an independent loop into a grid axis (fixes PF101).

Before:
    def kernel(x_ref, o_ref):
        def body(i, carry):
            o_ref[pl.ds(i * BS, BS), :] = jnp.tanh(x_ref[pl.ds(i * BS, BS), :])
            return carry
        lax.fori_loop(0, x_ref.shape[0] // BS, body, None)

After:
    def kernel(x_ref, o_ref):
        o_ref[...] = jnp.tanh(x_ref[...])
    pl.pallas_call(kernel, ..., grid=(x.shape[0] // BS,),
                   in_specs=[pl.BlockSpec((BS, x.shape[1]), lambda i: (i, 0))],
                   out_specs=pl.BlockSpec((BS, x.shape[1]), lambda i: (i, 0)))

Recipe: match a fori_loop / pl.loop that carries nothing and whose index drives block-shaped
windows; check that each iteration touches only its own block of each lifted ref, that nothing
else in the kernel would change meaning when it runs once per grid step, and that every size
can be written at the call site; then inline the body in place of the loop, turn the windows into
whole-block accesses, and give the pallas_call a new innermost grid axis with BlockSpecs.
"""

from __future__ import annotations

import libcst as cst

from pallas_fix.core.model import FixSafety, IndexUse, LoopInfo
from pallas_fix.core.plans import FixPlan, Recipe, Refuse
from pallas_fix.rewrite.text import imports
from pallas_fix.rewrite.reduction.takes import trip_reads_program_id
from pallas_fix.rewrite.blocks.edits import CallEdits, NewAxis, RefBlock, guarded_edits, packed_tuple
from pallas_fix.rewrite.blocks.grid_params import pipelined
from pallas_fix.rewrite.callsite.ranks import hypothesis_doubt
from pallas_fix.rewrite.callsite.reading import CallSite, CallSiteError
from pallas_fix.rewrite.common import check_single_call
from pallas_fix.rewrite.kernel.dead_stores import confirm_dead_stores
from pallas_fix.rewrite.text.edits import apply_edits
from pallas_fix.rewrite.extents.extent_reads import extent_edits
from pallas_fix.rewrite.loops.nesting import check_other_branch
from pallas_fix.rewrite.loops.strip_mines import refuse_strip_mine
from pallas_fix.rewrite.loops.regions import LoopRegion, grid_translator, loop_planner, loop_region
from pallas_fix.rewrite.kernel.output_reads import check_group_written_before_read
from pallas_fix.rewrite.proofs.ragged_blocks import one_doubt, ragged_doubt
from pallas_fix.rewrite.kernel.ref_access import AccessGroup, accessed_slots, is_write, check_kernel_ref_uses, lifted_block, lifted_element_ids
from pallas_fix.rewrite.kernel.scalar_lift import block_subscript_edit
from pallas_fix.rewrite.kernel.scratch_temps import is_iteration_temporary
from pallas_fix.rewrite.text.statements import strip_leading_blank_lines
from pallas_fix.rewrite.text.stale_comments import stale_comments_note
from pallas_fix.rewrite.text.syntax import code
from pallas_fix.rewrite.text.translate import simplify

NAME = "lift-loop"


def _plan(analysis, loop: LoopInfo, uses: list[IndexUse]) -> FixPlan:
    ctx = analysis.ctx
    site = uses[0].kernel_site
    if loop.carries:
        raise Refuse("the loop carries a value (a reduction): see PF102")
    refuse_strip_mine(analysis, site, loop)  # true of the loop whatever else its kernel's shape allows: said first
    check_single_call(analysis, site)
    cs = CallSite(ctx, site, analysis.detection.envs.get(site.kernel))
    region = loop_region(analysis, site, loop)
    if trip_reads_program_id(region):  # lift-reduction plans it (is_reduction)
        raise Refuse(f"the trip count `{code(loop.upper)}` depends on pl.program_id: the axis must run its full "
                     "length and skip the steps past the bound, which lift-reduction plans")
    blocks, outputs, rows_kept = _blocks(analysis, region, cs)
    extent_reads: list = []  # `x_ref.shape[0]` of a lifted dim (rewrite.extents.extent_reads)
    check_other_branch(ctx, region.branch, {b.param for b in blocks})
    lifted = lifted_element_ids(blocks)
    dead = frozenset(id(s) for s in region.dead_slice_statements(lifted, loop_gone=True))
    check_kernel_ref_uses(analysis, site, region, {b.param for b in blocks}, extent_reads, dead)
    trip = region.trip_count(grid_translator(ctx, site, cs))
    if trip is None:
        raise Refuse(
            f"the trip count of the loop ({code(loop.lower)} to {code(loop.upper)}) cannot be written at the pallas_call"
        )
    confirm_dead_stores(ctx, region.dead_stores, blocks, cs, trip)
    axis = NewAxis(trip=trip, name=loop.index_name, semantics="parallel", undo_strip_mines=analysis.config.lift_for_memory)
    doubt, guards, divided_only = None, (), False
    try:
        edits = CallEdits(cs, blocks, axis).build()
    except CallSiteError as unproved:
        # A stepped or `pl.cdiv` trip count whose last window runs past the end (rewrite.proofs.ragged_blocks).
        position = ctx.span(region.statement).line if region.index_needed(lifted) else None
        try:
            doubts = {b.param: ragged_doubt(cs, b, trip, position) for b in blocks}
        except Refuse as refused:  # the kernel reads its position: only a check in the wrapper helps
            edits, doubt, guards = guarded_edits(cs, blocks, axis, unproved=refused)
        else:
            ragged = [d for d in doubts.values() if d is not None]
            doubt = one_doubt(ragged) if ragged else None
            divided_only = any(d.divided_only for d in ragged)
            if doubt is None:  # no partial block is exact here: a shape fact the code leaves unsaid may be
                edits, doubt, guards = guarded_edits(cs, blocks, axis, unproved=unproved)
            else:
                edits = CallEdits(cs, blocks, axis, partial_ok=frozenset((b.param, b.dim) for b in blocks if doubts[b.param])).build()
    # After the call's own checks, whose reasons (a resident accumulator) say more where both apply.
    for group in outputs:
        check_group_written_before_read(ctx, region.body, group, cs.aliased)
    new_axis_pos = len(cs.grid)
    for b in blocks:
        for sub, dims in b.subscripts:
            edits[sub] = block_subscript_edit(b, dims, packed_tuple(analysis, sub, dims))
    pl = imports.spelling(ctx, imports.PALLAS)
    edits.update(extent_edits(cs, extent_reads, blocks, {"new": (new_axis_pos, trip)}, pl.text))
    edits.update(region.inline_edits(f"{pl.text}.program_id({new_axis_pos})", lifted))
    edits[site.kernel] = strip_leading_blank_lines
    needed = pl.add

    def rewrite(module: cst.Module) -> cst.Module:
        return imports.drop_unused_loop_imports(imports.add_imports(apply_edits(module, edits)[0], [needed]), module)

    description = (
        f"lifted the loop over `{loop.index_name}` in `{site.kernel_name}` into grid axis {new_axis_pos}"
        f" ({', '.join(b.param for b in blocks)} in blocks){_rows_note(rows_kept)}{region.loop_comments_note()}"
        f"{stale_comments_note(ctx, site.kernel, {b.param for b in blocks})}"
    )
    already = pipelined(cs)
    doubt = hypothesis_doubt(doubt, cs.hypotheses)
    if doubt is not None:
        return FixPlan(NAME, FixSafety.UNSAFE, uses, f"{description}; unsafe: {doubt}", rewrite, site=site, guards=guards,
                       pipelined=already, divided_only=divided_only)
    return FixPlan(NAME, FixSafety.SAFE, uses, description, rewrite, site=site, pipelined=already)


def _blocks(analysis, region: LoopRegion, cs: CallSite) -> tuple[list[RefBlock], list[AccessGroup], list[str]]:
    """Each ref the loop index slices, as blocks along the new axis (inputs and outputs alike),
    the blocked outputs' accesses, and the outputs kept whole whose rows the steps write; a ref
    written at a place that does not follow the index would make iterations collide, unless it is
    a scratch temporary each iteration writes whole before reading it."""
    translate = grid_translator(analysis.ctx, region.site, cs)
    dyn_subs = {id(u.subscript) for u in analysis.uses}
    blocks: list[RefBlock] = []
    outputs: list[AccessGroup] = []
    rows_kept: list[str] = []
    for ref, group, slot in accessed_slots(analysis, region, cs):
        if not group.lifted:
            if slot.kind == "scratch" and is_iteration_temporary(analysis.ctx, region, ref):
                continue  # written whole before it is read, in every iteration: it carries nothing
            if group.kept_rows and slot.kind != "out":
                raise Refuse(
                    f"`{ref}` is written at a row of the loop index that TPU cannot squeeze (line "
                    f"{analysis.ctx.span(group.kept_rows[0]).line}), and it is {'an' if slot.noun[0] in 'aeiou' else 'a'} {slot.noun} ref: only an output "
                    "stays whole and resident while the steps of a sequential axis write their rows"
                )
            if slot.kind == "out" and _rows_kept(analysis.ctx, group):
                rows_kept.append(ref)  # whole and resident, its rows written in order: the new axis is made sequential
                continue
            if group.written:
                dynamic = any(id(s) in dyn_subs for s in group.unlifted_accesses)
                raise Refuse(
                    f"`{ref}` is written inside the loop at a window that does not follow the loop index "
                    "(data-dependent), so iterations may collide"
                    if dynamic
                    else f"`{ref}` is written at the same place on every iteration (a dependency between iterations)"
                )
            continue
        if slot.kind not in ("in", "out"):
            raise Refuse(f"`{ref}` is a {slot.kind} buffer; only inputs and outputs can get BlockSpecs")
        blocks.append(lifted_block(group, region.loop, ref, translate, tidy=simplify))
        if slot.kind == "out":
            outputs.append(group)
    if not blocks:
        raise Refuse("no ref is sliced by the loop index in block-shaped windows")
    return blocks, outputs, rows_kept


def _rows_note(rows_kept: list[str]) -> str:
    if not rows_kept:
        return ""
    names = ", ".join(f"`{r}`" for r in rows_kept)
    return (f"; {names} kept whole, each step writing its row (TPU cannot squeeze that dim), "
            "on a sequential axis")


def _rows_kept(ctx, group: AccessGroup) -> bool:
    """Every write of the output in the loop is at a row of the loop index that TPU cannot squeeze
    (AccessGroup.kept_rows): kept whole, each step writes its own row, as the iteration did."""
    writes = [s for s in group.unlifted_accesses if is_write(ctx, s)]
    return bool(writes) and all(any(s is k for k in group.kept_rows) for s in writes)


# R6 (scalar_prefetch) lifts the loop whose index reads its table before it moves the table.
plan_loop = _plan


RECIPE = Recipe(
    NAME, frozenset({"PF101"}), loop_planner(NAME, _plan, carries=False), command="LiftIndependentLoop",
    description="Lift independent fori_loop / pl.loop loops into grid axes (R1, PF101).",
)
