"""Blocks of a rewrite that end in a partial block on an example, where the interpreters cannot
judge a lift that keeps the original's position reads (rewrite.proofs.ragged_blocks).

Such a lift (a Triton kernel whose plain `x_ref[pl.ds(pid * BLOCK, BLOCK)]` windows become
BlockSpecs while it keeps reading `pid * BLOCK + iota`) is exact on hardware wherever the original
is defined, but in interpret mode the original's last window is clamped back inside the array, so
its rows are not the rows its position names, while the rewrite's last block is partial: at a size
the block does not divide the two differ by construction, and comparing them says nothing about
the rewrite. Any partial block counts, one the user's own BlockSpec already had too: such an
example is left uncompared rather than judged. Works on the worker's survey of the traced
pallas_calls (no jax here).
"""

from __future__ import annotations


def partial_blocks(infos: list[dict]) -> list[str]:
    """Each block of the rewrite's pallas_calls that does not divide its array along some dim,
    as `block (16, 128) of a (70, 128) array in `kernel``; [] when every block tiles its array."""
    out = []
    for info in infos or ():
        for rec in info.get("blocks") or ():
            block, array = rec.get("block") or [], rec.get("array") or []
            if any(isinstance(b, int) and isinstance(a, int) and b not in (0, a) and a % b for b, a in zip(block, array)):
                where = f" in `{info['kernel']}`" if info.get("kernel") else ""
                out.append(f"block {tuple(block)} of a {tuple(array)} array{where}")
    return out


def uncompared_message(example: str, partial: list[str]) -> str:
    """Why an example with a partial block is not compared under such a lift."""
    return (f"not compared on {example}: the rewrite's last blocks are partial there ({'; '.join(partial)}), and the lift keeps the "
            "kernel's position reads, which the interpreters cannot judge at such a size (the original's last window is "
            "clamped back inside the array in interpret mode, not on hardware); the lift is checked only at sizes its "
            "blocks divide")
