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
index_map returns the window's block index. One ref per round: the engine re-analyses between.
A window at an offset inside the program's block (`pl.ds(i * bm + c * 8, 8)`, walked by a static
or traced loop) gives the ref the block of `bm` at `i` and keeps the walk inside it
(rewrite.inblock.offset_windows). An output left in HBM (`pl.ANY`) that the kernel writes only by
DMAs waited in their step gets a VMEM block, the DMAs re-based onto it (rewrite.inblock.dma_outputs).
On Triton, an input also read elsewhere passes again for its window (rewrite.kernel.twin_refs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import libcst as cst

from pallas_fix.analysis.loops.affine import decompose, fold_parts
from pallas_fix.analysis.context import walk
from pallas_fix.analysis.loops.windows import hooks_for, window_of
from pallas_fix.core.model import FixSafety, IndexUse, Origin
from pallas_fix.core.plans import FixPlan, Outcome, Recipe, Refusal, Refuse, use_key
from pallas_fix.rewrite.text import imports
from pallas_fix.rewrite.blocks.edits import (BlockIndexExpr, CallEdits, RefBlock, dead_assignments, guarded_edits,
                                             packed_tuple, touched_element_ids)
from pallas_fix.rewrite.blocks.blockspecs import ResidentOutput
from pallas_fix.rewrite.blocks.folds import check_folded_output, fold_note, folds_at_call
from pallas_fix.rewrite.callsite.ranks import hypothesis_doubt
from pallas_fix.rewrite.callsite.reading import CallSite, CallSiteError
from pallas_fix.rewrite.callsite.variant_arms import arm_planning, together
from pallas_fix.rewrite.common import check_single_call, per_use
from pallas_fix.rewrite.text.edits import apply_edits, remove_statement
from pallas_fix.rewrite.extents.extent_reads import ExtentRead, extent_edits, extent_read
from pallas_fix.rewrite.inblock.dma_outputs import dma_written
from pallas_fix.rewrite.kernel.output_reads import check_written_before_read
from pallas_fix.rewrite.inblock.offset_windows import (OffsetWindow, check_offset_accesses, dead_start_bindings, loop_walked_window,
                                                    offset_subscript_edit, offset_window, ragged_offsets)
from pallas_fix.rewrite.kernel.pid_helpers import drop_unread_slices, passed_ref_args, pid_helpers, ref_subscripts, use_ref
from pallas_fix.rewrite.proofs.ragged_blocks import ragged_doubt
from pallas_fix.rewrite.kernel.ref_access import mention_kind, ref_base, shape_refusal
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
    refusal that waits for the first window's fix."""
    groups = _windowed_refs(analysis)
    outcomes = together(analysis, per_use(groups.items(), lambda key, uses: _attempt(analysis, groups, key, uses)), NAME)
    return {**program_id_scalar_refusals(NAME, analysis), **outcomes}


def _attempt(analysis, groups: dict, key: tuple[tuple[int, int], str, int], uses: list[IndexUse]) -> Outcome:
    try:
        with arm_planning(analysis, uses[0].kernel_site) as confine:  # a variant: against its own arm
            return confine.keep(_plan(analysis, key[1], key[2], uses, confine))
    except ResidentOutput as exc:
        return Refusal(NAME, str(exc), _windows_over(groups, key, exc.axes))
    except (Refuse, CallSiteError) as exc:  # as rewrite.common.attempt
        return Refusal(NAME, str(exc), getattr(exc, "waits_for", ()))


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


def _plan(analysis, ref: str, dim: int, uses: list[IndexUse], confine) -> FixPlan:
    ctx = analysis.ctx
    site = uses[0].kernel_site
    check_single_call(analysis, site, variants=True)
    kernel_env = analysis.detection.envs.get(site.kernel)
    cs = CallSite(ctx, site, kernel_env)
    _check_operand(cs, ref)
    try:
        window = _shared_window(analysis, cs, ref, dim, uses)
    except Unwindowed as why:  # also read elsewhere: on Triton the window takes a twin of the operand
        return twin_plan(analysis, cs, ref, dim, uses, why, lambda *a: _plan(*a, lambda *_: None), _windowed_refs)
    index = window.index  # its divisors already written at the call site
    check_folded_output(cs, ref, index)
    helpers = pid_helpers(analysis, site)
    allowed = {id(ref_base(s)) for s in window.subscripts} | passed_ref_args(ctx, site, ref, helpers)
    reads = _check_other_uses(ctx, site.kernel, ref, allowed, window.use.dim, kernel_env)
    check_output_views(analysis, cs, ref, window.subscripts)
    if cs.slots[ref].kind == "out":
        check_written_before_read(ctx, site.kernel, ref, window.subscripts, lambda s: {dim, *window.squeezed}, cs.aliased)
    use = window.use
    index_axes = index.grid_axes()
    squeezed, _kept = split_squeezable(cs, ref, window.squeezed, index_axes)  # kept whole: their scalars stay in the kernel
    squeeze = use.kind == "scalar"  # a squeezed dim (rewrite.kernel.scalar_lift)
    size = scalar_block_size(cs, use) if squeeze else _block_size(analysis, cs, window)
    if size is None:
        raise Refuse(f"the block size `{code(use.size)}` of `{ref}` cannot be written at the pallas_call")
    block = RefBlock(ref, use.dim, size, index, [(s, {use.dim}) for s in window.subscripts], squeezed, squeeze, window.dma)
    check_squeezed_reads(analysis, site, [block])
    witnesses = _lockstep_witnesses(analysis, cs, ref)
    doubt, guards, divided_only = None, (), False
    try:
        calls = CallEdits(cs, [block], None, witnesses)
        edits = calls.build()
        # Its rows taken to be a lockstep witness's, whose last block may be partial (Bounds.check_blocks).
        lockstep = calls.bounds.ragged_lockstep.get(ref)
        if lockstep is not None and window.offsets:
            raise Refuse(ragged_offsets(ref))
        if lockstep is not None:
            try:
                ragged = ragged_doubt(cs, block) or ragged_doubt(cs, block, lockstep=lockstep)
            except Refuse as refused:  # the kernel reads its position: only a check in the wrapper helps
                edits, doubt, guards = guarded_edits(cs, [block], None, witnesses, unproved=refused)
            else:
                assert ragged is not None  # the witness passed Bounds.cdiv_axis
                divided_only, doubt = ragged.divided_only, ragged.text
    except CallSiteError as unproved:
        try:
            # a partial last block along a cdiv axis (rewrite.proofs.ragged_blocks); windows at an
            # offset inside it are proved inside whole blocks only: a check in the wrapper, or nothing
            doubt = None if window.offsets else ragged_doubt(cs, block)
        except Refuse as refused:  # the kernel reads its position: only a check in the wrapper helps
            edits, doubt, guards = guarded_edits(cs, [block], None, witnesses, unproved=refused)
        else:
            if doubt is None:  # a shape fact the code leaves unsaid may prove it, written as a check
                edits, doubt, guards = guarded_edits(cs, [block], None, witnesses, unproved=unproved)
            else:
                edits = CallEdits(cs, [block], None, witnesses, partial_ok=frozenset({(ref, block.dim)})).build()
                divided_only, doubt = doubt.divided_only, doubt.text
    pl = imports.spelling(ctx, imports.PALLAS)
    window_edits: dict = {}
    removed = set()
    for sub, dims in block.subscripts:
        offset = window.offsets.get(id(sub))
        if offset is not None:  # the window stays, at its offset inside the block
            window_edits[sub] = offset_subscript_edit(block.dim, offset)
            removed.add(id(offset.dropped))
            continue
        window_edits[sub] = block_subscript_edit(block, dims, packed_tuple(analysis, sub, dims | set(squeezed)))
        removed |= touched_element_ids(sub, dims | set(squeezed))
    removed |= drop_unread_slices(ctx, helpers, removed, window_edits)
    starts = dead_start_bindings(ctx, site.kernel, list(window.offsets.values()))
    removed |= {id(stmt) for stmt in starts}
    functions = [n for n in walk(site.kernel) if isinstance(n, cst.FunctionDef)]
    dead = dead_assignments(ctx, functions, removed)
    # A size read only by statements the windows leave dead (`nj = x_ref.shape[1] // BN` feeding
    # `t // nj`) goes with them: passing it in would leave a parameter nothing reads.
    reads = [r for r in reads if not any(a is d for d in dead for a in ctx.ancestors(r.node))]
    edits.update(extent_edits(cs, reads, [block], {a: (a, g) for a, g in enumerate(cs.grid)}, pl.text))
    edits.update(window_edits)
    if site.kernel not in edits:
        edits[site.kernel] = strip_leading_blank_lines
    for stmt in [*dead, *starts]:
        remove_statement(edits, stmt, siblings_of(ctx, stmt))
    needed = pl.add
    confine(edits, needed, cs.slots[ref], dim)

    def rewrite(module: cst.Module) -> cst.Module:
        return imports.add_imports(apply_edits(module, edits)[0], [needed])

    # Named by its dim and grid axes: a ref windowed along two dims takes two rewrites, and each
    # line `--apply` prints must say which one it made.
    axes = sorted(index.grid_axes() | set(squeezed.values()))
    by = ", ".join(f"pl.program_id({a})" for a in axes)
    description = (f"moved the program_id window on dim {use.dim} of `{ref}`{f' (by {by})' if by else ''} "
                   f"in `{site.kernel_name}` into its BlockSpec{fold_note(index)}"
                   f"{' (a block of `' + code(size) + '` along the dim; its windows stay at their offsets inside it)' if window.offsets else ''}"
                   f"{'; it was left in HBM and written by DMA: the DMA now copies into its VMEM block, which the pipeline writes back' if window.dma else ''}")
    doubt = hypothesis_doubt(doubt, cs.hypotheses)
    if doubt is not None:
        return FixPlan(NAME, FixSafety.UNSAFE, uses, f"{description}; unsafe: {doubt}", rewrite, site=site, guards=guards,
                       divided_only=divided_only)
    return FixPlan(NAME, FixSafety.SAFE, uses, description, rewrite, site=site)


def _lockstep_witnesses(analysis, cs: CallSite, ref: str) -> list[RefBlock]:
    """The program_id blocks of the kernel's other refs: read in the same steps, they vouch for
    the extent of an input read in lockstep with them (Bounds.check_blocks)."""
    out = []
    for (owner, other, dim), uses in _windowed_refs(analysis).items():
        if owner != (id(cs.site.call), id(cs.site.kernel)) or other == ref:
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


def _check_operand(cs: CallSite, ref: str) -> None:
    """An input or output of a gridded call; its window may lie inside the block its BlockSpec
    gives it (SpecWriter composes the two, or says why not)."""
    slot = cs.slots.get(ref)
    if slot is None or slot.kind not in ("in", "out"):
        raise Refuse(f"`{ref}` is not an input or output of the pallas_call")
    if not cs.grid:
        raise Refuse("the pallas_call has no grid")


def _shared_window(analysis, cs: CallSite, ref: str, dim: int, uses: list[IndexUse]) -> _Window:
    """Every access of `ref` in the kernel has the same program_id block along `dim` (windows
    along other dims stay as they are, relative to the block, for a later round)."""
    ctx, site = analysis.ctx, cs.site
    kernel_env = analysis.detection.envs.get(site.kernel)
    by_sub: dict[int, list[IndexUse]] = {}
    for u in uses:
        by_sub.setdefault(id(u.subscript), []).append(u)
    found = None
    subscripts: list[cst.Subscript] = []
    offsets: dict[int, OffsetWindow] = {}
    for node in ref_subscripts(analysis, site, ref, pid_helpers(analysis, site)):
        sub_uses = [u for u in by_sub.get(id(node), []) if u.dim == dim]
        if not sub_uses:
            raise unwindowed(ctx, ref, dim, node)
        use = sub_uses[0]
        # Folded divisors written at the call site (rewrite.blocks.folds), so that two accesses
        # compare by what their index_maps would compute, not by the kernel's spelling.
        index, offset = _index_or_offset(analysis, cs, use, ref)
        squeezed = _program_id_scalars(node, use, len(cs.grid))
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
        return folds_at_call(analysis.ctx, cs, ref, _block_index(use, ref, len(cs.grid)), use.env, refuse=True), None
    except Refuse:
        offset = offset_window(analysis, cs, use, ref, len(cs.grid))
        if offset is None:
            raise
        return BlockIndexExpr({offset.axis: 1}), offset


def _block_index(use: IndexUse, ref: str, ngrid: int) -> BlockIndexExpr:
    """The window's block index along the grid axes its start moves with, whole or folded
    (`pid // H`, `pid % H`: the index_map computes the same quotient and remainder)."""
    window = window_of(use, folds=True)
    if window.block is None:
        raise Refuse(f"the window on `{ref}` is not provably a block ({window.reason})")
    axes, folds = {}, []
    for key, mult in window.block.atoms.items():
        if not key.startswith(("pid:", "fold:")):
            raise Refuse(f"the start of `{ref}` also depends on `{code(window.block.atom_exprs[key])}`")
        axis = int(key.split(":")[1])
        if axis >= ngrid:
            raise Refuse(f"pl.program_id({axis}) is beyond the grid's {ngrid} axes")
        if key.startswith("fold:"):
            parts = fold_parts(window.block.atom_exprs[key], hooks_for(use.env))
            assert parts is not None
            folds.append((mult, axis, parts[1], parts[2]))
        else:
            axes[axis] = mult
    return BlockIndexExpr(axes, window.block.offset, folds=tuple(folds))


def _program_id_scalars(sub: cst.Subscript, use: IndexUse, ngrid: int) -> dict[int, int]:
    """Dims of `sub` indexed by exactly `pl.program_id(k)` (directly or through a name): those
    become squeezed (None) block dims whose index_map entry is grid axis k."""
    out: dict[int, int] = {}
    env = use.env
    for n, el in enumerate(sub.slice):
        if n == use.dim or not isinstance(el.slice, cst.Index):
            continue
        value = el.slice.value
        if not env.value(value).dynamic:
            continue
        aff = decompose(value, hooks_for(env))
        if aff is None or aff.const and any(c.mult for c in aff.const):
            continue
        terms = {k: c for k, c in aff.terms.items() if c.mult}
        if len(terms) == 1:
            (key, coeff), = terms.items()
            if key.startswith("pid:") and coeff.mult == 1 and not coeff.factors:
                axis = int(key.split(":")[1])
                if axis < ngrid:
                    out[n] = axis
    return out


def _check_other_uses(ctx, kernel, ref: str, allowed: set[int], dim: int, env) -> list[ExtentRead]:
    """Besides its windows the kernel may read only `.dtype`, `.ndim` and dims' sizes; the reads
    of the blocked dim's size are returned, to keep meaning the full size (rewrite.extents.extent_reads)."""
    reads = []
    for node in walk(kernel):
        if not isinstance(node, cst.Name) or node.value != ref or id(node) in allowed:
            continue
        kind, d = mention_kind(ctx, node, env)
        if kind in ("param", "meta") or (kind == "shape" and d is not None and d != dim):
            continue
        if kind == "shape":
            read = extent_read(ctx, node, ref, d)
            if read is None:
                raise shape_refusal(ref)
            reads.append(read)
            continue
        raise Refuse(f"`{ref}` is used outside its program_id windows (line {ctx.span(node).line})")
    return reads


RECIPE = Recipe(
    # PF101 / PF106: windows a loop walks, or at an offset no block of their size expresses, in a pid block
    NAME, frozenset({"PF103", "PF101", "PF106"}), planner, command="ProgramIdBlocks",
    description="Move pl.program_id windows on whole-array refs into BlockSpecs (R3, PF103).",
)
