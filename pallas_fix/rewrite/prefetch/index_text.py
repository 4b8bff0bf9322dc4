"""What R6 writes and says about a gather (rewrite.prefetch.windows): the gathered block as an
index_map entry (`2 * idx_ref[i + 1] + 1`, or `cu_ref[s] // BT + t` for a table of row starts),
the refusal of a table index that runs outside the table, and the data assumption a row-start
gather rests on."""

from __future__ import annotations

from typing import Optional

from pallas_fix.analysis.loops.symbolic import Poly
from pallas_fix.rewrite.blocks.plan import BlockIndexExpr
from pallas_fix.rewrite.prefetch.windows import Gather
from pallas_fix.rewrite.text.syntax import code, paren_text


def rows_condition(gather: Gather, size_text: str) -> str:
    """The data assumption a row-start gather rests on, as the fix message states it."""
    return (
        f"assumes every `{gather.table}` entry is a multiple of `{size_text}` (sequences start on a block "
        "boundary); a sequence that starts mid-block would read the wrong rows, so verify on an example "
        "whose table satisfies it"
    )


def _render(index: BlockIndexExpr, names: dict[object, str]) -> str:
    """`i + 1`, `1 - j`, `2 * i - 3`: a sum of grid indices as a person writes it."""
    plus, minus = [], []
    for axis, mult in index.axes.items():
        term = names[axis] if abs(mult) == 1 else f"{abs(mult)} * {names[axis]}"
        (plus if mult > 0 else minus).append(term)
    if index.offset > 0 or not (plus or minus):
        plus.append(str(index.offset))
    elif index.offset < 0:
        minus.append(str(-index.offset))
    text = " + ".join(plus) if plus else f"-{minus.pop(0)}"
    return text + "".join(f" - {m}" for m in minus)


def block_text(gather: Gather, table_param: str, names: dict[object, str], size_text: str = "") -> str:
    """The gathered block index as an index_map entry: `2 * idx_ref[i + 1] + 1`, or for a table of
    row starts `cu_ref[s] // BT + t`."""
    items = [_render(e, names) for e in gather.read.index]
    load = f"{table_param}[{', '.join(items)}]"
    text = load if gather.mult == 1 else f"{gather.mult} * {load}"
    if gather.rows_axes is not None:
        text = f"{load} // {paren_text(size_text)}"
        if gather.rows_axes:
            text += " + " + _render(BlockIndexExpr(dict(gather.rows_axes), 0), names)
    if gather.offset:
        text += f" + {gather.offset}" if gather.offset > 0 else f" - {-gather.offset}"
    return text


def table_out_of_range(cs, bounds, gather: Gather) -> Optional[str]:
    """Why the table is read past its end (or before its start) in some grid step, when the sizes
    at the call prove it; None otherwise."""
    for d, index in enumerate(gather.read.index):
        full = cs.shape_dim(gather.table, d)
        if full is None:
            continue
        low = high = Poly.const(index.offset)
        for axis, mult in index.axes.items():
            if not isinstance(axis, int):
                return None
            span = (bounds.poly(cs.grid[axis]) - Poly.const(1)).scale(mult)
            if mult > 0:
                high = high + span
            else:
                low = low + span
        if bounds.prover.nonneg(Poly.const(-1) - low) or bounds.prover.nonneg(high - bounds.poly(full)):
            what = _render(index, {n: f"pl.program_id({n})" for n in index.axes})
            return (
                f"the table index `{what}` of `{gather.table}` along dim {d} runs outside `{code(full)}` entries "
                "over the grid; read the table inside its bounds"
            )
    return None
