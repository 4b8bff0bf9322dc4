"""Which kernels run in GPU interpret mode, and the rewrites that would stop them running there.

GPU interpret mode (`interpret=plgpu.InterpretGPUParams()`) runs whole-array kernels with
in-kernel loops, but not the grids, BlockSpecs and scalar prefetch the lifts write
(`gpu_hazards.HAZARDS`). A rewrite must never stop a kernel running in an interpreter where it
ran. A kernel runs in GPU interpret mode when:

- stated: `--target gpu-interpret`, or the module names `InterpretGPUParams` or a GPU interpret mode
  switch (`gpu_hazards.trigger`). Every plan of the module is screened, and the PF2xx rules warn.
- presumed: a Mosaic GPU kernel is, until shown otherwise, one its author runs in GPU interpret
  mode on a machine without a GPU: the interpreter is often passed in by a caller or a test this
  module does not show (`def f(x, interpret=False)`). Shown otherwise by `--target compiled`, or by
  a PF2xx hazard the kernel already has (it does not run there as it is). Only the plans of
  presumed kernels are screened, and the PF2xx rules stay quiet: a compiled Mosaic GPU kernel with
  BlockSpecs is right.

Screening rewrites each plan and refuses it when the result has more PF2xx hazards than the
original; the refusal says what `--target compiled` would do. Verification runs GPU interpret mode
in both cases (`verifies_in_gpu_interpret`). The engine calls `screen` once per analysis.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from pallas_fix.analysis.result import Analysis, analyze
from pallas_fix.core.config import Config
from pallas_fix.core.model import Backend, KernelSite
from pallas_fix.core.names import GPU_INTERPRET_WORDS
from pallas_fix.core.plans import Anchor, FixAfter, FixPlan, Outcome, Refusal
from pallas_fix.rules.gpu_interpret.hazards import HAZARDS, TARGET, trigger
from pallas_fix.rules.gpu_interpret.kernel_rules import kernel_hazards
from pallas_fix.rules.gpu_interpret.kernel_scope import Issue

__all__ = ["GpuInterpretUse", "gpu_interpret_use", "screen", "verifies_in_gpu_interpret", "needs_whole_module"]

COMPILED = "compiled"  # the target that says kernels are compiled, whatever the module does


@dataclass(frozen=True)
class GpuInterpretUse:
    """Where a module's kernels run in GPU interpret mode. `stated`: the target or the module says
    so for every kernel (`why` says which). Otherwise `presumed` holds the Mosaic GPU kernels
    (by `id` of their pallas_call) presumed to run there, each with its reason."""

    stated: Optional[str] = None
    presumed: dict[int, str] = field(default_factory=dict)

    def why(self, site: Optional[KernelSite]) -> Optional[str]:
        """Why `site`'s kernel runs in GPU interpret mode, or None when it may not."""
        if self.stated is not None:
            return self.stated
        return self.presumed.get(id(site.call)) if site is not None else None


def gpu_interpret_use(analysis: Analysis, hazards: Optional[list[Issue]] = None) -> Optional[GpuInterpretUse]:
    """Which of the module's kernels run in GPU interpret mode; None when none does. `hazards`:
    the module's `kernel_hazards`, when the caller has them."""
    stated = trigger(analysis)
    if stated is not None:
        return GpuInterpretUse(stated=stated)
    mosaic = _mosaic_gpu_sites(analysis)
    if not mosaic:
        return None
    hazards = kernel_hazards(analysis) if hazards is None else hazards
    unfit = {id(i.site.call) for i in hazards if i.site is not None}
    presumed = {id(s.call): _presumption(s) for s in mosaic if id(s.call) not in unfit}
    return GpuInterpretUse(presumed=presumed) if presumed else None


def verifies_in_gpu_interpret(analysis: Analysis) -> bool:
    """Verification of this module's rewrites runs GPU interpret mode too."""
    return gpu_interpret_use(analysis) is not None


def needs_whole_module(text: str, config: Config) -> bool:
    """Whether screening `text` needs every kernel of it analysed (the language server then cannot
    re-analyse only the kernels an edit touched): the hazards of one kernel decide another's."""
    if config.target == TARGET or any(w in text for w in GPU_INTERPRET_WORDS):
        return True
    return config.target != COMPILED and (config.backend is Backend.MOSAIC_GPU or "mosaic_gpu" in text)


def _mosaic_gpu_sites(analysis: Analysis) -> list[KernelSite]:
    if analysis.config.target == COMPILED:
        return []
    return [s for s in analysis.sites if s.backend is Backend.MOSAIC_GPU]


def _presumption(site: KernelSite) -> str:
    name = f"`{site.kernel_name}`" if site.kernel_name else "the kernel"
    reason = f", {site.backend_reason}" if site.backend_reason else ""
    return f"{name} is a Mosaic GPU kernel{reason}, and runs in GPU interpret mode as it is"


# -- screening plans --------------------------------------------------------------------------------
def screen(analysis: Analysis, outcomes: dict[Anchor, list[Outcome]]) -> dict[Anchor, list[Outcome]]:
    """`outcomes` with every plan that would stop a kernel running in GPU interpret mode, where it
    runs, replaced by a refusal that says why."""
    plans = {id(p): p for items in outcomes.values() for o in items for p in [_plan_of(o)] if p is not None}
    if not plans or (trigger(analysis) is None and not _mosaic_gpu_sites(analysis)):
        return outcomes
    hazards = kernel_hazards(analysis)
    use = gpu_interpret_use(analysis, hazards)
    if use is None:
        return outcomes
    before = _counts(hazards)
    verdicts = {key: _screen(analysis, plan, before, use) for key, plan in plans.items()}
    return {key: [_judged(o, verdicts) for o in items] for key, items in outcomes.items()}


def _plan_of(outcome: Outcome) -> Optional[FixPlan]:
    """The plan an outcome applies now: its own, or the one a fix that waits applies first."""
    plan = outcome.first if isinstance(outcome, FixAfter) else outcome
    return plan if isinstance(plan, FixPlan) else None


def _judged(outcome: Outcome, verdicts: dict[int, Outcome]) -> Outcome:
    """A plan's verdict; a fix that waits for a refused plan is refused with it."""
    plan = _plan_of(outcome)
    if plan is None:
        return outcome
    verdict = verdicts[id(plan)]
    return outcome if verdict is plan else verdict


def _screen(analysis: Analysis, plan: FixPlan, before: dict[str, int], use: GpuInterpretUse) -> Outcome:
    why = use.why(_site(plan))
    if why is None:
        return plan
    try:
        after_source = plan.rewrite(analysis.ctx.module).code  # type: ignore[union-attr]
        after = _counts(kernel_hazards(analyze(after_source, analysis.path, analysis.config)))
    except Exception:  # the engine reports a failing rewrite when it applies it
        return plan
    added = sorted(code for code, n in after.items() if n > before.get(code, 0))
    if not added:
        return plan
    what = "; ".join(f"{HAZARDS[c].what} ({c})" for c in added)
    return Refusal(plan.codemod, f"{plan.codemod} would add {what}, which GPU interpret mode cannot run ({why}){_anyway(plan, analysis, use)}")


def _anyway(plan: FixPlan, analysis: Analysis, use: GpuInterpretUse) -> str:
    """What the user can say to get the rewrite where the kernel is compiled."""
    if analysis.config.target == TARGET:
        return ""
    if use.stated is not None:
        return "; for kernels you compile, --target compiled lifts it anyway"
    return f"; {plan.codemod} is for compiled Mosaic GPU: --target compiled applies it"


def _site(plan: FixPlan) -> Optional[KernelSite]:
    return plan.site or next((u.kernel_site for u in plan.uses if u.kernel_site is not None), None)


def _counts(hazards: list[Issue]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for issue in hazards:
        counts[issue.code] = counts.get(issue.code, 0) + 1
    return counts
