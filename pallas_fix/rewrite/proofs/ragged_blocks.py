"""Ragged program_id grids: `grid=(pl.cdiv(n, BLOCK),)` with `x_ref[pl.ds(pid * BLOCK, BLOCK)]`
on whole-array refs, where BLOCK need not divide n.

The original's last program slices past the end of the array. On hardware that is out of
bounds (TPU VMEM and Triton / Mosaic GPU global memory are not bounds-checked): the original is
defined only when BLOCK divides n, or where the kernel masks its loads and stores, and there the
BlockSpec rewrite is the same program. In interpret mode the slice is clamped back inside the
array, while a BlockSpec's last block is partial (padded on read, masked on write); an
elementwise kernel computes the same values either way, other kernels may not. So such a lift is
an unsafe fix, applied once verification on the user's example passes, and its message states
the condition.

A kernel that reads its own position (`pid * BLOCK + iota` compared with n, to mask the tail)
sees other rows in a clamped window than the position says, so in the interpreters the original
and the partial block disagree exactly where the mask matters. On hardware nothing is clamped:
on Triton the original's window past the end is pointer arithmetic (rows at the positions the
kernel computes), and Triton masks every load and store of a BlockSpec's partial block itself
(jax/_src/pallas/triton/lowering.py, `_compute_offsets_from_indices`: a bounds mask wherever the
block does not divide the dim); a compiled TPU kernel does not clamp either (measured on a v5e,
benchmarks/tpu_experiments/oob_windows.py: a window past the end reads and writes the rows its
start names; measured along rows, so a TPU window along the lane dim stays refused), and a
partial last block holds the rows inside the array at the same positions, its writes past the
end dropped. So the lift is exact wherever the original is defined, at every
size: an unsafe fix. Masked Pallas loads and stores are padded past the end in interpret mode,
as hardware leaves them, so where every window is one the interpreters compare the lift at every
size; a plain `x_ref[rows]` window they clamp, so such a lift is checked only at sizes the block
divides (`RaggedDoubt.divided_only`: verification does not compare an example with a partial
block). On Mosaic GPU or an unknown backend it is refused: nothing there is measured or read.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import libcst as cst

from pallas_fix.analysis.context import ModuleContext, walk
from pallas_fix.core import names as N
from pallas_fix.core.model import Backend
from pallas_fix.core.plans import Refuse
from pallas_fix.rewrite.blocks.plan import RefBlock
from pallas_fix.rewrite.proofs.bounds import Bounds
from pallas_fix.rewrite.callsite.reading import CallSite
from pallas_fix.rewrite.text.syntax import code


@dataclass(frozen=True)
class RaggedDoubt:
    """The condition under which a lift with a partial last block is exact, as the fix states it."""

    text: str
    # The kernel reads its position (Triton, TPU) through a plain window: the interpreters clamp
    # the original's last window, so they can compare the two only at sizes the block divides.
    divided_only: bool = False


def ragged_doubt(cs: CallSite, block: RefBlock, trip: Optional[cst.BaseExpression] = None,
                 position_line: Optional[int] = None,
                 lockstep: Optional[tuple[RefBlock, cst.BaseExpression]] = None) -> Optional[RaggedDoubt]:
    """The condition under which lifting `block` is exact, when its only doubt is a partial last
    block along a `pl.cdiv` grid axis (an existing one, or a new one of `trip` steps: a loop
    `pl.loop(0, n, step=BLOCK)` or `fori_loop(0, pl.cdiv(n, BLOCK), ...)`); None when that is not
    the doubt. When the kernel reads its position (a program id, or for a new axis the loop index
    outside its windows: `position_line`, the caller's to find) the lift is exact only on a
    backend known not to clamp a window past the end (Triton, TPU); elsewhere this raises Refuse.
    `lockstep`: a block of another operand read at the same window in every step and the array
    extent the grid counts (`gO_ref` beside `x_ref` under `pl.cdiv(x.shape[0], bs)`): the kernel
    treats their rows as one length (were `block`'s array shorter, the original would read past its
    end whatever the grid; were it longer, the blocks read the same rows), so `block` takes its doubt."""
    counted, extent = lockstep or (block, cs.kernel_shape_dim(block.param, block.dim))
    axis = Bounds(cs).cdiv_axis(counted, extent, trip)
    if axis is None or extent is None:
        return None
    if lockstep is None:
        return _ragged_doubt(cs, block, trip, position_line, axis, extent)
    shared = (f"`{block.param}` is read at the same window as `{counted.param}` in every step, so its rows are taken to be "
              f"as many as `{counted.param}`'s, which the grid counts (were they fewer, the original would read past "
              "their end whatever the grid; were they more, its blocks read the same rows as the original); ")
    try:
        doubt = _ragged_doubt(cs, block, trip, position_line, axis, extent)
    except Refuse as refused:
        raise Refuse(shared + str(refused)) from None
    return RaggedDoubt(shared + doubt.text, doubt.divided_only)


def one_doubt(doubts: list[RaggedDoubt]) -> str:
    """What a fix says of several blocks' partial last blocks: they state one condition (the
    grid's last block), so one is said, first one the interpreters check only where it divides."""
    return next((d.text for d in doubts if d.divided_only), doubts[0].text)


def _ragged_doubt(cs: CallSite, block: RefBlock, trip: Optional[cst.BaseExpression], position_line: Optional[int],
                  axis: int | str, extent: cst.BaseExpression) -> RaggedDoubt:
    kernel = cs.site.kernel
    assert kernel is not None
    grid = trip if axis == "new" else cs.grid[axis]
    line = position_line if axis == "new" else position_read(cs.ctx, kernel, set(cs.slots))
    size, whole = code(block.size), code(extent)
    backend = cs.backend()
    lanes = backend is Backend.TPU and _lane_dim(cs, block)
    if line is not None and backend in _KEPT_POSITION and not lanes:
        # Masked accesses are judged at ragged sizes only on Triton, whose hardware pads them as
        # the interpreters do; a TPU lift is compared where the block divides.
        masked = backend is Backend.TRITON and masked_windows(cs.ctx, block)
        return _position_kept(backend, f"the grid `{code(grid)}` ends in a partial block of `{block.param}` unless "
                              f"`{size}` divides `{whole}`, and the kernel reads its position (line {line})",
                              f"`{size}` divides `{whole}`", masked)
    if line is not None:
        raise Refuse(
            f"with the grid `{code(grid)}` the last block may run past the end of `{block.param}`'s dim "
            f"{block.dim}, and the kernel reads its position (line {line}): where the original's last window is clamped back inside the array, its rows are "
            "not the rows the position names, while a BlockSpec hands the last step a partial block; "
            f"{_backend_note(cs, lanes)}; assert `{whole} % {size} == 0` before the pallas_call"
        )
    return RaggedDoubt(
        f"the grid `{code(grid)}` ends in a partial block of `{block.param}` unless `{size}` "
        f"divides `{whole}`: the original slices past the end there (out of bounds on hardware, clamped in "
        "interpret mode), the rewrite reads a padded block and masks its write; the two agree when it divides, "
        "or when the kernel's result for a row depends on that row alone")


# What each backend does past the end, where a lift that keeps the kernel's position reads is
# exact wherever the original is defined (the module docstring).
_KEPT_POSITION = {
    Backend.TRITON: ("on Triton the rewrite is the same program wherever the original is defined: the original's last "
                     "window past the end is plain pointer arithmetic (rows at the positions the kernel computes; an "
                     "access no mask covers is undefined there), and Triton masks every load and store of a BlockSpec's "
                     "partial last block itself"),
    Backend.TPU: ("on a TPU the rewrite is the same program wherever the original is defined: compiled, the original's "
                  "last window past the end is not clamped (it reads and writes the rows its start names, measured on a "
                  "TPU v5e; past the array's VMEM buffer it is undefined), and a BlockSpec's partial last block holds the "
                  "rows inside the array at the same positions, its writes past the end dropped"),
}


def _position_kept(backend: Backend, doubt: str, divides: str, masked: bool) -> RaggedDoubt:
    """The condition of a lift that keeps the kernel's position reads, and whether the
    interpreters can judge it at a ragged size (masked windows: padded there, as on hardware)."""
    exact = _KEPT_POSITION[backend]
    if masked:
        return RaggedDoubt(f"{doubt}; {exact}; the interpreters pad a masked access past the end as hardware leaves it, "
                           "so they compare the two at ragged sizes too")
    return RaggedDoubt(f"{doubt}; {exact}; in interpret mode the original's unmasked window is clamped back inside the "
                       f"array instead, so the interpreters can compare the two only at sizes where {divides}, and "
                       "verification compares no example with a partial block", divided_only=True)


def masked_windows(ctx: ModuleContext, block: RefBlock) -> bool:
    """Every window of `block` is the ref a masked Pallas load or store takes
    (`pltriton.load(x_ref.at[rows, :], mask=...)`). In interpret mode those pad a window past the
    end instead of clamping it (jax/_src/pallas/primitives.py, `_load_discharge_rule`,
    `_swap_discharge_rule`), as hardware leaves it, so the interpreters can judge the lift at a
    size the block does not divide; a plain `x_ref[rows]` is clamped there."""
    for sub, _dims in block.subscripts:
        arg = ctx.parent(sub)
        call = ctx.parent(arg) if isinstance(arg, cst.Arg) else None
        if not (isinstance(call, cst.Call) and call.args and call.args[0] is arg and masked_call(ctx, call)):
            return False
    return bool(block.subscripts)


def masked_call(ctx: ModuleContext, call: cst.Call) -> bool:
    """`pl.load` / `pltriton.load` / `.store` / `.swap` with a `mask=`."""
    name = ctx.imports.qualify(call.func) or ""
    return (name.startswith(N.PALLAS + ".") and name.rsplit(".", 1)[-1] in ("load", "store", "swap")
            and any(a.keyword is not None and a.keyword.value == "mask" for a in call.args))


def _lane_dim(cs: CallSite, block: RefBlock) -> bool:
    """`block` moves along the kernel view's last dim (the lanes), or its rank is unknown: on a
    TPU, what a window past the end holds was measured along rows only."""
    rank = cs.kernel_rank(block.param)
    return rank is None or block.dim >= rank - 1


def _backend_note(cs: CallSite, lanes: bool = False) -> str:
    """Why the backend does not settle it: only Triton and the TPU (along rows) are known to keep
    a window past the end at the elements its start names (module docstring)."""
    if lanes:
        return ("on a TPU a window past the end keeps the rows its start names (measured along rows); along the lane dim, "
                "where VMEM tiles lie side by side, that is not measured, so pallas-fix does not lift it")
    name = "Mosaic GPU" if cs.backend() is Backend.MOSAIC_GPU else "an unknown backend"
    return (f"on {name} pallas-fix does not know what the original's window past the end holds, so it does not lift "
            "it (on Triton or a TPU, which keep that window at the rows its start names, it would)")


def position_read(ctx: ModuleContext, kernel: cst.FunctionDef, refs: set[str]) -> Optional[int]:
    """The line of the first place the kernel uses its grid position other than to pick a window
    of one of `refs`: a `pl.program_id` (or a name computed from one) read anywhere but in a ref's
    index or in the value of an assignment to a name that is itself checked."""
    derived = _position_names(ctx, kernel, refs)
    for node in walk(kernel):
        is_pid = isinstance(node, cst.Call) and ctx.imports.is_(node.func, N.PROGRAM_ID)
        is_name = isinstance(node, cst.Name) and node.value in derived and _is_read(ctx, node)
        if (is_pid or is_name) and not _feeds_window(ctx, node, refs, derived):
            return ctx.span(node).line
    return None


def _position_names(ctx: ModuleContext, kernel: cst.FunctionDef, refs: set[str]) -> set[str]:
    """Names bound (anywhere in the kernel) to a value computed from `pl.program_id`."""
    names: set[str] = set()
    assigns = [n for n in walk(kernel) if isinstance(n, cst.Assign)]
    changed = True
    while changed:
        changed = False
        for a in assigns:
            if not _reads_position(ctx, a.value, names, refs):
                continue
            for t in a.targets:
                for n in _bound_names(t.target) or []:
                    if n.value not in names:
                        names.add(n.value)
                        changed = True
    return names


def _bound_names(target: cst.BaseExpression) -> Optional[list[cst.Name]]:
    """The names an assignment target binds (`a`, `a, (b, c)`); None when it stores into a
    subscript or attribute."""
    if isinstance(target, cst.Name):
        return [target]
    if isinstance(target, (cst.Tuple, cst.List)):
        parts = [_bound_names(e.value) for e in target.elements]
        return None if any(p is None for p in parts) else [n for p in parts for n in p]  # type: ignore[union-attr]
    return None


def _reads_position(ctx: ModuleContext, expr: cst.CSTNode, names: set[str], refs: set[str]) -> bool:
    """Is `expr`'s value computed from the position? Data loaded through a window is not: the
    position only picks where it comes from."""
    return any(((isinstance(n, cst.Call) and ctx.imports.is_(n.func, N.PROGRAM_ID))
                or (isinstance(n, cst.Name) and n.value in names)) and not _in_ref_index(ctx, n, refs)
               for n in walk(expr))


def _in_ref_index(ctx: ModuleContext, node: cst.CSTNode, refs: set[str]) -> bool:
    """`node` is part of the index of a subscript (or `.at[...]` view) of one of `refs`."""
    for a in ctx.ancestors(node):
        if isinstance(a, cst.SubscriptElement):
            sub = ctx.parent(a)
            base = sub.value if isinstance(sub, cst.Subscript) else None
            if isinstance(base, cst.Attribute) and base.attr.value == "at":
                base = base.value
            return isinstance(base, cst.Name) and base.value in refs
        if isinstance(a, (cst.BaseSmallStatement, cst.BaseCompoundStatement)):
            return False
    return False


def _is_read(ctx: ModuleContext, name: cst.Name) -> bool:
    """Not a binding, an attribute's name or a keyword."""
    parent = ctx.parent(name)
    if isinstance(parent, cst.Attribute) and parent.attr is name:
        return False
    if isinstance(parent, cst.Arg) and parent.keyword is name:
        return False
    return not any(isinstance(a, (cst.AssignTarget, cst.Param)) for a in list(ctx.ancestors(name))[:3])


def _feeds_window(ctx: ModuleContext, node: cst.CSTNode, refs: set[str], derived: set[str]) -> bool:
    """`node` sits in the index of a subscript of one of `refs`, or in the value of an assignment
    whose targets are position names (their own reads are checked in turn)."""
    if _in_ref_index(ctx, node, refs):
        return True
    for a in ctx.ancestors(node):
        if isinstance(a, cst.Assign):  # a store into a ref (`o_ref[...] = f(pid)`) binds no name: a read
            bound = [_bound_names(t.target) for t in a.targets]
            return all(b is not None and all(n.value in derived for n in b) for b in bound)
        if isinstance(a, (cst.BaseSmallStatement, cst.BaseCompoundStatement)):
            return False
    return False
