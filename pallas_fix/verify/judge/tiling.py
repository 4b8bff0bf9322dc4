"""Mosaic's block tiling rule, checked on the blocks a rewrite gives a TPU kernel.

Interpret mode runs any block; compiled on a TPU, jax 0.12's Pallas lowering
(``jax/_src/pallas/mosaic/lowering.py``, the "divisible by 8 and 128" ValueError) accepts a block
of rank >= 2 only when its last dim is a multiple of 128 lanes or the whole array's, and its
second-to-last a multiple of the sublane tile or the whole array's (a squeezed dim counts as 1).
The sublane tile is 8 rows of 32-bit values; narrower dtypes pack more rows into one tile
(16 for 16-bit, 32 for 8-bit: the rows a measured TPU v5e wanted, ../shared/docs/pallas-notes.md).
A rank-1 block must be the whole array, a multiple of 1024 elements (8 x 128), or a power of two
of at least 128 x packing. SMEM blocks with a trivial window, and ANY / HBM / semaphore operands
(no window), are not checked, as the lowering does not check them.

The input is what :mod:`pallas_fix.verify.worker.block_layouts` ``block_records`` reads off a
traced call. Pure Python; no jax.
"""

from __future__ import annotations

from typing import Optional

LANES = 128
SUBLANES = 8
_UNCHECKED = {"any", "hbm", "semaphore_mem", "semaphore", "error"}


def row_tile(bits: Optional[int]) -> int:
    """Rows of a sublane tile for a dtype of `bits` bits: 8 for 32-bit, 16 for 16-bit, 32 for 8-bit."""
    if not bits or bits >= 32:
        return SUBLANES
    return SUBLANES * (32 // bits)


def dtype_words(bits: Optional[int]) -> str:
    return {16: "16-bit", 8: "8-bit", 4: "4-bit"}.get(bits or 32, "32-bit")


def bad_dims(block: dict) -> dict[str, str]:
    """The dims of this block Mosaic rejects ("rows", "lanes", or "block" for rank 1), each with
    why, in words; empty when it compiles."""
    space = (block.get("space") or "default").lower()
    if space in _UNCHECKED or (space == "smem" and block.get("trivial")):
        return {}
    sizes, array = list(block["block"]), list(block["array"])
    if len(sizes) == 1:
        why = _rank_one(sizes[0], array[0], block.get("bits"))
        return {"block": why} if why else {}
    out = {}
    rows, lanes = sizes[-2], sizes[-1]
    tile = row_tile(block.get("bits"))
    if rows != array[-2] and rows % tile:
        out["rows"] = (f"its second-to-last dim, {rows}, is neither a multiple of {tile}"
                       f" ({dtype_words(block.get('bits'))} rows per tile) nor the array's {array[-2]}")
    if lanes != array[-1] and lanes % LANES:
        out["lanes"] = f"its last dim, {lanes}, is neither a multiple of {LANES} nor the array's {array[-1]}"
    return out


def violation(block: dict) -> Optional[str]:
    """Why Mosaic rejects this block, in words (which dim, what it needs), or None when it does not."""
    return "; ".join(bad_dims(block).values()) or None


def _rank_one(size: int, whole: Optional[int], bits: Optional[int]) -> Optional[str]:
    packing = 32 // bits if bits and bits < 32 else 1
    if size == whole or size % (SUBLANES * LANES) == 0 or (size >= LANES * packing and size & (size - 1) == 0):
        return None
    return (f"a rank-1 block must be the whole array ({whole}), a multiple of {SUBLANES * LANES}, or a power of two"
            f" of at least {LANES * packing}; it is {size}")


def fix_hint(block: dict, dims) -> str:
    """What to change, for the dims at fault."""
    if "block" in dims:
        return f"use a block size that is a multiple of {SUBLANES * LANES}"
    hints = [f"a multiple of {row_tile(block.get('bits'))} rows"] if "rows" in dims else []
    hints += [f"a multiple of {LANES} columns"] if "lanes" in dims else []
    return "use blocks of " + " and ".join(hints) + " (or the whole dim)"


def _describe(block: dict) -> str:
    origin = f"operand `{block['origin']}`" if block.get("origin") else "an operand"
    shape = ", ".join(str(d) for d in block["block"])
    array = ", ".join(str(d) for d in block["array"])
    return f"{origin} blocks of ({shape}) of a ({array}) {dtype_words(block.get('bits'))} array"


def _original_of(block: dict, before: list[dict]) -> Optional[dict]:
    """The original's block of the same operand: the same origin and array, else the same array."""
    same = [b for b in before if tuple(b["array"]) == tuple(block["array"]) and b.get("bits") == block.get("bits")]
    return next((b for b in same if b.get("origin") == block.get("origin")), same[0] if same else None)


def created_violations(before: Optional[list[dict]], after: Optional[list[dict]]) -> list[str]:
    """The block dims Mosaic rejects in the rewrite's TPU calls that the same operand's block in
    the original did not already have wrong (that one is the user's: the original would not
    compile either), each in words: which operand, which block, why and what to change."""
    originals = [b for c in before or () for b in c.get("blocks") or ()]
    out = []
    for call in after or ():
        if call.get("backend") != "tpu":
            continue
        kernel = f"kernel `{call['kernel']}`" if call.get("kernel") else "the kernel"
        for b in call.get("blocks") or ():
            old = _original_of(b, originals)
            bad = {d: why for d, why in bad_dims(b).items() if d not in (bad_dims(old) if old is not None else {})}
            if bad:
                out.append(f"the rewrite gives {kernel} {_describe(b)}, which Mosaic rejects on TPU:"
                           f" {'; '.join(bad.values())}; {fix_hint(b, bad)}")
    return out
