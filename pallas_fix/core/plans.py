"""Fix plans: what a codemod proposes for a set of findings, or why it refuses.

A planner looks at one analysed module and returns, per anchor it recognises (a dynamic index, or a
whole kernel site), either a `FixPlan` (a function from the module tree to a new tree, plus the
indices it removes) or a `Refusal` with the precondition that failed. The engine applies one plan
per round and re-analyses, so plans never see a tree another plan has already edited.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import libcst as cst

from pallas_fix.core.model import FixSafety, IndexUse, KernelSite
from pallas_fix.core.speed import Pipelined

# What an outcome is attached to: a dynamic index (`use_key`) or a whole pallas_call (`site_key`).
Anchor = tuple[int, int]


@dataclass
class FixPlan:
    codemod: str  # e.g. "lift-loop"
    safety: FixSafety
    uses: list[IndexUse]
    description: str
    rewrite: Callable[[cst.Module], cst.Module]
    site: Optional[KernelSite] = None
    # Applied with the start fixes, before any lift (engine._plan_rank): R6 when it first reads a
    # table entry's one-element slice as a scalar, which a lift would otherwise block.
    before_lifts: bool = False
    # The checks a guarded fix writes into the wrapper (rewrite.guards.shape_guards), each as the
    # condition under which it raises (`skv % block_k`): front ends name them (the LSP's title).
    guards: tuple[str, ...] = ()
    # A lift of a call already pipelined on other grid axes (core.speed): on TPU it may only trade
    # speed for memory; `--apply` decides from the example's footprint, the editor says so.
    pipelined: Optional[Pipelined] = None
    # A lift whose partial last block the interpreters cannot check (rewrite.proofs.ragged_blocks:
    # a Triton kernel that reads its position): verification compares only examples where every
    # block of the rewrite divides its array.
    divided_only: bool = False
    # A lift of one kernel variant of a call (rewrite.callsite.variant_arms.VariantEdits): its
    # edits, for joining with the other variants' lifts of the same operand where they share one.
    variant: Optional[object] = None


@dataclass
class Refusal:
    codemod: str
    reason: str
    # Anchors whose fix, once applied, removes the reason (the outer of two nested loops; an
    # output's window along another dim): the engine makes the refusal a FixAfter of that fix.
    waits_for: tuple[Anchor, ...] = ()


@dataclass
class FixAfter:
    """Fixed only once `first` has been applied: the planner refuses the finding now for a reason
    `first` removes (an output's window along another dim moves into its BlockSpec first). The
    finding is fixable, `first` is what applying its fix does now, and the fix of its own
    follows in a later round."""

    codemod: str
    first: FixPlan


Outcome = FixPlan | Refusal | FixAfter


def use_key(use: IndexUse) -> Anchor:
    return (id(use.subscript), use.dim)


def site_key(site: KernelSite) -> Anchor:
    """Kernel-level findings (PF201) are fixed per pallas_call; -1 is no index dimension."""
    return (id(site.call), -1)


Outcomes = dict[Anchor, Outcome]


@dataclass(frozen=True)
class Recipe:
    """One codemod as the engine and LibCST's runner see it: the planner and what it is called.

    `plan` reads an `analysis.result.Analysis` and returns an outcome per anchor it speaks for.
    `target` is the only target the recipe plans under (None: every target)."""

    name: str  # the codemod's name in findings and plans: "lift-loop"
    codes: frozenset[str]  # the rules whose findings it fixes
    plan: Callable[..., Outcomes]
    command: str  # the LibCST command's class name: `python -m libcst.tool codemod -x ...<command>`
    description: str
    target: Optional[str] = None

    def __call__(self, analysis) -> Outcomes:
        return self.plan(analysis)


class Refuse(Exception):
    """Raised by a codemod when a precondition fails; the message is the refusal's reason.

    Planners raise it from any depth of their checks and turn it into a `Refusal` at the top
    (`pallas_fix.rewrite.common.attempt`), so no check has to thread a result back up.
    `waits_for`: as Refusal's."""

    def __init__(self, reason: str = "", waits_for: tuple[Anchor, ...] = ()) -> None:
        super().__init__(reason)
        self.waits_for = waits_for
