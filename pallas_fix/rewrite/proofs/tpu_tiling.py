"""Mosaic's block tiling rule, checked from the source before a rewrite gives a TPU kernel a block.

Interpret mode runs any block; compiled on a TPU, Pallas rejects a block whose last dim is
neither a multiple of 128 nor the array's, or whose second-to-last is neither a multiple of 8
(32-bit rows per tile; 16-bit dtypes pack 16, 8-bit 32) nor the array's (jax 0.12
jax/_src/pallas/mosaic/lowering.py; a squeezed dim counts as 1). Here the block sizes and
array dims come from the code: literals and module constants, and the values the file's own
`# pallas-fix: example` calls give the wrapper (rewrite.proofs.example_facts). Only a block that
is sure to break is refused, with the dtype's least row tile (8): where a size is not known from
the source, verification checks the traced blocks at the example's shapes and dtypes
(pallas_fix/verify/judge/tiling.py).
"""

from __future__ import annotations

from typing import Optional

import libcst as cst

from pallas_fix.core.model import Backend
from pallas_fix.rewrite.callsite.spelling.operands import CallSiteError
from pallas_fix.rewrite.callsite.reading import CallSite
from pallas_fix.rewrite.proofs.bounds import Bounds
from pallas_fix.rewrite.proofs.example_facts import evaluate, example_values
from pallas_fix.rewrite.text.syntax import code

LANES, SUBLANES = 128, 8


def check_new_block_dims(cs: CallSite, bounds: Bounds, param: str, rank: int,
                         new: dict[int, Optional[cst.BaseExpression]]) -> None:
    """Refuse (CallSiteError) when one of the block dims a rewrite writes for `param` is among its
    array's last two and, on some example (or from constants alone), breaks the rule. `new`:
    array dim -> the block size expression written there (None for a squeezed dim, size 1)."""
    if cs.backend() is not Backend.TPU:
        return
    for dim, size in new.items():
        tile = LANES if dim == rank - 1 else SUBLANES if dim == rank - 2 else None
        whole = cs.shape_dim(param, dim)
        if tile is None or whole is None:
            continue
        for example, s, n in _values(bounds, size, whole):
            if s is not None and n is not None and s != n and s % tile:
                raise CallSiteError(_reason(param, dim, rank, size, s, n, tile, example))


def _values(bounds: Bounds, size: Optional[cst.BaseExpression], whole: cst.BaseExpression):
    """(example, block size, array dim) per example call of the wrapper, or once from constants."""
    size_poly = bounds.poly(size) if size is not None else None
    whole_poly = bounds.poly(whole)
    s0 = size_poly.constant() if size_poly is not None else 1
    yield "", s0, whole_poly.constant()
    for example, values in example_values(bounds.cs.ctx, bounds.cs.anchor()):
        s = evaluate(bounds.symbols, size_poly, values) if size_poly is not None else 1
        yield example, s, evaluate(bounds.symbols, whole_poly, values)


def _reason(param: str, dim: int, rank: int, size: Optional[cst.BaseExpression], s: int, n: int, tile: int,
            example: str) -> str:
    which = "last" if dim == rank - 1 else "second-to-last"
    spelled = f"`{code(size)}` = {s}" if size is not None else "a squeezed dim (size 1)"
    on = f" on the example `{example}`" if example else ""
    unit = "columns" if tile == LANES else "rows (16 for 16-bit dtypes, 32 for 8-bit)"
    return (f"on TPU, Mosaic would reject the block this rewrite gives `{param}`: its {which} dim would be {spelled}{on},"
            f" neither a multiple of {tile} nor the array's {n} (interpret mode accepts such a block, the chip does not);"
            f" use a block size that is a multiple of {tile} {unit}")
