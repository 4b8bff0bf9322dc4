"""A reduction's grid axis must have at least one step wherever the original kernel runs on
arrays of at least one block: an axis of 0 steps runs no step of the kernel at all, so what the
original wrote with its loop skipped (the initial carry, through the code after the loop) would
never be written. A loop over all the blocks of the ref it slices (`K // bk` steps of `bk`) has
a step whenever the ref holds one block; one that leaves blocks out (`fori_loop(1, nk)`,
`nk - 1`, `nk // 2` steps) may have none at a size the original handles (`nk == 1`).

May import core, analysis, rewrite.text, rewrite.callsite and the data types of rewrite.blocks.plan."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from pallas_fix.analysis.loops.proofs import Facts, Prover, read_facts, statements_before
from pallas_fix.analysis.loops.symbolic import Poly, Symbols
from pallas_fix.rewrite.blocks.plan import RefBlock
from pallas_fix.rewrite.callsite.reading import CallSite
from pallas_fix.rewrite.callsite.spelling.operands import CallSiteError
from pallas_fix.rewrite.text.syntax import code, paren_text

_ONE = Poly.const(1)


def zero_step_size(cs: CallSite, trip: cst.BaseExpression, blocks: list[RefBlock]) -> Optional[str]:
    """None when `trip` is proved at least 1 wherever a blocked ref holds one block along the
    axis (or by the wrapper's own checks); else the ref's block count for the refusal ("" when no
    ref is blocked along the axis: a loop whose table picks the blocks)."""
    symbols = Symbols(cs.ctx)
    at = cs.anchor()
    facts = Facts()
    for before in statements_before(cs.ctx, at):  # `assert nk >= 2` before the call says it too
        read_facts(symbols, before, at, facts)
    counts = []
    for block in blocks:
        try:
            full = cs.kernel_shape_dim(block.param, block.dim)
        except CallSiteError:  # an unreadable spec: the planner says why itself, later
            continue
        if full is None or "new" not in block.index.axes:
            continue
        text = f"{paren_text(code(full))} // {paren_text(code(block.size))}"
        num, den = symbols.poly(full, at), symbols.poly(block.size, at)
        counts.append(text)
        for kind in ("floor", "ceil"):  # `pl.cdiv(n, bs)` steps too, at least as many
            facts.nonneg.append(symbols.quotient(kind, num, den, text) - _ONE)
    prover = Prover(symbols, facts)
    if _at_least_one(prover, symbols.poly(trip, at)):
        return None
    return counts[0] if counts else ""


def _at_least_one(prover: Prover, p: Poly) -> bool:
    """`p >= 1`: proved from the facts, or a product of sizes (`pages.shape[1]`, a table's entries
    per row; positive, as the prover takes every atom, and a dim of 0 leaves the original nothing to
    read either) and of `pl.cdiv`s of such values (`pl.cdiv(skv, bk)`, a stepped loop's
    `pl.cdiv(nk, 2)`). A floor quotient (`nk // 2`) is not one: it is 0 where its numerator is smaller."""
    if prover.nonneg(p - _ONE):
        return True
    if len(p.terms) != 1:
        return False
    ((mono, coef),) = p.terms
    return coef >= 1 and bool(mono) and all(_positive(prover, prover.symbols.atoms.get(k)) for k in mono)


def _positive(prover: Prover, atom) -> bool:
    if atom is None:
        return False
    if atom.kind == "value":
        return True
    return atom.kind == "ceil" and atom.num is not None and _at_least_one(prover, atom.num)
