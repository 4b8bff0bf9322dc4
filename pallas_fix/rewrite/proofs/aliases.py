"""An input and the output it aliases (`input_output_aliases={0: 0}`) are one buffer. The original
kernel sees them as whole refs: Pallas copies the whole input in before the kernel runs and the
whole output back after it, so whatever order the kernel's windows take, every read sees the
input as it was. Once a lift gives them blocks, each grid step copies its input block in and its
output block back while the other steps run: a step reading a block another step writes
(`x_ref[:, pl.ds((k + 1) * bs, bs)]` beside `o_ref[:, pl.ds(k * bs, bs)]`, an in-place shift) reads
what that step may already have written back, and on a chip with two cores the steps race on it
(TPU interpret mode's race detector names it). A lift keeps the pair only where both move in the
same blocks, each step reading and writing its own block; otherwise it is refused.
"""

from __future__ import annotations

from typing import Optional

from pallas_fix.rewrite.blocks.plan import RefBlock
from pallas_fix.rewrite.callsite.call_params import alias_pairs
from pallas_fix.rewrite.callsite.reading import CallSite, CallSiteError
from pallas_fix.rewrite.text.syntax import code


def check_aliased_blocks(cs: CallSite, blocks: dict[str, RefBlock], touched) -> None:
    """Refuse a plan that blocks an aliased input and its output differently. `touched(param)`:
    the kernel reads or writes that ref (an alias whose input the kernel never reads, brainevent's
    plasticity kernels updating `out_w_ref` in place, has nothing to race with)."""
    if cs.site.kw("input_output_aliases") is None:
        return
    if not any(s.param in blocks for s in cs.slots.values()):
        return
    for in_slot, out_slot in alias_pairs(cs):
        old, new = blocks.get(in_slot.param), blocks.get(out_slot.param)
        if (old is None and new is None) or not (touched(in_slot.param) and touched(out_slot.param)):
            continue
        if old is not None and new is not None and _same_block(old, new):
            continue
        raise CallSiteError(
            f"`{in_slot.param}` and `{out_slot.param}` are one buffer (input_output_aliases) and the lift would move "
            f"them in different blocks ({_said(in_slot.param, old)}; {_said(out_slot.param, new)}): a grid step could "
            "read a block another step has already written back, and on a chip with two cores race with it, where "
            "the original read its whole input before writing; read and write the same window in each step, or "
            "drop the alias")


def _same_block(a: RefBlock, b: RefBlock) -> bool:
    return (a.dim, code(a.size), a.index.key(), a.squeezed, a.squeeze) == (b.dim, code(b.size), b.index.key(), b.squeezed, b.squeeze)


def _said(param: str, block: Optional[RefBlock]) -> str:
    if block is None:
        return f"`{param}` whole"
    axes = set(block.index.axes) | block.index.grid_axes()
    names = {a: "step" if a == "new" else f"pl.program_id({a})" for a in axes}
    return f"`{param}` in blocks of `{code(block.size)}` along dim {block.dim}, block `{block.index.render(names)}`"
