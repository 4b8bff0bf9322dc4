"""R3 — move a program_id window on a whole-array ref into its BlockSpec (fixes PF103).

Before:
    def kernel(x_ref, o_ref):
        i = pl.program_id(0)
        o_ref[pl.ds(i * BS, BS)] = x_ref[pl.ds(i * BS, BS)] + 1
    pl.pallas_call(kernel, out_shape=..., grid=(N // BS,))(x)

After:
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1
    pl.pallas_call(kernel, out_shape=..., grid=(N // BS,),
                   in_specs=[pl.BlockSpec((BS,), lambda i: (i,))],
                   out_specs=pl.BlockSpec((BS,), lambda i: (i,)))(x)

Recipe: match a ref whose every access is the same block-shaped window driven only by
`pl.program_id`; check that its BlockSpec is the whole array and that the size can be written at
the call site; then access the whole block in the kernel and give the ref a BlockSpec whose
index_map returns the window's block index. One ref per round (an input and the output it aliases,
windowed alike, one pair: one buffer, each step reading and writing its own block); the engine
re-analyses between.
A window at an offset inside the program's block (`pl.ds(i * bm + c * 8, 8)`, walked by a static
or traced loop) gives the ref the block of `bm` at `i` and keeps the walk inside it
(rewrite.inblock.offset_windows). An output left in HBM (`pl.ANY`) that the kernel writes only by
DMAs waited in their step gets a VMEM block, the DMAs re-based onto it (rewrite.inblock.dma_outputs).
On Triton, an input also read elsewhere passes again for its window (rewrite.kernel.twin_refs).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

import libcst as cst

from pallas_fix.analysis.context import walk
from pallas_fix.core.model import Backend, FixSafety, IndexUse, Origin
from pallas_fix.core.plans import FixPlan, Outcome, Recipe, Refusal, Refuse, use_key
from pallas_fix.rewrite.text import imports
from pallas_fix.rewrite.blocks.edits import (BlockIndexExpr, CallEdits, RefBlock, dead_assignments, guarded_edits,
                                             packed_tuple, touched_element_ids)
from pallas_fix.rewrite.blocks.blockspecs import ResidentOutput
from pallas_fix.rewrite.blocks.folds import check_folded_output, folds_at_call
from pallas_fix.rewrite.callsite.ranks import hypothesis_doubt
from pallas_fix.rewrite.callsite.reading import CallSite, CallSiteError
from pallas_fix.rewrite.callsite.call_params import alias_partner
from pallas_fix.rewrite.callsite.variant_arms import arm_planning, together
from pallas_fix.rewrite.common import check_single_call, per_use
from pallas_fix.rewrite.text.edits import apply_edits, remove_statement
from pallas_fix.rewrite.extents.extent_reads import ExtentRead, extent_edits
from pallas_fix.rewrite.inblock.dma_outputs import dma_written
from pallas_fix.rewrite.kernel.output_reads import check_written_before_read
from pallas_fix.rewrite.inblock.offset_windows import (OffsetWindow, check_offset_accesses, dead_start_bindings, loop_walked_window,
                                                    offset_subscript_edit, offset_window, ragged_offsets)
from pallas_fix.rewrite.kernel.pid_helpers import check_called_once, handed_view, drop_unread_slices, passed_ref_args, pid_helpers, ref_subscripts, use_ref
from pallas_fix.rewrite.proofs.ragged_blocks import one_doubt, ragged_doubt
from pallas_fix.rewrite.kernel.pid_windows import (check_operand, check_other_uses, pid_block_index, plan_description,
                                                    program_id_scalars, view_rank)
from pallas_fix.rewrite.kernel.ref_access import ref_base
from pallas_fix.rewrite.kernel.ref_lists import RefList, listed_refs
from pallas_fix.rewrite.kernel.scalar_blocks import program_id_scalar_refusals
from pallas_fix.rewrite.kernel.scalar_lift import (block_subscript_edit, check_one_form, check_squeezed_reads,
                                                   scalar_block_size, split_squeezable)
from pallas_fix.rewrite.text.statements import siblings_of, strip_leading_blank_lines
from pallas_fix.rewrite.kernel.twin_refs import Unwindowed, twin_plan, unwindowed
from pallas_fix.rewrite.kernel.view_windows import check_output_views
from pallas_fix.rewrite.text.syntax import code
from pallas_fix.rewrite.text.translate import Translator

NAME = "program-id-blocks"


def planner(analysis) -> dict:
    """One plan per (pallas_call, ref, dim) whose program_id windows are `pl.ds` slices. A ref
    windowed along two dims (`o_ref[pl.ds(i * TM, TM), pl.ds(j * TN, TN)]`) takes two rounds:
    the second composes its window with the block the first one wrote. Until then an output's
    second window is refused (its block would stay resident across the first one's axis), a
    refusal that waits for the first window's fix. An input and the output it aliases
    (`input_output_aliases`), windowed alike, are one plan: the first of the two asked makes it,
    and it speaks for the other's windows too (`planned`), so one round moves both."""
    groups = _windowed_refs(analysis)
    planned: dict = {}  # use key -> the plan of an aliased pair that already speaks for it

    def attempt(key: tuple[tuple[int, int], str, int], uses: list[IndexUse]) -> Outcome:
        return planned.get(use_key(uses[0])) or _attempt(analysis, groups, key, uses, planned)

    outcomes = together(analysis, per_use(groups.items(), attempt), NAME)
    return {**program_id_scalar_refusals(NAME, analysis), **outcomes}


def _attempt(analysis, groups: dict, key: tuple[tuple[int, int], str, int], uses: list[IndexUse], planned: dict) -> Outcome:
    try:
        with arm_planning(analysis, uses[0].kernel_site) as confine:  # a variant: against its own arm
            plan = confine.keep(_plan(analysis, key[1], key[2], uses, confine))
    except ResidentOutput as exc:  # the output of an aliased pair, too: its own windows along another dim
        return Refusal(NAME, str(exc), _windows_over(groups, (key[0], exc.param, key[2]), exc.axes))
    except (Refuse, CallSiteError) as exc:  # as rewrite.common.attempt
        return Refusal(NAME, str(exc), getattr(exc, "waits_for", ()))
    planned.update((use_key(u), plan) for u in plan.uses)
    return plan


def _windows_over(groups: dict, key: tuple[tuple[int, int], str, int], axes: frozenset[int]) -> tuple:
    """The windows of the same ref along another dim whose program ids cover `axes`: once they
    are in its BlockSpec, the output's block follows those axes and is resident across none."""
    out = []
    for (call, ref, dim), uses in groups.items():
        if call == key[0] and ref == key[1] and dim != key[2] and axes <= {u.provenance.program_id_axis for u in uses}:
            out += [use_key(u) for u in uses]
    return tuple(out)


def _windowed_refs(analysis) -> dict[tuple[tuple[int, int], str, int], list[IndexUse]]:
    """((ids of the pallas_call and the kernel), ref, dim) -> the program_id `pl.ds` windows on the
    ref along dim; per kernel, since a helper's one pallas_call may run several passed in."""
    groups: dict[tuple[tuple[int, int], str, int], list[IndexUse]] = {}
    for use in analysis.uses:
        pid = use.provenance.origin is Origin.PROGRAM_ID or (use.provenance.origin is Origin.LOOP and loop_walked_window(use))
        if not pid or use.kind not in ("ds", "scalar") or use.kernel_site is None:
            continue
        base = use.subscript.value
        if isinstance(base, cst.Attribute) and base.attr.value == "at":
            base = base.value
        if not isinstance(base, cst.Name):
            continue
        ref = use_ref(analysis, use) or base.value  # through a ref helper's parameter too (rewrite.kernel.pid_helpers)
        groups.setdefault(((id(use.kernel_site.call), id(use.kernel_site.kernel)), ref, use.dim), []).append(use)
    return groups


@dataclass(frozen=True)
class _Window:
    """The one block-shaped program_id window every access of the ref uses."""

    use: IndexUse  # one of its uses (dim, size, env)
    index: BlockIndexExpr
    squeezed: dict[int, int]  # dims indexed by exactly pl.program_id(k) -> k
    subscripts: list[cst.Subscript]
    # id(subscript) -> its window at an offset inside the program's block (rewrite.inblock.offset_windows)
    offsets: dict[int, OffsetWindow]
    dma: bool = False  # an output left in HBM, written by DMAs that now copy into its VMEM block


@dataclass(frozen=True)
class _Member:
    """One ref a plan moves into its BlockSpec: the ref itself, or an input and the output it aliases."""

    ref: str
    uses: list[IndexUse]  # its windows' findings, which the plan fixes
    window: _Window
    block: RefBlock
    reads: list[ExtentRead]  # of its blocked dim's size, kept meaning the full size


def _plan(analysis, ref: str, dim: int, uses: list[IndexUse], confine) -> FixPlan:
    ctx = analysis.ctx
    site = uses[0].kernel_site
    check_single_call(analysis, site, variants=True)
    cs = CallSite(ctx, site, analysis.detection.envs.get(site.kernel))
    helpers = pid_helpers(analysis, site)
    listed = listed_refs(ctx, site.kernel, ref, {p for p, slot in cs.slots.items() if slot.kind == "in"})
    try:
        first = _member(analysis, cs, helpers, listed.refs[0] if listed else ref, dim, uses, listed)
    except Unwindowed as why:  # also read elsewhere: on Triton the window takes a twin of the operand
        return twin_plan(analysis, cs, ref, dim, uses, why, lambda *a: _plan(*a, lambda *_: None), _windowed_refs)
    members = ([first, *(replace(_member(analysis, cs, helpers, r, dim, uses, listed), uses=[]) for r in listed.refs[1:])]
               if listed else _with_alias_partner(analysis, cs, helpers, first))
    check_squeezed_reads(analysis, site, [m.block for m in members])
    witnesses = _lockstep_witnesses(analysis, cs, {m.ref for m in members})
    edits, doubt, guards, divided_only = _call_edits(cs, members, witnesses)
    pl = imports.spelling(ctx, imports.PALLAS)
    _add_kernel_edits(analysis, cs, helpers, members, pl.text, edits)
    needed = pl.add
    confine(edits, needed, cs.slots[members[0].ref], dim)  # a pair: its input's slot, whichever member was asked

    def rewrite(module: cst.Module) -> cst.Module:
        return imports.add_imports(apply_edits(module, edits)[0], [needed])

    description = plan_description(site, members, listed)
    uses = [u for m in members for u in m.uses]
    doubt = hypothesis_doubt(doubt, cs.hypotheses)
    if doubt is not None:
        return FixPlan(NAME, FixSafety.UNSAFE, uses, f"{description}; unsafe: {doubt}", rewrite, site=site, guards=guards,
                       divided_only=divided_only)
    return FixPlan(NAME, FixSafety.SAFE, uses, description, rewrite, site=site)


def _member(analysis, cs: CallSite, helpers, ref: str, dim: int, uses: list[IndexUse], listed: Optional[RefList] = None) -> _Member:
    """`ref`'s one window along `dim`, the checks it passes, and its block; Unwindowed when the
    kernel also accesses the ref otherwise. `listed`: a comprehension over `ref` and others
    accesses it (rewrite.kernel.ref_lists); its uses are the first member's."""
    ctx, site = analysis.ctx, cs.site
    if ref not in cs.slots and (why := handed_view(analysis, uses[0])) is not None:
        raise Refuse(why)
    check_operand(cs, ref)
    window = _shared_window(analysis, cs, listed.name if listed else ref, dim, uses)
    index = window.index  # its divisors already written at the call site
    check_folded_output(cs, ref, index)
    allowed = {id(ref_base(s)) for s in window.subscripts} | passed_ref_args(ctx, site, ref, helpers) | (listed.mentions if listed else set())
    env = analysis.detection.envs.get(site.kernel)
    reads = check_other_uses(ctx, site.kernel, ref, allowed, window.use.dim, env, view_rank(cs, ref))
    if listed:
        reads += check_other_uses(ctx, site.kernel, listed.name, allowed, window.use.dim, env)
    check_output_views(analysis, cs, ref, window.subscripts)
    # On Triton an output's BlockSpec is a pointer offset into the array, nothing is copied in or
    # out: a step reads what the array holds, as the original's whole ref did.
    if cs.slots[ref].kind == "out" and site.backend is not Backend.TRITON:
        check_written_before_read(ctx, site.kernel, ref, window.subscripts, lambda s: {dim, *window.squeezed}, cs.aliased)
    use = window.use
    squeezed, _kept = split_squeezable(cs, ref, window.squeezed, index.grid_axes())  # kept whole: their scalars stay in the kernel
    squeeze = use.kind == "scalar"  # a squeezed dim (rewrite.kernel.scalar_lift)
    size = scalar_block_size(cs, use) if squeeze else _block_size(analysis, cs, window)
    if size is None:
        raise Refuse(f"the block size `{code(use.size)}` of `{ref}` cannot be written at the pallas_call")
    block = RefBlock(ref, use.dim, size, index, [(s, {use.dim}) for s in window.subscripts], squeezed, squeeze, window.dma)
    return _Member(ref, uses, window, block, reads)


def _with_alias_partner(analysis, cs: CallSite, helpers, first: _Member) -> list[_Member]:
    """`first`, and the operand sharing its buffer (input_output_aliases) where the kernel windows
    that one along the same dim too: the two move in one plan, the input first, so that either's
    attempt makes the same plan (check_aliased_blocks refuses them in different blocks: a read
    ahead, another size). A partner windowed there that cannot move is refused with its reason;
    one the kernel windows elsewhere or not at all stays whole, which check_aliased_blocks refuses
    where the kernel touches it."""
    partner = alias_partner(cs, first.ref)
    if partner is None:
        return [first]
    dim = first.block.dim
    uses = _windowed_refs(analysis).get(((id(cs.site.call), id(cs.site.kernel)), partner.param, dim))
    if not uses:
        return [first]
    try:
        other = _member(analysis, cs, helpers, partner.param, dim, uses)
    except (Refuse, CallSiteError) as why:
        raise Refuse(f"`{first.ref}` and `{partner.param}` are one buffer (input_output_aliases): a lift moves them together, "
                     f"in the same blocks, or neither (`{first.ref}` in blocks beside a whole `{partner.param}`, a step could "
                     f"read what another step wrote back); `{partner.param}` cannot move with `{first.ref}`: {why}") from None
    return sorted([first, other], key=lambda m: cs.slots[m.ref].kind != "in")


def _call_edits(cs: CallSite, members: list[_Member], witnesses: list[RefBlock]) -> tuple[dict, Optional[str], tuple, bool]:
    """(edits, doubt, guards, divided_only): the call-site edits of the members' blocks, proved
    inside their arrays; or with a partial last block along a `pl.cdiv` axis, theirs or a lockstep
    witness's (rewrite.proofs.ragged_blocks: an unsafe fix that says so); or with checks written
    into the wrapper that prove them (guarded_edits)."""
    blocks = [m.block for m in members]
    try:
        calls = CallEdits(cs, blocks, None, witnesses)
        edits = calls.build()
        # Their rows taken to be a lockstep witness's, whose last block may be partial (Bounds.check_blocks).
        lockstep = calls.bounds.ragged_lockstep
        ragged = [m for m in members if m.ref in lockstep]
        if not ragged:
            return edits, None, (), False
        offset = next((m for m in ragged if m.window.offsets), None)
        if offset is not None:
            raise Refuse(ragged_offsets(offset.ref))
        try:
            doubts = [ragged_doubt(cs, m.block) or ragged_doubt(cs, m.block, lockstep=lockstep[m.ref]) for m in ragged]
        except Refuse as refused:  # the kernel reads its position: only a check in the wrapper helps
            return (*guarded_edits(cs, blocks, None, witnesses, unproved=refused), False)
        assert all(d is not None for d in doubts)  # the witness passed Bounds.cdiv_axis
        return edits, one_doubt(doubts), (), any(d.divided_only for d in doubts)
    except CallSiteError as unproved:
        try:
            # a partial last block along a cdiv axis (rewrite.proofs.ragged_blocks); windows at an
            # offset inside it are proved inside whole blocks only: a check in the wrapper, or nothing
            doubts = {m.ref: None if m.window.offsets else ragged_doubt(cs, m.block) for m in members}
        except Refuse as refused:  # the kernel reads its position: only a check in the wrapper helps
            return (*guarded_edits(cs, blocks, None, witnesses, unproved=refused), False)
        found = [d for d in doubts.values() if d is not None]
        if not found:  # a shape fact the code leaves unsaid may prove it, written as a check
            return (*guarded_edits(cs, blocks, None, witnesses, unproved=unproved), False)
        partial = frozenset((m.ref, m.block.dim) for m in members if doubts[m.ref] is not None)
        edits = CallEdits(cs, blocks, None, witnesses, partial_ok=partial).build()
        return edits, one_doubt(found), (), any(d.divided_only for d in found)


def _add_kernel_edits(analysis, cs: CallSite, helpers, members: list[_Member], pl: str, edits: dict) -> None:
    """Adds to the call's `edits` the kernel's: each window a whole-block access (or kept at its
    offset inside the block), the statements that fed only the windows gone, and the reads of a
    blocked dim's size kept meaning the full size."""
    ctx, site = analysis.ctx, cs.site
    window_edits: dict = {}
    removed = set()
    for member in members:
        block = member.block
        for sub, dims in block.subscripts:
            offset = member.window.offsets.get(id(sub))
            if offset is not None:  # the window stays, at its offset inside the block
                window_edits[sub] = offset_subscript_edit(block.dim, offset)
                removed.add(id(offset.dropped))
                continue
            window_edits[sub] = block_subscript_edit(block, dims, packed_tuple(analysis, sub, dims | set(block.squeezed)))
            removed |= touched_element_ids(sub, dims | set(block.squeezed))
    removed |= drop_unread_slices(ctx, helpers, removed, window_edits)
    starts = dead_start_bindings(ctx, site.kernel, [o for m in members for o in m.window.offsets.values()])
    removed |= {id(stmt) for stmt in starts}
    functions = [n for n in walk(site.kernel) if isinstance(n, cst.FunctionDef)]
    dead = dead_assignments(ctx, functions, removed)
    # A size read only by statements the windows leave dead (`nj = x_ref.shape[1] // BN` feeding
    # `t // nj`) goes with them: passing it in would leave a parameter nothing reads.
    reads = [r for m in members for r in m.reads if not any(a is d for d in dead for a in ctx.ancestors(r.node))]
    edits.update(extent_edits(cs, reads, [m.block for m in members], {a: (a, g) for a, g in enumerate(cs.grid)}, pl))
    edits.update(window_edits)
    if site.kernel not in edits:
        edits[site.kernel] = strip_leading_blank_lines
    for stmt in [*dead, *starts]:
        remove_statement(edits, stmt, siblings_of(ctx, stmt))


def _lockstep_witnesses(analysis, cs: CallSite, refs: set[str]) -> list[RefBlock]:
    """The program_id blocks of the kernel's other refs: read in the same steps, they vouch for
    the extent of an input read in lockstep with them (Bounds.check_blocks)."""
    out = []
    for (owner, other, dim), uses in _windowed_refs(analysis).items():
        if owner != (id(cs.site.call), id(cs.site.kernel)) or other in refs or other not in cs.slots:
            continue
        try:
            window = _shared_window(analysis, cs, other, dim, uses)
        except Refuse:
            continue
        size = _block_size(analysis, cs, window)
        if size is not None:
            out.append(RefBlock(other, window.use.dim, size, window.index, [], window.squeezed))
    return out


def _block_size(analysis, cs: CallSite, window: _Window) -> Optional[cst.BaseExpression]:
    """The block's size written at the call site: the window's, or for windows at an offset
    inside the program's block, that block's."""
    for offset in window.offsets.values():
        return offset.block
    return Translator(analysis.ctx, cs.site, cs.kernel_shape_dim)(window.use.size, window.use.env)


def _shared_window(analysis, cs: CallSite, ref: str, dim: int, uses: list[IndexUse]) -> _Window:
    """Every access of `ref` in the kernel has the same program_id block along `dim` (windows
    along other dims stay as they are, relative to the block, for a later round)."""
    ctx, site = analysis.ctx, cs.site
    by_sub: dict[int, list[IndexUse]] = {}
    for u in uses:
        by_sub.setdefault(id(u.subscript), []).append(u)
    found = None
    subscripts: list[cst.Subscript] = []
    offsets: dict[int, OffsetWindow] = {}
    for node in ref_subscripts(analysis, site, ref, pid_helpers(analysis, site)):
        sub_uses = [u for u in by_sub.get(id(node), []) if u.dim == dim]
        if not sub_uses:
            raise unwindowed(analysis, ref, dim, node, uses)
        use = sub_uses[0]
        check_called_once(ctx, site.kernel, node, ref, use)
        # Folded divisors written at the call site (rewrite.blocks.folds), so that two accesses
        # compare by what their index_maps would compute, not by the kernel's spelling.
        index, offset = _index_or_offset(analysis, cs, use, ref)
        squeezed = program_id_scalars(node, use, len(cs.grid))
        if offset is not None:
            offsets[id(node)] = offset
        size = offset.block_key if offset is not None else code(use.size) if use.size is not None else use.kind
        entry = (use.dim, size, index.key(), tuple(sorted(squeezed.items())))
        if found is None:
            found = (entry, use, index, squeezed)
        elif found[0] != entry:
            check_one_form(ref, found[1], use)
            raise Refuse(f"`{ref}` is accessed at different blocks in one grid step")
        subscripts.append(node)
    if found is None:
        raise Refuse(f"no program_id window on `{ref}`")
    _, use, index, squeezed = found
    dma = dma_written(ctx, cs, ref, subscripts, offsets)  # rewrite.inblock.dma_outputs
    if offsets:
        check_offset_accesses(ctx, cs, ref, [] if dma else subscripts, squeezed)
    return _Window(use, index, squeezed, subscripts, offsets, dma)


def _index_or_offset(analysis, cs: CallSite, use: IndexUse, ref: str) -> tuple[BlockIndexExpr, Optional[OffsetWindow]]:
    """The window's block index; or, for a window at an offset inside the program's block
    (`pl.ds(i * bm + c * 8, 8)`), the index of that block and the offset window."""
    try:
        return folds_at_call(analysis.ctx, cs, ref, pid_block_index(use, ref, len(cs.grid)), use.env, refuse=True), None
    except Refuse:
        offset = offset_window(analysis, cs, use, ref, len(cs.grid))
        if offset is None:
            raise
        return BlockIndexExpr({offset.axis: 1}), offset


RECIPE = Recipe(
    # PF101 / PF106: windows a loop walks, or at an offset no block of their size expresses, in a pid block
    NAME, frozenset({"PF103", "PF101", "PF106"}), planner, command="ProgramIdBlocks",
    description="Move pl.program_id windows on whole-array refs into BlockSpecs (R3, PF103).",
)
