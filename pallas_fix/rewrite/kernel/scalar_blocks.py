"""Scalar indices (`x_ref[r, :]`, `h_ref[idx, 0]`) driven by a loop index or `pl.program_id`
that stay scalar indices: why, in words that say what the user can change.

A scalar index is a window of one element (analysis.loops.windows.scalar_window); its block form is a
squeezed (`None`) block dim whose index_map returns the index itself, which rewrite.kernel.scalar_lift
builds when every access of the ref is that scalar and the backend accepts the squeezed dim.
When something blocks it (TPU lowering rejects a squeezed dim among a block's last two dims
unless the array's dim is 1, `jax/_src/pallas/mosaic/lowering.py`; the ref is also read another
way), a planner that would have to move the scalar with the loop refuses with this reason, and
one that leaves the ref whole (an input read at the scalar index) keeps the index as it is.
"""

from __future__ import annotations

from typing import Optional

from pallas_fix.analysis.loops.windows import window_of
from pallas_fix.core.model import Backend, IndexUse, Origin
from pallas_fix.core.plans import Refusal, Refuse, use_key
from pallas_fix.rewrite.text.syntax import paren_text


def scalar_lift_refusal(use: IndexUse, blocker: Optional[str] = None) -> Refuse:
    """`blocker`: why rewrite.kernel.scalar_lift could not squeeze the dim (None: no planner tried)."""
    ctx = use.env.ctx  # type: ignore[attr-defined]
    start = ctx.code(use.start)
    window = window_of(use)
    rows = f"move a block of several rows per step (`pl.ds({paren_text(start)} * bs, bs)`, bs a multiple of 8 on TPU)"
    head = f"`{use.ref_name}` is indexed by the scalar `{start}` at dim {use.dim}, which cannot become a squeezed (None) block dim"
    if blocker is not None:
        return Refuse(f"{head} here: {blocker}; {rows}")
    why = f" ({window.reason})" if window.block is None and window.reason else ""
    return Refuse(
        f"{head}{why}: write that BlockSpec by hand if the backend allows it (`None` at dim {use.dim}, the "
        f"index_map returning `{start}`{_tpu_note(use)}), or {rows}"
    )


def _tpu_note(use: IndexUse) -> str:
    """What TPU lowering adds (measured with jax 0.12, `jax.export` for TPU on CPU): it rejects a
    squeezed dim among a block's last two dims (`(None, 256)` and `(64, None)` of a (64, 256)
    array) and accepts squeezed leading dims (`(None, 16, 128)` of a (4, 16, 128) array)."""
    site = use.kernel_site
    if site is not None and site.backend not in (Backend.TPU, Backend.UNKNOWN):
        return ""
    return "; on TPU only for a leading dim: TPU lowering rejects a squeezed dim among a block's last two dims"


def windows_to_lift(uses: list[IndexUse], moved: bool, kept: list, blocker: Optional[str] = None) -> list[IndexUse]:
    """Of one subscript's `uses` driven by a loop, those a loop planner lifts into blocks: the
    windows. A scalar index stays as it is, on a ref left whole, with the loop index it reads
    becoming `pl.program_id` like every other read of it (collected in `kept`): right for a read,
    and for a write into an output that stays resident across a sequential axis. A scalar index
    the planner would have to move with the loop (`moved`: a write of a loop whose iterations
    become parallel steps) is refused, with `blocker`, why it was not squeezed."""
    scalars = [u for u in uses if u.kind == "scalar"]
    if scalars and moved:
        raise scalar_lift_refusal(scalars[0], blocker)
    kept.extend((u, blocker) for u in scalars)
    return [u for u in uses if u.kind != "scalar"]


def check_kept_scalars(lifted_refs: set[str], kept: list[tuple[IndexUse, Optional[str]]]) -> None:
    """The scalar indices a loop planner keeps must leave their refs whole: a ref also read
    through a lifted window (`x_ref[pl.ds(i * bs, bs), :]` and `x_ref[i, :]`) would need both
    a block and the whole array. A loop that moves no window at all but indexes refs by scalars
    of its index that rewrite.kernel.scalar_lift could not squeeze (`acc + x_ref[k, :]` on a 2-D TPU
    ref): those scalars are what a lift would have to block."""
    for use, _blocker in kept:
        if use.ref_name in lifted_refs:
            ctx = use.env.ctx  # type: ignore[attr-defined]
            raise Refuse(
                f"`{use.ref_name}` is accessed both through a window of the loop index and at the scalar "
                f"`{ctx.code(use.start)}` (line {use.span.line}); one block cannot serve both: take the row from "
                "the window instead, or keep the loop"
            )
    if kept and not lifted_refs:
        raise scalar_lift_refusal(*kept[0])


def program_id_scalar_refusals(codemod: str, analysis) -> dict:
    """The refusal of every scalar index driven by `pl.program_id` alone, anchored on it."""
    return {
        use_key(use): Refusal(codemod, str(scalar_lift_refusal(use)))
        for use in analysis.uses
        if use.kind == "scalar" and use.provenance.origin is Origin.PROGRAM_ID
    }
