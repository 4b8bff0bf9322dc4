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
from pallas_fix.core.plans import Refuse
from pallas_fix.rewrite.blocks.plan import RefBlock
from pallas_fix.rewrite.callsite.ranks import traced_def
from pallas_fix.rewrite.callsite.reading import CallSite
from pallas_fix.rewrite.guards.shape_guards import Guard, as_guard, placement, traced_names
from pallas_fix.rewrite.proofs.example_facts import evaluate, example_values
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


def runs_a_step(cs: CallSite, trip: cst.BaseExpression, blocks: list[RefBlock]) -> list:
    """[] when the axis of `trip` steps is proved to have one (`zero_step_size`); else the check
    `trip >= 1` the examples support (`step_guard`), as (guard, why) for the wrapper; else Refuse:
    an axis of 0 steps runs no kernel step, so what the original wrote with its loop skipped would
    never be written."""
    count = zero_step_size(cs, trip, blocks)
    if count is None:
        return []
    guard, evidence = step_guard(cs, trip)
    if guard is not None:
        return [(guard, f"without it a call whose loop runs no step leaves the outputs unwritten, where the original "
                        f"writes what follows its loop; the examples run it at least once ({evidence})")]
    raise Refuse(
        f"the loop's `{code(trip)}` steps may be none at a size the original handles"
        f"{f' (where `{count}` is small)' if count else ''}, and then the original still writes what follows the "
        "loop (its initial carry), while a grid axis of 0 steps runs no kernel step and leaves the outputs "
        "unwritten; make the loop cover every block, or state that it runs at least once with "
        f"`assert {code(trip)} >= 1` before the pallas_call (pallas-fix writes that check itself only where the "
        f"examples run the loop at least once: {evidence})"
    )


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


def step_guard(cs: CallSite, trip: cst.BaseExpression) -> tuple[Optional[Guard], str]:
    """The check `trip >= 1` before the pallas_call, where the examples show the loop runs at
    least once: each `# pallas-fix: example` call that fixes the trip count (from the wrapper's
    arguments, or from the operand shapes its trace recorded, core.traced_facts) gives one step
    or more. (None, why not) otherwise: no example reached it, one gives no step (the check
    would reject a call the original handles), or the check cannot be written where the call
    reads its sizes. A hypothesis, not a proof: the plan is unsafe and verified on the examples."""
    symbols = Symbols(cs.ctx)
    at = cs.anchor()
    anchor = placement(cs.ctx, cs.site)
    poly = symbols.poly(trip, at)
    counted = [(call, evaluate(symbols, poly, values)) for call, values in _example_values(cs, symbols, at)]
    counted = [(call, n) for call, n in counted if n is not None]
    if not counted:
        return None, "no example call fixes it"
    none = next((call for call, n in counted if n < 1), None)
    if none is not None:
        return None, f"the example `{none}` runs it no step"
    places = [at, *([cs.site.invocation] if at is cs.site.call and cs.site.invocation is not None else [])]
    guard = as_guard(symbols, ("at_least", poly, _ONE, code(trip), "1"), places, traced_names(cs.ctx, cs.ctx.enclosing_function(at)))
    if anchor is None or guard is None:
        return None, "no check reading it can be written before the pallas_call"
    shown = ", ".join(f"{n} in `{call}`" for call, n in counted[:3])
    return guard, shown


def _example_values(cs: CallSite, symbols: Symbols, at: cst.CSTNode) -> list[tuple[str, dict]]:
    """Per example: the values its call gives the wrapper's parameters; per traced pallas_call
    of the kernel: the dims of its operands, keyed as the call site's `x.shape[d]` reads."""
    out = example_values(cs.ctx, at)
    facts = cs.ctx.traced_facts
    nth, problem = traced_def(cs.ctx, cs.site)
    if facts is None or problem is not None:
        return out
    for seen in facts.calls_of(cs.site.kernel_name, nth)[0]:
        values: dict = {}
        for slot in cs.slots.values():
            array = seen.array(slot.kind, slot.index) if slot.kind in ("prefetch", "in") and slot.arg is not None else None
            for dim, size in enumerate(array[0] if array is not None else ()):
                read = symbols.poly(cst.parse_expression(f"{paren_text(code(slot.arg))}.shape[{dim}]"), at)
                single = read.monomial()
                if single is not None and single[1] == 1 and len(single[0]) == 1:
                    values[single[0][0]] = size
        out.append((seen.example, values))
    return out
