"""Facts from the examples: what tracing the original on each example call shows about its
pallas_calls that the source does not say (an operand's rank when the array comes through a
factory or an inner function).

The verification worker traces the original on each of the file's examples (nothing runs) and
records, per pallas_call, the shape and dtype of every operand and result
(:mod:`pallas_fix.verify.facts`). A fact seen on examples is a hypothesis, never a proof: a plan
that rests on one is an unsafe fix (written by plain `--apply` only once verified on an example),
and a fact some example contradicts is no fact at all. Imports nothing but the standard library.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

# Refusals that a fact from the examples may lift: `--apply` traces the examples only for a file
# that has one. A reduction's trip count the wrapper computes from the operands' shapes (through
# a padding helper) is one: the traced shapes say whether every example runs the loop.
WANTS_FACTS = ("cannot tell the rank of", "steps may be none at a size the original handles")


@dataclass(frozen=True)
class Seen:
    """One traced pallas_call of one example: its kernel, as the kernel jaxpr names it ("kernel at
    file:line" reduced to the name), and its operands' and results' (shape, dtype)."""

    example: str  # the example call's text, with where it came from
    kernel: str
    num_prefetch: int
    operands: tuple[tuple[tuple[int, ...], str], ...]  # scalar-prefetch operands first, as passed
    results: tuple[tuple[tuple[int, ...], str], ...]
    # which def of the kernel's name in the module it ran, in source order (0 the first), where
    # the trace says: it tells apart two defs of one name (`if transpose: def kernel ... else:
    # def kernel ...`, each arm's pallas_call running its own)
    nth: Optional[int] = None

    def array(self, kind: str, index: int) -> Optional[tuple[tuple[int, ...], str]]:
        """(shape, dtype) of operand `index` among its `kind` ("prefetch" | "in" | "out")."""
        arrays, at = (self.results, index) if kind == "out" else (
            self.operands, index if kind == "prefetch" else self.num_prefetch + index)
        return arrays[at] if 0 <= at < len(arrays) else None


@dataclass(frozen=True)
class TracedFacts:
    seen: tuple[Seen, ...] = ()
    # Examples whose trace failed or reached no pallas_call: they contradict nothing, but the
    # facts say on how many examples they rest.
    untraced: tuple[str, ...] = field(default=())

    def calls_of(self, kernel: Optional[str], nth: Optional[int] = None) -> tuple[list[Seen], str]:
        """The traced calls of `kernel` (of its nth def of that name, with `nth`), and why there
        are none when there are none."""
        calls = [s for s in self.seen if s.kernel == kernel]
        if nth is not None:
            if any(s.nth is None for s in calls):
                return [], "the trace does not say which of its defs ran"
            calls = [s for s in calls if s.nth == nth]
        return calls, "" if calls else "no example reaches the kernel"

    def rank(self, kernel: Optional[str], kind: str, index: int, counts: tuple[int, int, int],
             nth: Optional[int] = None) -> tuple[Optional[int], str]:
        """(the rank every traced call of `kernel` gives that operand, which examples showed it),
        or (None, why not): no example reached the kernel, a traced call has other numbers of
        (prefetch, input, output) operands than `counts` (another form of the call), or two
        examples disagree (the one that breaks the fact is named; a fact false on any example
        is not used). With `nth`, only the calls that ran the nth def of that name count."""
        calls, why = self.calls_of(kernel, nth)
        if not calls:
            return None, why
        ranks: dict[int, list[str]] = {}
        for s in calls:
            if (s.num_prefetch, len(s.operands) - s.num_prefetch, len(s.results)) != counts:
                return None, f"the call traced on `{s.example}` has other operands than the one written"
            array = s.array(kind, index)
            if array is None:
                return None, f"the call on `{s.example}` has no such operand"
            ranks.setdefault(len(array[0]), []).append(s.example)
        if len(ranks) > 1:
            told = "; ".join(f"rank {r} on `{exs[0]}`" for r, exs in sorted(ranks.items()))
            return None, f"the examples disagree ({told})"
        (rank, examples), = ranks.items()
        return rank, ", ".join(f"`{e}`" for e in dict.fromkeys(examples))
