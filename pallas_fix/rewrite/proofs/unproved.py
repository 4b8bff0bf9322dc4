"""The refusal a failed bounds proof gives (rewrite.proofs.bounds): where the last block may run
past the end, and the count or the assert before the pallas_call that would prove it inside."""

from __future__ import annotations

import libcst as cst

from pallas_fix.rewrite.blocks.plan import RefBlock
from pallas_fix.rewrite.text.syntax import code, paren_text


def unproved_blocks(block: RefBlock, size_expr: cst.BaseExpression, extents: list, below: bool = False) -> str:
    """Why the blocks of `block` (along a dim of size `size_expr`, over grid axes of `extents`
    steps) are not proved inside the array, and the count or assert that would prove them.
    A folded program id (`pid // n`, `pid % n`) names its range and the assert its parts need.
    `below`: the first block is what may lie outside, before the start (no size check helps)."""
    counts = ", ".join(f"`{code(e)}`" for e in extents)
    dim, size, ref = code(size_expr), code(block.size), block.param
    if below and not block.index.folds:
        names = {a: ("k" if a == "new" else f"program_id({a})") for a in block.index.axes}
        return (f"cannot prove the blocks of `{ref}` stay inside its dim {block.dim} (`{dim}`): block "
                f"`{block.index.render(names)}` (k counts the steps of the new grid axis, over {counts} steps) may fall "
                "below 0, a window before the start of the array, which the original's slice clamped; no size check "
                "proves it inside: walk the blocks forward from 0, or index them from the end (`n - 1 - k`)")
    what = (f"cannot prove the blocks of `{ref}` stay inside its dim {block.dim} (`{dim}`): with {counts} steps of "
            f"`{size}` the last block may run past the end, where the original's slice was clamped and a BlockSpec "
            "block is partial")
    strides = sorted({abs(m) for m in block.index.axes.values()} | ({abs(block.index.offset)} - {0}))
    if block.index.folds:
        names = {a: f"program_id({a})" for a in block.index.grid_axes()}
        index = block.index
        what += (f"; block `{index.render(names)}` runs over 0 .. n - 1 for a remainder `% n` and over "
                 "0 .. pl.cdiv(steps, n) - 1 for a quotient `// n`")
        if len(index.folds) != 1 or index.axes or index.offset or index.folds[0][0] != 1:
            return what
        _, axis, op, divisor = index.folds[0]
        count = code(divisor) if op == "%" else f"pl.cdiv({code(extents[0])}, {code(divisor)})"
        need = count if size == "1" else f"{paren_text(count)} * {paren_text(size)}"
        return f"{what}; assert `{dim} >= {need}` before the pallas_call (or make the grid the product of the parts' counts)"
    if strides != [1] or block.index.symbolic:
        # A stepped loop (every other block) or an offset: a plain count would not make it provable.
        names = {a: ("k" if a == "new" else f"program_id({a})") for a in block.index.axes}
        return (f"{what}; block `{block.index.render(names)}` (k counts the steps of the new grid axis) is not one "
                "pallas-fix can bound from these sizes")
    if size == "1" and len(extents) == 1:  # one element per step: no block is partial, one may lie past the end
        return (f"cannot prove the {counts} steps over `{ref}` stay inside its dim {block.dim} (`{dim}`), one element "
                f"each: past the end the original's slice is clamped and a BlockSpec block is out of range; size the grid by `{dim}` or assert `{counts[1:-1]} <= {dim}` before the pallas_call")
    floor = f"{dim} // {size}"
    fix = f"assert `{dim} % {size} == 0` before the pallas_call"
    if floor not in {code(e) for e in extents}:
        fix = f"make the count `{floor}` or {fix}"
    return f"{what}; {fix}"
