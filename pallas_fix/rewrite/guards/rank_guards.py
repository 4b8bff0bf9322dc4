"""Checks in the wrapper for the ranks a plan took from the examples' trace (core.traced_facts).

A rank no line of the source states (the array comes through a factory's inner function) but
every example showed is a hypothesis: the BlockSpec written with it has that many dims. Where the
operand is a plain name of the function that runs the pallas_call, the fact is stated there, in
the file's style, before the statement that runs the call (rewrite.guards.shape_guards.placement):
`if x.ndim != 1: raise ValueError(f"x.ndim ({x.ndim}) must equal 1")`. A call of another rank
then fails with that message instead of inside Pallas. Outputs get no check: their rank is
their out_shape's, which a check on the inputs it is built from covers or verification does.
"""

from __future__ import annotations

from dataclasses import dataclass

from pallas_fix.rewrite.text.syntax import code, is_plain_name


@dataclass(frozen=True)
class RankCheck:
    name: str  # the operand, as the wrapper names it
    rank: int

    def failing(self) -> str:
        """The condition under which the check raises."""
        return f"{self.name}.ndim != {self.rank}"

    def statement(self, use_assert: bool) -> str:
        message = f'f"{self.name}.ndim ({{{self.name}.ndim}}) must equal {self.rank}"'
        if use_assert:
            return f"assert {self.name}.ndim == {self.rank}, {message}\n"
        return f"if {self.failing()}:\n    raise ValueError({message})\n"


def rank_checks(cs) -> list[RankCheck]:
    """One check per input whose rank the plan took from the trace (`cs.hypotheses`) and which
    the call site passes as a plain name naming the array the kernel gets."""
    out = []
    for param, (rank, _shown) in cs.hypotheses.items():
        slot = cs.slots.get(param)
        if slot is None or slot.kind not in ("in", "prefetch") or not is_plain_name(slot.arg):
            continue
        name = code(slot.arg)  # `x`, or an attribute of one (`state.grad`)
        if cs.arg_at_call(slot.arg) and all(c.name != name for c in out):
            out.append(RankCheck(name, rank))
    return out
