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

from pallas_fix.rewrite.blockplan import CallEdits, NewAxis, RefBlock, code, kernel_subscript_edit
from pallas_fix.rewrite.callsite import CallSite, CallSiteError
from pallas_fix.core.plans import FixPlan, Outcome, Refusal, Recipe, use_key
from pallas_fix.core.model import FixSafety, IndexUse, LoopInfo
from pallas_fix.rewrite.edits import apply_edits
from pallas_fix.rewrite.translate import simplify

from pallas_fix.rewrite.loops import (
    uses_by_loop,
    drop_unused_loop_imports,
    add_pallas_import,
    strip_leading_blank_lines,
    RegionError,
    block_index_of,
    check_kernel_ref_uses,
    grid_translator,
    loop_region,
    ref_accesses,
)

NAME = "lift-loop"


class _Refuse(Exception):
    pass


def plan_loop(analysis, loop: LoopInfo, uses: list[IndexUse]) -> Outcome:
    try:
        return _plan(analysis, loop, uses)
    except (_Refuse, CallSiteError, RegionError) as exc:
        return Refusal(NAME, str(exc))


def _plan(analysis, loop: LoopInfo, uses: list[IndexUse]) -> FixPlan:
    ctx = analysis.ctx
    site = uses[0].kernel_site
    if loop.carries:
        raise _Refuse("the loop carries a value (a reduction): see PF102")
    if site is None or site.kernel is None:
        raise _Refuse("the kernel is not defined in this module")
    if sum(1 for s in analysis.sites if s.kernel is site.kernel) > 1:
        raise _Refuse(f"kernel `{site.kernel_name}` is used by more than one pallas_call")
    kernel_env = analysis.detection.envs.get(site.kernel)
    cs = CallSite(ctx, site, kernel_env)
    region = loop_region(analysis, site, loop)
    accesses = ref_accesses(analysis, region, loop)
    translate = grid_translator(ctx, site, cs)

    blocks: list[RefBlock] = []
    dyn_subs = {id(u.subscript) for u in analysis.uses}
    for ref, group in accesses.items():
        slot = cs.slots.get(ref)
        if slot is None:
            raise _Refuse(f"`{ref}` is not a kernel parameter pallas-fix can map to an operand")
        if not group.lifted:
            if group.written:
                dynamic = any(id(s) in dyn_subs for s in group.unlifted_accesses)
                raise _Refuse(
                    f"`{ref}` is written inside the loop at a window that does not follow the loop index "
                    "(data-dependent), so iterations may collide"
                    if dynamic
                    else f"`{ref}` is written at the same place on every iteration (a dependency between iterations)"
                )
            continue
        if slot.kind not in ("in", "out"):
            raise _Refuse(f"`{ref}` is a {slot.kind} buffer; only inputs and outputs can get BlockSpecs")
        if group.unlifted_accesses:
            raise _Refuse(f"`{ref}` is also accessed without the loop index inside the loop")
        dim, size_expr, size_env, index = block_index_of(group, loop, ref)
        size = translate(size_expr, size_env)
        size = simplify(size) if size is not None else None
        if size is None:
            raise _Refuse(f"the block size `{code(size_expr)}` of `{ref}` cannot be written at the pallas_call")
        blocks.append(RefBlock(ref, dim, size, index, [(s, {dim}) for s in group.subscripts]))
    if not blocks:
        raise _Refuse("no ref is sliced by the loop index in block-shaped windows")
    check_kernel_ref_uses(analysis, site, region, {b.param for b in blocks})

    trip = region.trip_count(translate)
    if trip is None:
        raise _Refuse(
            f"the trip count of the loop ({code(loop.lower)} to {code(loop.upper)}) cannot be written at the pallas_call"
        )
    axis = NewAxis(trip=trip, name=loop.index_name, semantics="parallel")
    call_edits = CallEdits(cs, blocks, axis)
    edits = call_edits.build()
    new_axis_pos = len(cs.grid)
    pl = cs.pl_alias()
    for b in blocks:
        for sub, dims in b.subscripts:
            edits[sub] = kernel_subscript_edit(dims)
    lifted_ids = {id(el) for b in blocks for sub, dims in b.subscripts for n, el in enumerate(sub.slice) if n in dims}
    edits.update(region.inline_edits(f"{pl}.program_id({new_axis_pos})", lifted_ids))
    edits[site.kernel] = strip_leading_blank_lines

    description = (
        f"lifted the loop over `{loop.index_name}` in `{site.kernel_name}` into grid axis {new_axis_pos}"
        f" ({', '.join(b.param for b in blocks)} in blocks)"
    )
    needs_import = cs.needs_pallas_import()

    def rewrite(module: cst.Module) -> cst.Module:
        new, _ = apply_edits(module, edits)
        if needs_import:
            new = add_pallas_import(new)
        return drop_unused_loop_imports(new)

    return FixPlan(NAME, FixSafety.SAFE, uses, description, rewrite, site=site)


def planner(analysis) -> dict:
    out: dict = {}
    for loop, uses in uses_by_loop(analysis, carries=False):
        outcome = plan_loop(analysis, loop, uses)
        for use in uses:
            out[use_key(use)] = outcome
    return out


RECIPE = Recipe(
    NAME,
    frozenset({"PF101"}),
    planner,
    command="LiftIndependentLoop",
    description="Lift independent fori_loop / pl.loop loops into grid axes (R1, PF101).",
)
