"""Iterations that read what other iterations wrote: the dependence no grid axis keeps.

A loop whose iteration `i` writes `o_ref[pl.ds(i * BS, BS)]` and reads `o_ref` somewhere else
driven by `i` (a prefix sum reading the previous block's last element, `(i - 1) * BS + BS - 1`)
runs its iterations in order through memory. Grid steps cannot: each sees only its own output
block, and Pallas copies output blocks out, never in. This is the reason such a loop is refused,
whatever else (a write before the loop, a window that is not a block) would also stop the lift,
so it is checked first and named as it is.

Windows are compared as affine functions of the index (analysis.windows): a read is outside the
written block when, for the same coefficient of the index, its offsets provably fall before or
after the block, with every symbolic factor (a block size) taken as positive.
"""

from __future__ import annotations

from typing import Optional

import libcst as cst

from pallas_fix.analysis.loops.affine import Affine, Coeff
from pallas_fix.analysis.context import walk
from pallas_fix.analysis.loops.windows import window_of
from pallas_fix.core.model import IndexUse
from pallas_fix.core.plans import Refuse
from pallas_fix.rewrite.kernel.ref_access import is_write
from pallas_fix.rewrite.text.syntax import code


def check_iterations_independent(analysis, region) -> None:
    """Refuse when an iteration reads a ref the loop writes at the index's windows, at a window
    of the index that is not provably inside the block the same iteration writes."""
    ctx = analysis.ctx
    loop = region.loop
    inside = {id(n) for fn in region.functions for n in walk(fn) if isinstance(n, cst.Subscript)}
    by_sub: dict[int, list[IndexUse]] = {}
    for use in analysis.uses:
        if use.provenance.loop is loop and id(use.subscript) in inside and use.kind == "ds":
            by_sub.setdefault(id(use.subscript), []).append(use)
    writes: dict[str, list[list[IndexUse]]] = {}
    reads: list[list[IndexUse]] = []
    for uses in by_sub.values():
        (writes.setdefault(uses[0].ref_name, []) if is_write(ctx, uses[0].subscript) else reads).append(uses)
    for read in reads:
        for write in writes.get(read[0].ref_name, []):
            where = _placement(read, write)
            if where != "inside":
                raise Refuse(_reason(ctx, loop.index_name, read, write, where))


def _reason(ctx, index: str, read: list[IndexUse], write: list[IndexUse], where: str) -> str:
    use = read[0]
    at = f"`{code(use.start)}`" if use.start is not None else "a traced start"
    wrote = f"`{code(write[0].subscript)}`, line {ctx.span(write[0].subscript).line}"
    if where == "outside":
        head = (f"iteration `{index}` reads `{use.ref_name}` at {at} (line {ctx.span(use.subscript).line}), outside the block "
                f"it writes ({wrote}): it reads what another iteration wrote")
    else:
        head = (f"iteration `{index}` reads `{use.ref_name}` at {at} (line {ctx.span(use.subscript).line}), which pallas-fix "
                f"cannot place inside the block it writes ({wrote}): it may read what another iteration wrote")
    then = ", so the iterations depend" if where == "outside" else "; then the iterations depend"
    return (f"{head}{then} on each other in order (a scan through memory), which grid steps cannot do: "
            "each sees only its own output block. Carry the value from one iteration to the next instead")


def _placement(read: list[IndexUse], write: list[IndexUse]) -> str:
    """inside | outside | unknown: where the read window lies against the written block, over
    the dims both index with the loop."""
    written = {u.dim: u for u in write}
    verdicts = []
    for r in read:
        w = written.get(r.dim)
        verdicts.append(_dim_placement(r, w) if w is not None else "unknown")
    if "outside" in verdicts:
        return "outside"
    return "inside" if verdicts and all(v == "inside" for v in verdicts) else "unknown"


def _dim_placement(read: IndexUse, write: IndexUse) -> str:
    rw, ww = window_of(read), window_of(write)
    if rw.start is None or rw.size is None or ww.start is None or ww.size is None:
        return "inside" if _same_text(read, write) else "unknown"
    if _index_terms(rw.start) != _index_terms(ww.start):
        return "inside" if _same_text(read, write) else "unknown"
    start, block_start = _linear(rw.start.const), _linear(ww.start.const)
    size, block_size = _linear([rw.size]), _linear([ww.size])
    if _nonpositive(start, size, _neg(block_start)):  # the read ends where the block starts, or before
        return "outside"
    if _nonpositive(block_start, block_size, _neg(start)):  # the read starts where the block ends, or after
        return "outside"
    if _nonpositive(block_start, _neg(start)) and _nonpositive(start, size, _neg(block_start), _neg(block_size)):
        return "inside"
    return "unknown"


def _same_text(a: IndexUse, b: IndexUse) -> bool:
    return a.start is not None and b.start is not None and code(a.start) == code(b.start) and \
        a.size is not None and b.size is not None and code(a.size) == code(b.size)


def _index_terms(start: Affine) -> dict:
    return {k: c for k, c in start.terms.items() if c.mult}


def _linear(coeffs: list[Coeff]) -> dict:
    """A sum of static terms, as factors -> multiplier."""
    out: dict = {}
    for c in coeffs:
        out[c.factors] = out.get(c.factors, 0) + c.mult
    return out


def _neg(value: dict) -> dict:
    return {k: -m for k, m in value.items()}


def _nonpositive(*parts: dict) -> bool:
    """The sum of `parts` is provably <= 0 when every factor (a size) is positive: every
    multiplier of the sum is <= 0."""
    total: dict = {}
    for part in parts:
        for k, m in part.items():
            total[k] = total.get(k, 0) + m
    return all(m <= 0 for m in total.values())


def accumulates_in_place(analysis, loop) -> bool:
    """The loop body updates a kernel ref in place at a place every iteration shares
    (`o_ref[...] += v`, `o_ref[...] = o_ref[...] + v`): each iteration reads what the one
    before wrote, a reduction even without a carry. A scratch ref written whole and then read
    back within an iteration is not one."""
    site = next((u.kernel_site for u in analysis.uses if u.provenance.loop is loop and u.kernel_site is not None), None)
    if site is None or site.kernel is None:
        return False
    refs = {p.name.value for p in site.kernel.params.params}
    driven = {id(u.subscript) for u in analysis.uses if u.provenance.loop is loop}

    def shared_ref_target(node) -> Optional[str]:
        if isinstance(node, cst.Subscript) and id(node) not in driven:
            base = node.value.value if isinstance(node.value, cst.Name) else None
            return base if base in refs else None
        return None

    for node in walk(loop.body):
        if isinstance(node, cst.AugAssign) and shared_ref_target(node.target):
            return True
        if isinstance(node, cst.Assign) and len(node.targets) == 1:
            ref = shared_ref_target(node.targets[0].target)
            if ref and any(isinstance(n, cst.Subscript) and isinstance(n.value, cst.Name) and n.value.value == ref
                           for n in walk(node.value)):
                return True
    return False
