"""What R6 writes and says about a gather (rewrite.prefetch.windows): the gathered block as an
index_map entry (`2 * idx_ref[i + 1] + 1`, or `cu_ref[s] // BT + t` for a table of row starts),
the refusal of a table index that runs outside the table, and the data assumption a row-start
gather rests on."""

from __future__ import annotations

from typing import Optional

from pallas_fix.analysis.loops.symbolic import Poly
from pallas_fix.rewrite.blocks.plan import BlockIndexExpr
from pallas_fix.rewrite.prefetch.windows import Gather, TableRead
from pallas_fix.rewrite.text.syntax import code, paren_text


def rows_condition(gather: Gather, size_text: str, extent_text: Optional[str] = None) -> str:
    """The data assumption a row-start gather rests on, as the fix message states it; with
    `extent_text` (the gathered dim's size at the call, not provably a multiple of the window)
    also the ragged tail's: a window running past the array's end is clamped in the original's
    interpreters (out of bounds on TPU) and a partial block in the rewrite
    (rewrite.proofs.ragged_blocks states the same for a `pl.cdiv` grid)."""
    said = (
        f"assumes every `{gather.table}` {_ASSUMES}{size_text}` (sequences start on a block "
        "boundary); a sequence that starts mid-block would read the wrong rows"
    )
    if extent_text is not None:
        said += (
            f", and that every window ends inside the `{extent_text}` rows of `{gather.ref}` (not provably a "
            f"multiple of `{size_text}`: a window past the end is clamped in the original and a partial block "
            f"in the rewrite; pad the rows to a multiple of `{size_text}`, as packed varlen inputs are)"
        )
    return said + ", so verify on an example whose table satisfies it"


_ASSUMES = "entry is a multiple of `"


def ranged_example_note(descriptions: list[str], example: str) -> str:
    """What a failed verification of a row-start gather says when the example draws its integers
    from a range (`i32[4] in [0, 16)`): such a table's entries are random, seldom multiples of
    the window, so the mismatch shows the data breaking the stated assumption, not a wrong
    rewrite of aligned tables. "" when no applied rewrite rests on that assumption or the
    example gives no range."""
    if not any(_ASSUMES in d for d in descriptions) or " in [" not in example:
        return ""
    return (
        "; the example draws its integers from a range, so its table entries are seldom multiples of the "
        "window and break the assumption the rewrite states: give an example whose table starts every "
        "sequence on a block boundary (build it in the entry from whole chunks, a prefix sum of chunk counts "
        "times the window) to verify the aligned case"
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


def _load_text(read: TableRead, params: dict[str, str], names: dict[object, str]) -> str:
    """`idx_ref[i + 1]`, or a composed lookup `cu_ref[ci_ref[t, 0]]`."""
    items = [_load_text(e, params, names) if isinstance(e, TableRead) else _render(e, names) for e in read.index]
    return f"{params[read.table]}[{', '.join(items)}]"


def block_text(gather: Gather, params: dict[str, str], names: dict[object, str], size_text: str = "") -> str:
    """The gathered block index as an index_map entry: `2 * idx_ref[i + 1] + 1`, or for a table of
    row starts `cu_ref[s] // BT + t` (`cu_ref[ci_ref[t, 0]] // BT + ci_ref[t, 1]` through a chunk
    map). `params` names each table's index_map parameter."""
    load = _load_text(gather.read, params, names)
    text = load if gather.mult == 1 else f"{gather.mult} * {load}"
    if gather.rows_axes is not None:
        text = f"{load} // {paren_text(size_text)}"
        if gather.rows_axes:
            text += " + " + _render(BlockIndexExpr(dict(gather.rows_axes), 0), names)
        for read, mult in gather.rows_reads:
            counted = _load_text(read, params, names)
            text += " + " + (counted if mult == 1 else f"{mult} * {counted}")
    if gather.offset:
        text += f" + {gather.offset}" if gather.offset > 0 else f" - {-gather.offset}"
    return text


def table_out_of_range(cs, bounds, gather: Gather) -> Optional[str]:
    """Why a table is read past its end (or before its start) in some grid step, when the sizes
    at the call prove it; None otherwise. An index read from another table is data: not proved."""
    for read in gather.reads():
        found = _read_out_of_range(cs, bounds, read)
        if found is not None:
            return found
    return None


def _read_out_of_range(cs, bounds, read: TableRead) -> Optional[str]:
    for d, index in enumerate(read.index):
        full = cs.shape_dim(read.table, d)
        if full is None or isinstance(index, TableRead):
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
                f"the table index `{what}` of `{read.table}` along dim {d} runs outside `{code(full)}` entries "
                "over the grid; read the table inside its bounds"
            )
    return None
