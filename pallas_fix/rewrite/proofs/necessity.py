"""Is a guard necessary? A check written into the wrapper (rewrite.guards.shape_guards) must reject only
calls the original does not handle: calls where its last window runs past the end of the array
(out of bounds on hardware, clamped in interpret mode). A sufficient fact can be too strong:
`residual.shape[0] == x.shape[0]` also rejects a longer `residual`, whose first rows the original
reads correctly; `nb % 2 == 0` for a loop over every other block rejects odd `nb`, where the
last block still fits.

`rejects_a_good_call` looks for such a call by trying sizes (small integers, powers of two and
their neighbours) for the atoms the guard and the bound read, keeping only those the code's own
checks accept. Finding none is evidence, not proof; finding one drops the guard.
"""

from __future__ import annotations

import random
from typing import Optional

from pallas_fix.analysis.loops.proofs import Facts
from pallas_fix.analysis.loops.symbolic import Poly, Symbols
from pallas_fix.rewrite.proofs.example_facts import evaluate

_SIZES = (1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 15, 16, 17, 24, 31, 32, 33, 48, 63, 64, 65, 96, 100, 128, 130, 256)
_TRIES = 600


def rejects_a_good_call(symbols: Symbols, facts: Facts, bound: list[Poly], guards: list) -> Optional[dict[str, int]]:
    """Values of the sizes for which every `bound` polynomial is >= 0 (the original's windows stay
    inside the array) while some guard fails; None when no such values were found. Values that
    break the code's own checks (`facts`) are not calls the original accepts and are skipped."""
    polys = [*bound, *(p for g in guards for p in (g.left_poly, g.right_poly))]
    atoms = sorted({a for p in polys for a in _base_atoms(symbols, p)})
    rng = random.Random(0)
    for _ in range(_TRIES):
        values = {a: rng.choice(_SIZES) for a in atoms}
        for key, value in facts.equal.items():
            known = evaluate(symbols, value, values)
            if known is not None:
                values[key] = known
        if not _facts_hold(symbols, facts, values):
            continue
        room = [evaluate(symbols, p, values) for p in bound]
        if any(r is None or r < 0 for r in room):
            continue
        if not all(_holds(symbols, g, values) for g in guards):
            return values
    return None


def _holds(symbols: Symbols, guard, values: dict[str, int]) -> bool:
    a, b = (evaluate(symbols, p, values) for p in (guard.left_poly, guard.right_poly))
    if a is None or b is None:
        return True  # cannot tell: not a counterexample
    if guard.kind == "divides":
        return b != 0 and a % b == 0
    return a == b if guard.kind == "equal" else a >= b


def _facts_hold(symbols: Symbols, facts: Facts, values: dict[str, int]) -> bool:
    for d, n in facts.divides:
        dv, nv = evaluate(symbols, d, values), evaluate(symbols, n, values)
        if dv is not None and nv is not None and (dv == 0 or nv % dv):
            return False
    for p in facts.nonneg:
        v = evaluate(symbols, p, values)
        if v is not None and v < 0:
            return False
    return True


def _base_atoms(symbols: Symbols, p: Poly, depth: int = 0) -> set[str]:
    """The atoms of `p` that are not quotients, looking inside quotients."""
    out: set[str] = set()
    for m, _c in p.terms:
        for key in m:
            atom = symbols.atoms.get(key)
            if atom is not None and atom.kind != "value" and atom.num is not None and atom.den is not None and depth < 8:
                out |= _base_atoms(symbols, atom.num, depth + 1) | _base_atoms(symbols, atom.den, depth + 1)
            else:
                out.add(key)
    return out
