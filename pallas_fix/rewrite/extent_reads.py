"""Full-extent reads of a lifted dim: `x_ref.shape[0]` (a mean's `/ n`, a mask, a trip count)
or `m, n = x_ref.shape`, where the lift blocks dim 0.

After the rewrite the kernel's ref is the block, so `x_ref.shape[0]` would be the block's size.
When the blocks along that dim are numbered by one grid axis and tile the dim exactly (grid count
times block size is the array's size, proved from the code), the full size is
`pl.num_programs(axis) * x_ref.shape[0]`: it means the array's size in the rewritten kernel,
wherever the read sits. Otherwise the read is refused, saying what would prove the tiling.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import libcst as cst

from pallas_fix.core.plans import Refuse
from pallas_fix.rewrite.blocks import RefBlock
from pallas_fix.rewrite.bounds import Bounds
from pallas_fix.rewrite.callsite import CallSite
from pallas_fix.rewrite.edits import Edit
from pallas_fix.rewrite.syntax import code


@dataclass(frozen=True)
class ExtentRead:
    """One read of a lifted ref's size: `node` is `x.shape[dim]`, or the `x.shape` of an
    unpacking into `rank` names."""

    node: cst.BaseExpression
    ref: str  # the kernel parameter (the read may go through an alias)
    name: str  # the name the read spells
    dim: Optional[int]  # None: the whole `.shape`, unpacked
    rank: int = 0
    line: int = 0
    bare: bool = False  # the read is a whole value (an assignment's, an argument): no parentheses needed


def extent_read(ctx, name: cst.Name, ref: str, dim: Optional[int]) -> Optional[ExtentRead]:
    """The read `name.shape[dim]`, or `a, b = name.shape` into plain names; None otherwise."""
    shape = ctx.parent(name)
    line = ctx.span(name).line
    if dim is not None:
        sub = ctx.parent(shape)
        bare = isinstance(ctx.parent(sub), (cst.Assign, cst.Arg, cst.Element, cst.Return))
        return ExtentRead(sub, ref, name.value, dim, line=line, bare=bare)
    assign = ctx.parent(shape)
    if not (isinstance(assign, cst.Assign) and assign.value is shape and len(assign.targets) == 1):
        return None
    target = assign.targets[0].target
    if not isinstance(target, (cst.Tuple, cst.List)) or not all(isinstance(e.value, cst.Name) for e in target.elements):
        return None
    return ExtentRead(shape, ref, name.value, None, len(target.elements), line)


def extent_edits(cs: CallSite, reads: list[ExtentRead], blocks: list[RefBlock], axes: dict, pl: str) -> dict[cst.CSTNode, Edit]:
    """Edits that keep each read meaning the full size. `axes`: grid axis key of a block index
    ("new" or an existing axis number) -> (its position in the new grid, its step count)."""
    if not reads:
        return {}
    bounds = Bounds(cs)
    by_ref = {b.param: b for b in blocks}
    edits: dict[cst.CSTNode, Edit] = {}
    for read in reads:
        block = by_ref.get(read.ref)
        dims = [read.dim] if read.dim is not None else [block.dim] if block is not None else []
        if block is None or block.dim not in dims:
            continue  # a dim the plan does not block: its size stays what it was
        axis = _tiling_axis(cs, bounds, block, axes)
        if axis is None:
            raise _untiled(cs, read, block, axes)
        full = f"{pl}.num_programs({axis}) * {read.name}.shape[{block.dim}]"
        if read.dim is not None:
            edits[read.node] = _replace(full if read.bare else f"({full})")
        else:
            parts = [full if d == block.dim else f"{read.name}.shape[{d}]" for d in range(read.rank)]
            edits[read.node] = _replace(", ".join(parts))
    return edits


def _tiling_axis(cs: CallSite, bounds: Bounds, block: RefBlock, axes: dict) -> Optional[int]:
    """The grid axis whose steps tile `block`'s dim exactly, or None."""
    if len(block.index.axes) != 1 or block.index.offset != 0 or block.index.symbolic or block.squeezed.get(block.dim) is not None:
        return None
    (key, mult), = block.index.axes.items()
    if mult != 1 or key not in axes:
        return None
    position, steps = axes[key]
    extent = cs.kernel_shape_dim(block.param, block.dim)
    if extent is None or not covers_exactly(bounds, steps, block.size, extent):
        return None
    return position


def covers_exactly(bounds: Bounds, steps: cst.BaseExpression, size: cst.BaseExpression, extent: cst.BaseExpression) -> bool:
    """`steps * size == extent`, proved: equal as polynomials once the facts are substituted, or
    `steps` is `extent // size` with `size` dividing `extent`."""
    prover = bounds.prover
    total, whole, width = bounds.poly(steps), bounds.poly(extent), bounds.poly(size)
    if not prover.substitute(total * width - whole).terms:
        return True
    single = prover.substitute(total).monomial()
    if single is None or single[1] != 1 or len(single[0]) != 1:
        return False
    atom = bounds.symbols.atoms.get(single[0][0])
    return (
        atom is not None and atom.kind == "floor" and atom.num is not None and atom.den is not None
        and not prover.substitute(atom.num - whole).terms and not prover.substitute(atom.den - width).terms
        and prover.divides(width, whole)
    )


def _untiled(cs: CallSite, read: ExtentRead, block: RefBlock, axes: dict) -> Refuse:
    extent = cs.kernel_shape_dim(block.param, block.dim)
    fix = (
        f"assert `{code(extent)} % {code(block.size)} == 0` before the pallas_call, or pass the full size to the "
        f"kernel as a static argument (a functools.partial keyword) and read that instead"
        if extent is not None else "pass the full size to the kernel as a static argument"
    )
    return Refuse(
        f"`{read.name}.shape` is read in the kernel (line {read.line}); after the rewrite it would be the block's size. "
        f"pallas-fix writes the full size as `pl.num_programs(axis) * {read.name}.shape[{block.dim}]` when the blocks "
        f"tile dim {block.dim} exactly: {fix}"
    )


def _replace(text: str) -> Edit:
    return lambda _node: cst.parse_expression(text)
