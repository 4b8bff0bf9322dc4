"""Fix plans: what a codemod proposes for a set of findings, or why it refuses.

A planner looks at one analysed module and returns, per dynamic index it recognises, either a
`FixPlan` (a function from the module tree to a new tree, plus the indices it removes) or a
`Refusal` with the precondition that failed. The engine applies one plan per kernel per round and
re-analyses, so plans never see a tree another plan has already edited.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Optional, Protocol

import libcst as cst

from .model import FixSafety, IndexUse, KernelSite

if TYPE_CHECKING:
    from .engine import Analysis


@dataclass
class FixPlan:
    codemod: str  # e.g. "lift-loop"
    safety: FixSafety
    uses: list[IndexUse]
    description: str
    rewrite: Callable[[cst.Module], cst.Module]
    site: Optional[KernelSite] = None
    # Extra statements the plan needs imported: (module, name or None)
    imports: list[tuple[str, Optional[str]]] = field(default_factory=list)


@dataclass
class Refusal:
    codemod: str
    reason: str


Outcome = FixPlan | Refusal


class Planner(Protocol):
    name: str
    codes: frozenset[str]

    def __call__(self, analysis: "Analysis") -> dict[tuple[int, int], Outcome]: ...


def use_key(use: IndexUse) -> tuple[int, int]:
    return (id(use.subscript), use.dim)


_PLANNERS: list[Planner] = []


def register(planner: Planner) -> Planner:
    _PLANNERS.append(planner)
    return planner


def planners() -> list[Planner]:
    # Importing the codemods package registers every planner it defines.
    from . import codemods  # noqa: F401

    return list(_PLANNERS)
