"""What a refusal says when pallas-fix cannot prove a window at an offset inside its program's
block stays inside it (rewrite.inblock.offset_windows): the advice differs with whether a loop
walks the window."""

from __future__ import annotations


def past_block(ref: str, offset: str, width: str, block: str, axis: int, *, walked: bool) -> str:
    """`offset` and `width` spelled as the rewrite would write the window inside the block of
    `block` rows of `pl.program_id(axis)`; `walked`: a loop index is part of the offset."""
    head = (f"cannot prove the window `pl.ds({offset}, {width})` of `{ref}` stays inside the block of `{block}` rows of "
            f"`pl.program_id({axis})`")
    if walked:
        return (f"{head} (its offset may pass `{block} - {width}`); bound the loop that walks it by `{block} // {width}`, "
                f"or state what keeps it inside in the wrapper before the pallas_call (`assert {block} >= ...`)")
    # No loop walks it (`pl.ds(i * bm, 2 * bm)`): a loop's bound would name none (red team 14).
    need = width if offset == "0" else f"{offset} + {width}"
    return (f"{head}: it fits only where `{block} >= {need}` (a window wider than the step of its start overlaps the "
            f"next program's, which no block holds); where that holds, state it in the wrapper before the pallas_call "
            f"(`assert {block} >= {need}`)")
