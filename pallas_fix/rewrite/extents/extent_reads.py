"""Full-extent reads of a lifted dim: `x_ref.shape[0]` (a mean's `/ n`, a mask, a trip count)
or `m, n = x_ref.shape`, where the lift blocks dim 0.

After the rewrite the kernel's ref is the block, so `x_ref.shape[0]` would be the block's size.
When the blocks along that dim are numbered by one grid axis and tile the dim exactly (grid count
times block size is the array's size, proved from the code), the full size is
`pl.num_programs(axis) * x_ref.shape[0]`: it means the array's size in the rewritten kernel,
wherever the read sits, and needs nothing at the call site. Otherwise the size the kernel saw is
passed in as a static keyword argument (rewrite.extents.extent_params).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import libcst as cst

from pallas_fix.analysis.context import walk
from pallas_fix.core import names as N
from pallas_fix.core.names import call_arg
from pallas_fix.core.plans import Refuse
from pallas_fix.rewrite.blocks.plan import RefBlock
from pallas_fix.rewrite.proofs.bounds import Bounds
from pallas_fix.rewrite.callsite.reading import CallSite
from pallas_fix.rewrite.text.edits import Edit
from pallas_fix.rewrite.extents.extent_params import ExtentParams
from pallas_fix.rewrite.extents.squeezed_reads import new_dim, squeezed_read_edits, unpack_edits


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
    ("new" or an existing axis number) -> (its position in the new grid, its step count). A size
    no grid expression says is passed in as a keyword (rewrite.extents.extent_params); a ref whose block
    squeezes dims has its other reads renumbered (rewrite.extents.squeezed_reads)."""
    by_ref = {b.param: b for b in blocks}
    params = ExtentParams(cs)
    sizes = _FullSizes(cs, axes, pl, params)
    edits: dict[cst.CSTNode, Edit] = {}
    handled: set[int] = set()
    for read in reads:
        block = by_ref.get(read.ref)
        if block is None or (read.dim is not None and read.dim != block.dim):
            continue  # a dim the plan does not block: its size stays what it was (renumbered below)
        handled.add(id(read.node))
        assign = cs.ctx.parent(read.node)
        if read.dim is None:
            size_of = lambda _d, target, r=read, b=block: sizes.text(r, b, target)
            edits.update(unpack_edits(assign, read.name, block, size_of, params))
            continue
        single = isinstance(assign, cst.Assign) and assign.value is read.node and len(assign.targets) == 1
        full = sizes.text(read, block, assign.targets[0].target if single else None)
        if full is None:
            params.remove_assignment(assign)  # `n = x_ref.shape[0]`: `n` is the parameter now
        else:
            edits[read.node] = _replace(full if read.bare or " " not in full else f"({full})")
    edits.update(squeezed_read_edits(cs, reads, blocks, handled, params))
    _check_outside_copied_inits(cs.ctx, cs.site.kernel, [*edits, *params.edits])
    edits.update(params.build())
    return edits


def _check_outside_copied_inits(ctx, kernel, edited: list) -> None:
    """A loop's initial carry is written again into `_init` from its source text (lift-reduction's
    carries), through a leaf name bound just before the loop (`zeros = jnp.full(...)`): an edit
    inside that text would not reach the copy, which would read the block's shape."""
    texts = _copied_init_texts(ctx, kernel)
    for node in edited:
        if isinstance(node, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            continue  # a removed line's comments move to the next one; its Assign is checked itself
        for text in texts:
            if any(a is text for a in [node, *ctx.ancestors(node)]) or any(a is node for a in ctx.ancestors(text)):
                raise Refuse(
                    f"a shape read at line {ctx.span(node).line} feeds a loop's initial carry, which the rewrite writes "
                    "again on the first grid step from its source text; read the size into a name first "
                    "(`n = x_ref.shape[0]`) and build the carry from the name"
                )


def _copied_init_texts(ctx, kernel) -> list[cst.BaseExpression]:
    """The init expressions of the kernel's loops, and the values of the `name = value`
    statements that bind names read there."""
    inits = []
    for node in walk(kernel):
        if isinstance(node, cst.Call) and ctx.imports.is_(node.func, N.FORI_LOOP):
            inits.append(call_arg(node, 3, "init_val"))
        elif isinstance(node, cst.Call) and ctx.imports.is_(node.func, N.PL_LOOP):
            inits.append(call_arg(node, 99, "init_carry"))
    inits = [i for i in inits if i is not None]
    names = {n.value for i in inits for n in walk(i) if isinstance(n, cst.Name)}
    for node in walk(kernel):
        if isinstance(node, cst.Assign) and len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name) \
                and node.targets[0].target.value in names:
            inits.append(node.value)
    return inits


class _FullSizes:
    """The text meaning a blocked dim's full size in the rewritten kernel: `pl.num_programs(axis)
    * x_ref.shape[d]` where the blocks provably tile it (`pl.num_programs(axis)` for a squeezed
    dim, one element per step), else the parameter that carries it (rewrite.extents.extent_params)."""

    def __init__(self, cs: CallSite, axes: dict, pl: str, params: ExtentParams) -> None:
        self.cs, self.axes, self.pl, self.params = cs, axes, pl, params
        self._bounds: Optional[Bounds] = None

    def text(self, read: ExtentRead, block: RefBlock, target: Optional[cst.BaseExpression] = None) -> Optional[str]:
        """None: the name `target` the read is bound to became the parameter."""
        if self._bounds is None:
            self._bounds = Bounds(self.cs)
        axis = _tiling_axis(self.cs, self._bounds, block, self.axes)
        if axis is None:
            if target is not None and self.params.adopt(read.ref, block.dim, target):
                return None
            return self.params.name_for(read.ref, block.dim)
        if block.squeeze:
            return f"{self.pl}.num_programs({axis})"
        return f"{self.pl}.num_programs({axis}) * {read.name}.shape[{new_dim(block, block.dim)}]"


def _tiling_axis(cs: CallSite, bounds: Bounds, block: RefBlock, axes: dict) -> Optional[int]:
    """The grid axis whose steps tile `block`'s dim exactly, or None."""
    if len(block.index.axes) != 1 or block.index.offset != 0 or block.index.symbolic or block.dim in block.squeezed:
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


def _replace(text: str) -> Edit:
    return lambda _node: cst.parse_expression(text)
