"""What R3 (codemods/program_id_blocks) reads of one program_id window: the block index its start
names along the grid axes (`pid // H`, `pid % H` folded as the index_map computes them), the
other dims a program id indexes exactly (squeezed block dims), what else the kernel may read
of the windowed ref (its dtype, rank and dims' sizes; the blocked dim's size is returned, to keep
meaning the full size), and what a plan says it did."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from pallas_fix.analysis.context import walk
from pallas_fix.analysis.loops.affine import decompose, fold_parts
from pallas_fix.analysis.loops.windows import hooks_for, window_of
from pallas_fix.core.model import IndexUse
from pallas_fix.core.plans import Refuse
from pallas_fix.rewrite.blocks.folds import fold_note
from pallas_fix.rewrite.blocks.plan import BlockIndexExpr
from pallas_fix.rewrite.callsite.reading import CallSite
from pallas_fix.rewrite.callsite.spelling.operands import CallSiteError
from pallas_fix.rewrite.extents.extent_reads import ExtentRead, extent_read
from pallas_fix.rewrite.kernel.ref_access import mention_kind, shape_refusal
from pallas_fix.rewrite.kernel.ref_lists import RefList
from pallas_fix.rewrite.text.syntax import code


def pid_block_index(use: IndexUse, ref: str, ngrid: int) -> BlockIndexExpr:
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


def program_id_scalars(sub: cst.Subscript, use: IndexUse, ngrid: int) -> dict[int, int]:
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


def check_other_uses(ctx, kernel, ref: str, allowed: set[int], dim: int, env, rank: Optional[int] = None) -> list[ExtentRead]:
    """Besides its windows the kernel may read only `.dtype`, `.ndim` and dims' sizes; the reads
    of the blocked dim's size are returned, to keep meaning the full size (rewrite.extents.extent_reads).
    `rank`: of the kernel's view of the ref where the call states it (`view_rank`), so that a dim
    read from the back (`q_ref.shape[-1]`) is known to be another dim than the blocked one."""
    reads = []
    for node in walk(kernel):
        if not isinstance(node, cst.Name) or node.value != ref or id(node) in allowed:
            continue
        kind, d = mention_kind(ctx, node, env, rank)
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


def view_rank(cs: CallSite, ref: str) -> Optional[int]:
    """The rank of the kernel's view of `ref` as the call states it: its BlockSpec's dims less the
    squeezed ones, or without a BlockSpec the operand's rank from the call site (never from the
    kernel's count of subscripts: `x_ref[:, c]` is legal at rank 3). None where unknown."""
    slot = cs.slots.get(ref)
    try:
        spec = cs.spec_of(slot) if slot is not None else None
    except CallSiteError:
        return None
    if spec is None or spec.dims is not None:
        return len(spec.visible_dims()) if spec is not None else None
    return cs.rank(ref, counted=False) if spec.whole and spec.node is None else None


def check_operand(cs: CallSite, ref: str) -> None:
    """An input or output of a gridded call; its window may lie inside the block its BlockSpec
    gives it (SpecWriter composes the two, or says why not)."""
    slot = cs.slots.get(ref)
    if slot is None or slot.kind not in ("in", "out"):
        raise Refuse(f"`{ref}` is not an input or output of the pallas_call")
    if not cs.grid:
        raise Refuse("the pallas_call has no grid")


def plan_description(site, members: list, listed: Optional[RefList]) -> str:
    """What R3's plan of `members` (codemods.program_id_blocks._Member) did, named by its dim and
    grid axes: a ref windowed along two dims takes two rewrites, and each line `--apply` prints
    must say which one it made; an aliased pair or the refs one comprehension walks, by every ref."""
    block = members[0].block
    axes = sorted(block.index.grid_axes() | set(block.squeezed.values()))
    by = ", ".join(f"pl.program_id({a})" for a in axes)
    by = f" (by {by})" if by else ""
    if len(members) == 1:
        moved = f"moved the program_id window on dim {block.dim} of `{block.param}`{by} in `{site.kernel_name}` into its BlockSpec"
    elif listed:
        moved = (f"moved the program_id window on dim {block.dim} of {', '.join(f'`{m.ref}`' for m in members)}{by}, which "
                 f"`{site.kernel_name}` reads as `{listed.name}` of one comprehension, into their BlockSpecs together")
    else:
        moved = (f"moved the program_id windows on dim {block.dim} of `{block.param}` and its aliased output "
                 f"`{members[1].ref}`{by} in `{site.kernel_name}` into their BlockSpecs together (one buffer, "
                 "input_output_aliases: each grid step reads and writes its own block)")
    offsets = next((m.block for m in members if m.window.offsets), None)
    return (f"{moved}{fold_note(block.index)}"
            f"{' (a block of `' + code(offsets.size) + '` along the dim; its windows stay at their offsets inside it)' if offsets else ''}"
            f"{'; it was left in HBM and written by DMA: the DMA now copies into its VMEM block, which the pipeline writes back' if members[0].window.dma else ''}")
