"""The source text of a new BlockSpec: the whole array for an operand that had none, or a
blocked spec for a ref the plan reads in blocks (its old block and index folded in)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import libcst as cst

from pallas_fix.analysis.values.same_value import same_value_at
from pallas_fix.core.model import Backend
from pallas_fix.core.names import call_arg
from pallas_fix.rewrite.callsite.spelling.block_dims import other_dim_refusal
from pallas_fix.rewrite.callsite.ranks import unknown_rank
from pallas_fix.rewrite.blocks.plan import RefBlock, name_grid_indices
from pallas_fix.rewrite.proofs.bounds import Bounds
from pallas_fix.rewrite.proofs.tpu_tiling import check_new_block_dims
from pallas_fix.rewrite.callsite.reading import CallSite
from pallas_fix.rewrite.blocks.grid_params import GridParams
from pallas_fix.rewrite.callsite.spelling.operands import CallSiteError, Slot, Spec
from pallas_fix.rewrite.text.syntax import code, is_zero, names_in, paren_text

# Why a loop walking sub-tiles of a block the grid already moves is left alone (also said by
# rewrite.loops.strip_mines, which finds such a loop before a lift reads the rest of it).
STRIP_MINE = ("a deliberate strip-mine, the form JAX's flash attention uses (block_k_major > block_k) to compute on "
              "small tiles while the grid copies large blocks; a lift would shrink the blocks the grid copies and "
              "multiply its steps, so pallas-fix leaves it (--lift-for-memory lifts it: smaller blocks, more steps)")


def _refuse_hidden_reads(param: str, block: RefBlock, index: str, params: list[str]) -> None:
    """The block index reads the wrapper's names (`k // bk - 1 - kk`, `i // H`) inside the
    index_map, where a parameter of the same name hides them: pallas-fix names its own parameters
    clear of them (GridParams), so this is an index_map whose parameters the user named."""
    hidden = sorted(block.index.read_names() & {p.lstrip("*") for p in params})
    if hidden:
        raise CallSiteError(
            f"the block index of `{param}` would be `{index}`, which reads the wrapper's `{hidden[0]}`, but inside "
            f"the index_map `{hidden[0]}` is a parameter (a grid index) and hides it; rename that parameter of the "
            "call's index_maps")


def _tuple_text(items: list[str]) -> str:
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


@dataclass(frozen=True)
class SpecWriter:
    cs: CallSite
    grid: GridParams
    pl: str  # how the module spells jax.experimental.pallas
    bounds: Bounds
    # param -> one window's block shape of a strip-mined lift (RefBlock.windows), as written
    window_shapes: dict[str, str] = field(default_factory=dict)

    def whole(self, slot: Slot) -> str:
        """A spec for the whole array of `slot`, indexed at zero on every step."""
        rank = self.cs.rank(slot.param)
        grid, rest = self.grid.for_spec(Spec(None, None, None))
        params = ", ".join(grid + rest)
        shape = _shape_expr(self.cs, slot)
        if rank is None or shape is None:
            return self.plain_whole()
        return f"{self.pl}.BlockSpec({shape}, lambda {params}: {_tuple_text(['0'] * rank)})"

    def plain_whole(self) -> str:
        """The whole array without writing its shape (block_shape None: the full array, index_map
        None: block 0 on every step)."""
        return f"{self.pl}.BlockSpec()"

    def lifted(self, slot: Slot, spec: Spec, block: RefBlock) -> str:
        """`slot`'s spec once the plan reads `block.param` in blocks of `block.size`."""
        placement = spec.carried_placement(slot.param, drop_space=block.to_vmem)
        if spec.index_map is not None and not isinstance(spec.index_map, (cst.Lambda, cst.FunctionDef)):
            raise CallSiteError(f"`{slot.param}` has a named index_map function; pallas-fix only rewrites lambdas")
        rank = len(spec.block) if spec.block is not None else self.cs.rank(slot.param)
        spec.fill_zero_index(rank)
        if spec.index_map is not None and spec.index_exprs is None:
            raise CallSiteError(f"the index_map of `{slot.param}` does not return a literal tuple")
        if spec.index_extra:
            raise CallSiteError(f"the index_map of `{slot.param}` has default, keyword or `**` parameters")
        other = next((d for d in spec.dims or [] if d.kind == "other"), None)
        if other is not None:
            raise CallSiteError(other_dim_refusal(slot.param, other))
        if rank is None and spec.index_exprs is not None:
            rank = len(spec.index_exprs)  # an index_map returns one block index per dim
        if rank is None:
            raise CallSiteError(unknown_rank(self.cs.ctx, self.cs.site, self.cs.slots, slot.param))
        # The kernel sees only the non-squeezed dims: map its dim to the array's.
        visible = spec.visible_dims() if spec.dims is not None else list(range(rank))
        if block.dim >= len(visible):
            raise CallSiteError(f"`{slot.param}` is sliced along dim {block.dim} but its block has {len(visible)} dims")
        grid, rest = self.grid.for_spec(spec)
        names = dict(self.grid.names)
        for n in range(self.grid.ngrid):
            names[n] = grid[n]
        if self.grid.adds_axis:
            # a step the kernel skips asks for the block the next computing step reads, so the
            # pipeline copies nothing for it (JAX's flash attention does the same)
            skipped = self.grid.skipped_index
            names["new"] = name_grid_indices(skipped, grid) if skipped is not None and slot.kind == "in" else grid[-1]
        written = block.strip_index if block.strip_index is not None else block.index
        dims = _Dims(slot, spec, block, visible[block.dim], written.render(names),
                     {visible[d]: names[axis] for d, axis in block.squeezed.items() if d < len(visible)})
        _refuse_hidden_reads(slot.param, block, dims.new_index, grid + rest)
        entries = [self._dim_entry(dims, e) for e in range(rank)]
        new = {e: None for e in dims.squeezed}
        new[dims.array_dim] = None if block.squeeze else block.size
        check_new_block_dims(self.cs, self.bounds, slot.param, rank, new)  # Mosaic's tiling rule, on TPU
        if slot.kind == "out":
            self._check_residency(slot, spec, block)
        shape = _tuple_text([size for size, _ in entries])
        if block.windows is not None:  # one window's block, for the wrapper's count (rewrite.blocks.edits)
            self.window_shapes[slot.param] = _tuple_text(
                [code(block.size) if e == dims.array_dim else size for e, (size, _) in enumerate(entries)])
        index = _tuple_text([idx for _, idx in entries])
        return f"{self.pl}.BlockSpec({shape}, lambda {', '.join(grid + rest)}: {index}{placement})"

    def _dim_entry(self, dims: "_Dims", e: int) -> tuple[str, str]:
        """(block size, block index) of array dim `e` in the new spec."""
        spec, block, param = dims.spec, dims.block, dims.slot.param
        old = spec.dims[e] if spec.dims is not None else None
        old_block = old.expr if old is not None else None
        old_index = spec.index_exprs[e] if spec.index_exprs is not None else None
        kept_index = code(old_index) if old_index is not None else "0"
        if old is not None and old.kind == "squeezed":
            return code(old.expr), kept_index  # the user's own spelling: None, pl.squeezed, pl.Squeezed()
        if e in dims.squeezed:
            if old_index is not None and not is_zero(old_index):
                raise CallSiteError(f"dim {e} of `{param}` already has a block index")
            return "None", dims.squeezed[e]
        if e == dims.array_dim and block.squeeze:
            if old_index is None or is_zero(old_index):
                return "None", dims.new_index
            return "None", self._nested_row(dims, e, old, old_index)
        if e == dims.array_dim:
            if old_index is None or is_zero(old_index):
                return block.written_size(), dims.new_index
            if old is None or old.size is None:
                raise CallSiteError(f"the BlockSpec of `{param}` has an index but no block shape")
            if block.windows is not None:
                raise CallSiteError(f"`{param}` already has a block along dim {e}: a strip-mined lift takes whole dims")
            self._check_nested(dims, e, old.size, old_index)
            if self.grid.adds_axis and not self.grid.undo_strip_mines:
                raise CallSiteError(
                    f"the loop walks `{param}` in sub-tiles of the block its BlockSpec already moves along dim {e} "
                    f"(`{code(old.size)}` at block `{code(old_index)}`): {STRIP_MINE}")
            ratio = f"({code(old.size)} // {paren_text(code(block.size))})"
            return code(block.size), f"{paren_text(code(old_index))} * {ratio} + {paren_text(dims.new_index)}"
        if old_block is not None:
            return code(old_block), kept_index
        size = self.cs.shape_dim(param, e)
        if size is None:
            raise CallSiteError(f"cannot write the size of dim {e} of `{param}` at the call site")
        return code(size), kept_index

    def _nested_row(self, dims: "_Dims", e: int, old, old_index: cst.BaseExpression) -> str:
        """The element index of a row the loop walks one at a time (a scalar index) inside the
        block the spec already moves along dim `e`: row t of block i is row `i * size + t` of the
        array. Like sub-tiles of that block (issue 27), a deliberate strip-mine unless
        --lift-for-memory asks: the grid copies whole blocks while the kernel computes on rows."""
        param = dims.slot.param
        if old is None or old.size is None:
            raise CallSiteError(f"the BlockSpec of `{param}` has an index but no block shape")
        if self.grid.adds_axis and not self.grid.undo_strip_mines:
            raise CallSiteError(
                f"the loop walks `{param}` one row at a time (a scalar index) inside the block its BlockSpec already "
                f"moves along dim {e} (`{code(old.size)}` rows at block `{code(old_index)}`): a deliberate strip-mine, "
                "the grid copies whole blocks into VMEM and the kernel computes on their rows (two-level chunking); "
                "a lift would copy one row per step and multiply the grid's steps by the rows of a block, so "
                f"pallas-fix leaves it (--lift-for-memory lifts it: block index `{paren_text(code(old_index))} * "
                f"{paren_text(code(old.size))} + {paren_text(dims.new_index)}`, one row per step)")
        self._check_nested(dims, e, old.size, old_index)
        return f"{paren_text(code(old_index))} * {paren_text(code(old.size))} + {paren_text(dims.new_index)}"

    def _check_nested(self, dims: "_Dims", e: int, outer: cst.BaseExpression, old_index: cst.BaseExpression) -> None:
        """Sub-block k of existing block i is block `i * (outer // size) + k` only when the size
        divides the block and no existing block is partial (all of them inside the array)."""
        param = dims.slot.param
        self.bounds.require_divides(dims.block.size, outer, param, e)
        assert isinstance(dims.spec.index_map, (cst.Lambda, cst.FunctionDef))
        self.bounds.check_existing_blocks(dims.spec.index_map, old_index, outer, self.cs.shape_dim(param, e), param, e)

    def _check_residency(self, slot: Slot, spec: Spec, block: RefBlock) -> None:
        """An output block must not be revisited: grid axes its index ignores must all be inner
        to the ones it uses. Otherwise the output was resident across an axis (an accumulator)
        and moving its block would write partial results back and start over.

        Not on Triton: there a block is a pointer offset into the output in global memory, with no
        buffer written back when the block changes; a program stores only what its own stores
        name, as before the lift, and the programs of a grid run independently (no accumulator
        can live across them)."""
        if self.cs.backend() is Backend.TRITON:
            return
        ngrid = self.grid.ngrid
        used: set[int] = block.index.grid_axes() | set(block.squeezed.values())
        if self.grid.adds_axis:
            used.add(ngrid)
        if spec.index_exprs is not None and spec.index_params:
            exprs = spec.index_exprs
            used |= {n for n, p in enumerate(spec.index_params[:ngrid]) if _moves_along(exprs, p)}
        total = ngrid + (1 if self.grid.adds_axis else 0)
        unused = [a for a in range(total) if a not in used]
        if unused and max(used, default=-1) > min(unused):
            raise ResidentOutput(
                f"the output `{slot.param}` stays resident across grid axis {min(unused)} "
                "(an accumulator or a block shared by several steps); blocking it would revisit blocks",
                slot.param, frozenset(unused),
            )
        if unused and spec.unblocked():
            self._check_parallel_revisits(slot, spec, unused)

    def _check_parallel_revisits(self, slot: Slot, spec: Spec, unused: list[int]) -> None:
        """An output left in HBM (written by DMA) whose new block ignores an axis marked "parallel":
        the steps along it wrote disjoint windows of the one HBM array, safe from any core, while
        one VMEM block revisited across them is written back by every core that runs one of them
        (red team 14: proposed as safe; TPU interpret mode on 8 cores found the race)."""
        _, _, semantics = self.cs.dimension_semantics()
        parallel = [a for a in unused if semantics and a < len(semantics) and "parallel" in semantics[a]]
        if parallel:
            raise ResidentOutput(
                f"the output `{slot.param}` is left in HBM (`{spec.placement}`) and its block would not follow grid axis "
                f"{parallel[0]}, marked \"parallel\": the steps along it write their windows of the HBM array from any "
                "core, but a VMEM block they share is written back by each core that runs one of them (a race on a "
                "chip with two cores); mark the axis \"arbitrary\", or block the output along it too",
                slot.param, frozenset(parallel),
            )


def unwritten_steps_problem(cs: CallSite, param: str, dim: int, window_dim: Optional[cst.BaseExpression]) -> Optional[str]:
    """Why the steps a `pl.when(k < upper)` skips may not write back the blocks of the output
    `param` they visit unwritten; None when they may. They may where each original block of the
    output belongs to one grid step alone (its index moves with every grid axis, each in a dim of
    its own), blocked in VMEM, not aliased, and the new blocks tile that block along `dim` as the
    loop's windows did (`window_dim`, the kernel's view of that dim, the axis's length): the skipped
    steps' blocks are the rows of that step's block the original left unwritten and wrote back
    anyway, undefined in both. On Triton nothing is written back: a skipped step stores nothing."""
    if cs.backend() is Backend.TRITON:
        return None
    slot = cs.slots.get(param)
    if slot is None:
        return "it is not an operand of the call"
    if cs.aliased:
        return "the call aliases outputs to inputs (input_output_aliases), whose rows the original may keep"
    spec = cs.spec_of(slot)
    if spec.unblocked():
        return f"its BlockSpec sets `{spec.placement}`, so the original's unwritten rows keep what the array held"
    view = cs.kernel_shape_dim(param, dim)
    if view is None or window_dim is None or code(view) != code(window_dim):
        return "its block along the loop's dim is not the one the new axis divides"
    ngrid = len(cs.grid)
    if ngrid and spec.whole:
        return "its block is the whole array, which every grid step shares"
    params = spec.index_params[:ngrid]
    if ngrid and (spec.index_exprs is None or len(params) < ngrid):
        return "its index_map cannot be read"
    for name in params:
        own = [e for e in spec.index_exprs or [] if names_in(e) & set(params) == {name} and _moves_with(e, name)]
        if not own:
            return (f"its block does not move with every grid step (not with `{name}`), so other steps write "
                    "the rows a skipped step would write back")
    return None


def _moves_along(exprs: list[cst.BaseExpression], name: str) -> bool:
    """Whether a written block index (all its dims) moves on every step of grid parameter
    `name`: one dim moves with it, or two dims split it as a folded grid does (`i // n`, `i % n`)."""
    if any(_moves_with(e, name) for e in exprs):
        return True
    splits = [e for e in exprs
              if isinstance(e, cst.BinaryOperation) and _moves_with(e.left, name) and name not in names_in(e.right)]
    divs = {code(e.right) for e in splits if isinstance(e.operator, cst.FloorDivide)}
    return any(code(e.right) in divs for e in splits if isinstance(e.operator, cst.Modulo))


def _moves_with(expr: cst.BaseExpression, name: str) -> bool:
    """Whether a written block index moves on every step of grid parameter `name`: the parameter
    itself, shifted or scaled by terms that do not mention it. A floor division, a modulo or a
    table read (`i // 2`, `ids_ref[i]`) may hand consecutive steps one block, resident across them."""
    if isinstance(expr, cst.Name):
        return expr.value == name
    if not isinstance(expr, cst.BinaryOperation) or not isinstance(expr.operator, (cst.Add, cst.Subtract, cst.Multiply)):
        return False
    left, right = name in names_in(expr.left), name in names_in(expr.right)
    if left == right:
        return False
    other = expr.right if left else expr.left
    if isinstance(expr.operator, cst.Multiply) and is_zero(other):
        return False
    return _moves_with(expr.left if left else expr.right, name)


class ResidentOutput(CallSiteError):
    """An output block would be revisited: its index ignores grid axes `axes` inside the ones it
    uses. A planner that will give the output its window along those axes itself (another dim
    of the same ref) can say the refusal lasts only until then."""

    def __init__(self, message: str, param: str, axes: frozenset[int]) -> None:
        super().__init__(message)
        self.param = param
        self.axes = axes


@dataclass(frozen=True)
class _Dims:
    """What every dim of one lifted spec needs to know."""

    slot: Slot
    spec: Spec
    block: RefBlock
    array_dim: int  # the array dim the kernel's sliced dim is
    new_index: str  # the block index along it, rendered
    squeezed: dict[int, str]  # array dim -> the grid parameter that indexes it (block dim None)


def _shape_expr(cs: CallSite, slot: Slot) -> Optional[str]:
    """The array's shape written at the pallas_call; None where no text says it there (an operand
    or out_shape entry rebound before the kernel gets it: rewrite.call_timing)."""
    if slot.kind == "in":
        plain = slot.arg is not None and isinstance(slot.arg, (cst.Name, cst.Attribute)) and cs.arg_at_call(slot.arg)
        return f"{code(slot.arg)}.shape" if plain else None
    if slot.kind == "out" and isinstance(slot.out_shape, cst.Call):
        shape = call_arg(slot.out_shape, 0, "shape")
        if shape is not None and isinstance(shape, (cst.Tuple, cst.Attribute, cst.Name)) and same_value_at(cs.ctx, shape, cs.site.call):
            return code(shape)
    return None
