"""The blocks the existing BlockSpecs of a pallas_call move, as the bounds proof reads them: an
index_map entry as multiples of the grid indices (`index_map_entry`), and which of those blocks
operands read in lockstep vouch for (`spec_lockstep`, keyed as `lockstep_key` keys a block)."""

from __future__ import annotations

from typing import Callable, Optional

import libcst as cst

from pallas_fix.analysis.loops.symbolic import Symbols
from pallas_fix.rewrite.blocks.plan import BlockIndexExpr, RefBlock
from pallas_fix.rewrite.callsite.reading import CallSite
from pallas_fix.rewrite.callsite.spelling.operands import CallSiteError
from pallas_fix.rewrite.text.syntax import code


def lockstep_key(block: RefBlock) -> tuple:
    """Blocks read at the same window in every step (along whichever dim of their refs)."""
    return code(block.size), block.index.key(), tuple(sorted(block.squeezed.items()))


def index_map_entry(symbols: Symbols, lam: cst.Lambda, index: cst.BaseExpression, ngrid: int) -> Optional[BlockIndexExpr]:
    """An index_map entry as integer multiples of the grid indices (the lambda's first `ngrid`
    parameters) plus a constant; None for anything else."""
    p = symbols.poly(index, index)
    params = {f"{q.name.value}@{id(lam)}": n for n, q in enumerate(lam.params.params[:ngrid])}
    axes: dict[object, int] = {}
    for m, c in p.terms:
        if m and (len(m) != 1 or m[0] not in params):
            return None
        if m:
            axes[params[m[0]]] = c
    return BlockIndexExpr(axes, p.as_dict().get((), 0))


def spec_lockstep(cs: CallSite, symbols: Symbols, skip: set[str], ragged: dict,
                  fits: Callable[..., bool], cdiv_axis: Callable[..., object]) -> set[tuple]:
    """Lockstep keys of the existing BlockSpec dims (of operands not in `skip`) whose blocks `fits`
    proves inside their arrays; those inside but for a partial last block along a `pl.cdiv` axis
    (`cdiv_axis`) go into `ragged` (key -> (block, the array's extent)). `fits` and `cdiv_axis`
    are the bounds proof's (rewrite.proofs.bounds.Bounds)."""
    keys = set()
    for slot in cs.slots.values():
        if slot.kind not in ("in", "out") or slot.param in skip:
            continue
        try:
            spec = cs.spec_of(slot)
        except CallSiteError:
            continue
        if spec.dims is None or spec.index_exprs is None or not isinstance(spec.index_map, cst.Lambda):
            continue
        for e, dim in enumerate(spec.dims):
            index = index_map_entry(symbols, spec.index_map, spec.index_exprs[e], len(cs.grid))
            full = cs.shape_dim(slot.param, e)
            if dim.kind != "size" or index is None or full is None:
                continue
            if fits(index, dim.size, full, None):
                keys.add((code(dim.size), index.key(), ()))
            elif cdiv_axis(block := RefBlock(slot.param, e, dim.size, index), full) is not None:
                ragged.setdefault(lockstep_key(block), (block, full))
    return keys
