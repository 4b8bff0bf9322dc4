"""Windows left on views of an output whose program_id window moves into its BlockSpec.

`o_rows = o_ref.at[pl.ds(r, bm), :]` then `o_rows[:, pl.ds(c, bn)] = ...` with `r`, `c` from two
program ids: moving the row window gives `o_ref` a block indexed by the row axis alone, so every
step of the column axis writes the same block. Those steps may run at once (a "parallel" TPU
axis, any Triton or Mosaic GPU axis), and even in order each step writes back the whole block.
The view's window is not one a planner moves with its root (it is not an operand of the call),
so the plan refuses instead of leaving it behind.
"""

from __future__ import annotations

from pallas_fix.core.model import Origin
from pallas_fix.core.plans import Refuse
from pallas_fix.rewrite.kernel.ref_views import resolve_ref_name


def check_output_views(analysis, cs, ref: str, moved_subscripts: list) -> None:
    """Refuses moving `ref`'s window while an output of the call keeps a program_id window
    through a view. For the output itself the block would be shared by the other axis' steps;
    for an input, the rewrite would leave that output whole and written by every step (the
    interpreters write the whole block back after each step, measured on TPU interpret mode with
    parallel axes: NaN columns and a race), so the kernel's program_id plans all wait."""
    site, moved = cs.site, {id(s) for s in moved_subscripts}
    outputs = {name for name, slot in cs.slots.items() if slot.kind == "out"}
    for use in analysis.uses:
        if use.kernel_site is not site or use.ref_name in outputs or use.provenance.origin is not Origin.PROGRAM_ID:
            continue
        found = resolve_ref_name(use.env, use.ref_name, site.kernel)
        if found is None or found.root not in outputs or id(use.subscript) in moved:
            continue
        out = found.root
        if out == ref:
            raise Refuse(
                f"`{ref}` is also indexed through its view `{use.ref_name}` (line {use.span.line}) at a window that "
                f"moves with a program id; with only this window in its BlockSpec, every step along that other axis "
                f"would write the same block of `{ref}`: index `{ref}` itself in both dims (`{ref}[pl.ds(...), pl.ds(...)]`)"
            )
        raise Refuse(
            f"the output `{out}` is written through its view `{use.ref_name}` (line {use.span.line}) at a program_id "
            f"window pallas-fix cannot move, so it would stay one whole block written by every step: index `{out}` "
            "itself (`o_ref[pl.ds(...), pl.ds(...)]`) and every operand lifts"
        )
