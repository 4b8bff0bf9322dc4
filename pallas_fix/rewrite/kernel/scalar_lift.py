"""Lift scalar indices (`x_ref[r, :]`, `o_ref[t] = ...`) into squeezed (`None`) block dims.

A scalar index `s` at dim d is a window of one element (analysis.loops.windows.scalar_window): its
block is `None` at dim d, the index_map returning `s` with the loop index replaced by the grid
index (`pl.BlockSpec((None, cols), lambda i: (i, 0))` for `x_ref[i, :]`). The kernel's view loses
the dim: `x_ref[r, :]` becomes `x_ref[...]`, `x_ref[r, pl.ds(c, n)]` becomes `x_ref[pl.ds(c, n)]`,
and the values the kernel computes with keep the rank they had (`x_ref[r, :]` was already 1-D).

A ref's scalars are lifted only when every access of the ref in the loop is that same scalar at
the same dim (`ScalarCandidate`s of one AccessGroup, settled by `settle_scalars`) and the backend
accepts the squeezed dim (`squeeze_blocker`). Otherwise they stay as they are, on a ref left
whole, as rewrite.kernel.scalar_blocks says. Beside a program_id window, a scalar dim the
backend cannot squeeze is kept whole in the block, its scalar left in the kernel (`split_squeezable`). What the kernel reads of the ref's shape would change
meaning (one dim fewer) and is refused (`check_squeezed_reads`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import libcst as cst

from pallas_fix.analysis.discovery.varargs import binds_from_star
from pallas_fix.analysis.context import walk
from pallas_fix.analysis.loops.windows import loop_key, window_of
from pallas_fix.core.model import Backend, IndexUse
from pallas_fix.core.plans import Refuse
from pallas_fix.rewrite.callsite.reading import CallSite
from pallas_fix.rewrite.blocks.kernel_edits import kernel_subscript_edit
from pallas_fix.rewrite.callsite.spelling.operands import CallSiteError
from pallas_fix.rewrite.callsite.ranks import rank_from_kernel, rank_is_counted, unknown_rank
from pallas_fix.rewrite.kernel.scalar_blocks import scalar_lift_refusal, windows_to_lift
from pallas_fix.rewrite.extents.squeezed_reads import renumberable
from pallas_fix.rewrite.text.syntax import code, is_zero, paren_text


@dataclass(frozen=True)
class ScalarCandidate:
    """A subscript whose only dynamic indices of the loop are scalars."""

    subscript: cst.Subscript
    uses: list[IndexUse]
    written: bool


def settle_scalars(analysis, region, loop, groups: dict, candidates: dict[str, list[ScalarCandidate]], kept: list) -> None:
    """Lift each ref's scalar candidates into its group (a squeezed block along the new axis) or,
    when something blocks the lift, leave them as scalar indices on a ref left whole
    (rewrite.kernel.scalar_blocks.windows_to_lift: refused for a write whose iterations would move)."""
    for ref, found in candidates.items():
        group = groups[ref]
        reason = _group_blocker(analysis, region, loop, group, found)
        for cand in found:
            if reason is None:
                group.subscripts.append(cand.subscript)
                group.uses[id(cand.subscript)] = cand.uses
                continue
            resident = cand.written and not loop.carries and _keeps_rows(region.site, reason)
            windows_to_lift(cand.uses, cand.written and not loop.carries and not resident, kept, reason)
            group.unlifted_accesses.append(cand.subscript)
            group.written = group.written or cand.written
            if resident:
                group.kept_rows.append(cand.subscript)


def _keeps_rows(site, reason: Optional[str]) -> bool:
    """A write at row t of a dim TPU cannot squeeze, in a loop whose iterations become grid steps:
    the output can stay whole (the dim spans its block) and resident while the steps write their
    rows, in the loop's order, once the new axis is sequential ("arbitrary"; rewrite.blocks.
    grid_params.new_axis_semantics makes it so for an output no block moves). Only on a known TPU:
    on an unknown backend the steps may be Triton's independent programs."""
    return reason is not None and reason.startswith(TPU_SQUEEZE) and site.backend is Backend.TPU


def _group_blocker(analysis, region, loop, group, found: list[ScalarCandidate]) -> Optional[str]:
    """Why the scalars of one ref cannot become one squeezed block, or None."""
    ref = group.ref
    if group.subscripts:
        return f"`{ref}` is also sliced by a window of the loop index"
    if group.unlifted_accesses:
        line = analysis.ctx.span(group.unlifted_accesses[0]).line
        return f"`{ref}` is also accessed without the loop index inside the loop (line {line})"
    keys = set()
    for cand in found:
        if len(cand.uses) != 1:
            return f"`{ref}` is indexed by the loop index in more than one dim"
        use = cand.uses[0]
        block = window_of(use).block
        if block is None and cand.written and not loop.carries:
            # A reversed index (`n - 1 - i`) whose offset the plan writes at the call site and
            # proves in bounds (rewrite.kernel.ref_access.lifted_block): only for a write that
            # would otherwise be refused, since a read left unlifted keeps its ref whole instead.
            block = window_of(use).symbolic_block
        if block is None:
            return window_of(use).reason
        if any(k != loop_key(loop) and not k.startswith("pid:") for k in block.atoms):
            return f"the scalar index `{analysis.ctx.code(use.start)}` depends on a value no grid axis provides"
        keys.add((use.dim, tuple(sorted(block.atoms.items())), block.offset,
                  tuple((m, analysis.ctx.code(e)) for m, e in block.symbolic)))
    if len(keys) != 1:
        return f"`{ref}` is indexed at different scalars within one iteration"
    other = _other_mention(analysis.ctx, region, ref, [c.subscript for c in found])
    if other is not None:
        return other
    site = region.site
    try:  # an unreadable call site leaves the scalars as they are; the planner says why it refuses
        cs = CallSite(analysis.ctx, site, analysis.detection.envs.get(site.kernel))
        return squeeze_blocker(cs, ref, found[0].uses[0].dim)
    except CallSiteError as err:
        return str(err)


def _other_mention(ctx, region, ref: str, subscripts: list[cst.Subscript]) -> Optional[str]:
    """A mention of `ref` in the kernel that a squeezed block would change or break: anything
    but the scalar accesses themselves, `.dtype`, the loop's bounds (gone with the loop) and the
    shape reads rewrite.extents.squeezed_reads renumbers. Other uses of `.shape` (`.size`, the whole
    shape) lose the squeezed dim; accesses outside the loop would see one element."""
    loop = region.loop
    bounds = [loop.lower, loop.upper, *([loop.step] if loop.step is not None else []), *region.bound_stmts]
    bases = {id(s.value.value if isinstance(s.value, cst.Attribute) else s.value) for s in subscripts}
    for node in walk(region.site.kernel):
        if not isinstance(node, cst.Name) or node.value != ref or id(node) in bases:
            continue
        parent = ctx.parent(node)
        if isinstance(parent, cst.Param) or (isinstance(parent, cst.Attribute) and parent.attr is node):
            continue
        if binds_from_star(ctx, node):
            continue  # `(o_ref,) = outs` declares the ref, as a parameter does
        if isinstance(parent, cst.Attribute) and parent.value is node and parent.attr.value == "dtype":
            continue
        in_init = loop.init is not None and any(a is loop.init for a in ctx.ancestors(node))
        if renumberable(ctx, node) and not in_init:
            continue  # rewritten for the squeezed view (rewrite.extents.squeezed_reads); R2 rewrites a carry's init from its source
        if any(a is b for a in ctx.ancestors(node) for b in bounds):
            continue
        what = f"`{ref}.{parent.attr.value}`" if isinstance(parent, cst.Attribute) and parent.value is node else f"`{ref}`"
        return (f"{what} is read at line {ctx.span(node).line}, which a block squeezing the scalar's dim would "
                "change (one dim fewer, one element per step)")
    return None


def squeeze_blocker(cs: CallSite, ref: str, dim: int) -> Optional[str]:
    """Why the backend would reject a squeezed block dim at the kernel's dim `dim` of `ref`, or None.

    Measured with jax 0.12: the HLO and TPU interpreters accept a squeezed dim anywhere, even the
    only dim of a 1-D ref (the kernel then sees a 0-d ref). Triton and Mosaic GPU lowering take a
    squeezed dim's index as an element offset (`jax/_src/pallas/triton/lowering.py`
    `_get_start_index`, `jax/_src/pallas/mosaic_gpu/lowering.py` `_get_block_indices`), at any
    dim; the dims left keep the sizes of the whole-array block the original already had, so
    Triton's power-of-two rule is no new constraint. TPU lowering (`jax/_src/pallas/mosaic/
    lowering.py`, `_check_block_mappings`) requires the last two block dims to be multiples of
    (8, 128) or whole, and a squeezed dim counts as 1: only leading dims of a rank >= 3 array
    squeeze (`(None, 16, 128)` of a (4, 16, 128) array). An unknown backend is held to TPU's rule,
    as the rest of pallas-fix does (rewrite.kernel.scalar_blocks._tpu_note)."""
    slot = cs.slots.get(ref)
    if slot is None:
        return f"`{ref}` is not a kernel parameter pallas-fix can map to an operand"
    try:
        spec = cs.spec_of(slot)
    except CallSiteError as err:
        return str(err)
    rank = len(spec.block) if spec.block is not None else cs.rank(ref)
    if rank is None:
        return unknown_rank(cs.ctx, cs.site, cs.slots, ref)
    spelled = rank_from_kernel(cs.site, ref) if spec.block is None else None
    if spelled is not None and spelled != rank:
        # The call site's rank is read from how the wrapper builds shapes; the block written
        # from it must match the array.
        return f"the kernel indexes `{ref}` with {spelled} indices but the call site suggests rank {rank}"
    if cs.backend() in (Backend.TRITON, Backend.MOSAIC_GPU):
        return None
    visible = spec.visible_dims() if spec.dims is not None else list(range(rank))
    array_dim = visible[dim] if dim < len(visible) else dim
    if array_dim >= rank - 2:
        unknown = (" (the backend is unknown, so pallas-fix holds it to TPU's rules; `--backend triton` or the "
                   "call's compiler_params say otherwise)") if cs.backend() is Backend.UNKNOWN else ""
        # A rank counted from the kernel's indices is a lower bound (CallSite.rank): say so.
        of = (f"of `{ref}`, which the kernel indexes with {rank} indices and whose rank nothing at the call states"
              if spec.block is None and rank_is_counted(cs, ref) else f"of the {rank}-D `{ref}`")
        return f"{TPU_SQUEEZE} (dim {array_dim} {of}){unknown}"
    return None


# The start of squeeze_blocker's reason where only TPU's tiling rule stands in the way: the dim
# can then stay whole in the block, its scalar in the kernel (kept_dim_refusal).
TPU_SQUEEZE = "TPU lowering rejects a squeezed (None) block dim among a block's last two dims"


def kept_dim_refusal(use: IndexUse, blocker: str) -> Refuse:
    """What a program-id scalar on a dim TPU cannot squeeze gets: the dim stays whole in the
    ref's block (split_squeezable keeps it beside a dim that moves; a ref nothing else moves stays
    the whole array) and the kernel keeps its scalar, which reads a row of what is in VMEM. Said
    as what happens, with the two forms that would move one row per step on TPU."""
    ctx = use.env.ctx  # type: ignore[attr-defined]
    ref, start = use.ref_name, ctx.code(use.start)
    return Refuse(
        f"`{ref}` keeps the dim `{start}` indexes whole in its block, and the kernel keeps `{start}`: {blocker}; "
        f"the block spans that dim, so `{start}` picks a row of what is already in VMEM. To move one row per step "
        "on TPU, give the array a unit dim after that one (`(rows, 1, cols)`, block `(None, 1, cols)`: the row is "
        f"then no longer among the block's last two dims), or move a block of several rows "
        f"(`pl.ds({paren_text(start)} * bs, bs)`, bs a multiple of 8)"
    )


def _index_still(cs: CallSite, ref: str, dim: int) -> bool:
    """The ref's spec does not move its block along the kernel's dim `dim` (no spec, or block
    index 0 there): the block spans the dim, as kept_dim_refusal says."""
    try:
        spec = cs.spec_of(cs.slots[ref])
    except (CallSiteError, KeyError):
        return False
    if spec.block is None:
        return True  # the whole array at block 0 on every step
    visible = spec.visible_dims() if spec.dims is not None else list(range(len(spec.block)))
    array_dim = visible[dim] if dim < len(visible) else None
    if array_dim is None or array_dim >= len(spec.block):
        return False
    full = cs.shape_dim(ref, array_dim)
    if full is None or code(spec.block[array_dim]) != code(full):
        return False
    return spec.index_exprs is None or (array_dim < len(spec.index_exprs) and is_zero(spec.index_exprs[array_dim]))


def scalar_block_size(cs: CallSite, use: IndexUse) -> cst.BaseExpression:
    """The size of a squeezed block dim (one element), once the backend accepts it at `use`'s dim."""
    blocker = squeeze_blocker(cs, use.ref_name, use.dim)
    if blocker is not None and blocker.startswith(TPU_SQUEEZE) and _index_still(cs, use.ref_name, use.dim):
        raise kept_dim_refusal(use, blocker)
    if blocker is not None:
        raise scalar_lift_refusal(use, blocker)
    return cst.Integer("1")


def check_one_form(ref: str, one: IndexUse, other: IndexUse) -> None:
    """Two accesses of `ref` along one dim, one at a scalar and one through a window: one block
    cannot serve both (a squeezed dim has no rows around the scalar, a window's block no
    element offset of the whole array)."""
    if (one.kind == "scalar") == (other.kind == "scalar"):
        return
    scalar, window = (one, other) if one.kind == "scalar" else (other, one)
    ctx = scalar.env.ctx  # type: ignore[attr-defined]
    raise Refuse(
        f"`{ref}` is accessed both at the scalar `{ctx.code(scalar.start)}` (line {scalar.span.line}) and through "
        f"the window `{ctx.code(window.element)}` (line {window.span.line}) along dim {scalar.dim}; one block cannot "
        "serve both: take the row from the window instead (`x[0]` of the block), or keep the index as it is"
    )


def split_squeezable(cs: CallSite, ref: str, dims: dict[int, int], index_axes: set[int]) -> tuple[dict[int, int], dict[int, int]]:
    """The dims a window's planner would squeeze beside it (`x_ref[b, c, pl.ds(t * bt, bt)]`, b and c
    grid indices), split into those it squeezes and those it keeps whole. Where squeeze_blocker
    rejects a dim (TPU, and an unknown backend held to TPU's rules: a squeezed dim among a block's
    last two), the block keeps that dim's full extent, its index_map returns 0 there, and the kernel
    keeps indexing it by the scalar (`x_ref[c, pl.ds(...)]` of a `(None, C, bt)` block): a partial
    lift, which Mosaic's tiling rule accepts since the dim is whole. Only where the block stays put
    while the kept axes run, each kept axis inner to `index_axes` (the axes the block index reads):
    otherwise every step would copy the block again (an input), or revisit it (an output). Then
    TPU, and an unknown backend held to its rules, refuse; a GPU backend squeezes. An output keeps a dim
    whole only off "parallel" axes: a chip with two cores splits those, and each core would write
    its copy of the shared block back."""
    squeezed, kept = {}, {}
    for dim, axis in dims.items():
        (squeezed if squeeze_blocker(cs, ref, dim) is None else kept)[dim] = axis
    if not kept:
        return squeezed, kept
    used = index_axes | set(squeezed.values())
    if min(kept.values()) < max(used, default=-1):
        if cs.backend() in (Backend.TRITON, Backend.MOSAIC_GPU):  # no tiling rule: squeezed anywhere
            return dict(dims), {}
        dim = min(kept)
        raise Refuse(f"`{ref}`'s dim {dim} would become a squeezed (None) block dim: {squeeze_blocker(cs, ref, dim)}; "
                     "index a block of several rows there instead (`pl.ds(b * 8, 8)`)")
    slot = cs.slots.get(ref)
    _, _, semantics = cs.dimension_semantics()
    for dim, axis in kept.items():
        if slot is not None and slot.kind == "out" and semantics is not None and semantics[axis:axis + 1] == ["parallel"]:
            raise Refuse(
                f"`{ref}` is indexed by `pl.program_id({axis})` at dim {dim}, which cannot become a squeezed "
                f"(None) block dim here ({squeeze_blocker(cs, ref, dim)}), and kept whole its block would be "
                f"shared by the steps of grid axis {axis}, declared \"parallel\": declare it \"arbitrary\", "
                "or index a block of several rows there (`pl.ds(b * 8, 8)`)"
            )
    return squeezed, kept


def block_subscript_edit(block, dims: set[int], packed=None):
    """The kernel-side edit of one lifted access: a window becomes the whole block
    (rewrite.blocks.kernel_edits), a squeezed dim's scalar disappears from the subscript.
    `packed`: the tuple a one-name subscript stands for (kernel_edits.packed_tuple)."""
    if block.squeeze:
        return kernel_subscript_edit(set(), frozenset(dims) | frozenset(block.squeezed), packed)
    return kernel_subscript_edit(dims, frozenset(block.squeezed), packed)


def check_squeezed_reads(analysis, site, blocks, bounds=()) -> None:
    """A squeezed ref's view has one dim fewer: `.shape[1]` becomes `.shape[0]`, unpackings lose a
    name. The plan's extent edits renumber those (rewrite.extents.squeezed_reads); `.size` and the whole
    shape used as a value would change meaning and are refused. Reads inside `bounds` (the loop's
    bounds, which disappear with the loop) are fine."""
    squeezed = {b.param: b for b in blocks if b.squeeze}
    if not squeezed or site.kernel is None:
        return
    ctx = analysis.ctx
    for node in walk(site.kernel):
        if not isinstance(node, cst.Name) or node.value not in squeezed:
            continue
        parent = ctx.parent(node)
        if not (isinstance(parent, cst.Attribute) and parent.value is node and parent.attr.value in ("shape", "ndim", "size")):
            continue
        if renumberable(ctx, node):
            continue
        if any(a is b for a in ctx.ancestors(node) for b in bounds):
            continue
        dim = squeezed[node.value].dim
        raise Refuse(
            f"`{node.value}.{parent.attr.value}` is read in the kernel (line {ctx.span(node).line}); once dim {dim} is "
            f"squeezed out of `{node.value}`'s block its view has one dim fewer: read the size from another ref, "
            "read single dims (`x_ref.shape[1]`), or pass it in as a static argument"
        )
