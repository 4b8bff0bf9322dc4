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
from pallas_fix.rewrite.ref_views import resolve_ref_name


def check_output_views(analysis, cs, ref: str, moved_subscripts: list) -> None:
    slot = cs.slots.get(ref)
    if slot is None or slot.kind != "out":
        return
    site, moved = cs.site, {id(s) for s in moved_subscripts}
    for use in analysis.uses:
        if use.kernel_site is not site or use.ref_name == ref or use.provenance.origin is not Origin.PROGRAM_ID:
            continue
        found = resolve_ref_name(use.env, use.ref_name, site.kernel)
        if found is not None and found.root == ref and id(use.subscript) not in moved:
            raise Refuse(
                f"`{ref}` is also indexed through its view `{use.ref_name}` (line {use.span.line}) at a window that "
                f"moves with a program id; with only this window in its BlockSpec, every step along that other axis "
                f"would write the same block of `{ref}`: index `{ref}` itself in both dims (`{ref}[pl.ds(...), pl.ds(...)]`)"
            )
