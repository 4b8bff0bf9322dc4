"""Lifting a call's kernel variants, each against its own arm of the `if` that picks it.

`kernel_fn = _quantized_kernel` / `in_specs = [...]` in one arm, `kernel_fn = _full_kernel` /
`in_specs = [...]` in the other, then one `pl.pallas_call(functools.partial(kernel_fn, ...),
in_specs=in_specs, ...)`: each variant is planned with the arm's values pinned (every name bound
once per arm reads as its arm's value: analysis.discovery.variants.ArmPin). Its edits in its own
def and its own arm run only when it does. An edit anywhere else (the pallas_call's keywords, a
spec list both arms use, the partial's keywords) changes what every variant runs, so it is made
only together with the same lift of the same operand in every other variant, and only where each
of them writes exactly the same text there (`join`); otherwise the lift is refused, naming what
differs. A call's variants lift together or not at all: one that can lift none of its windows
refuses every other's lift, naming it and why.

May import core, analysis and rewrite.text."""

from __future__ import annotations

import difflib
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, Optional

import libcst as cst

from pallas_fix.analysis.discovery.kernel_entry import entry_problem
from pallas_fix.analysis.discovery.variants import ArmPin, variant_arm
from pallas_fix.core.model import FixSafety, KernelSite
from pallas_fix.core.plans import FixPlan, Refusal, Refuse, use_key
from pallas_fix.rewrite.callsite.reading import CallSite, CallSiteError
from pallas_fix.rewrite.text import imports
from pallas_fix.rewrite.text.edits import apply_edits


@dataclass(frozen=True)
class VariantEdits:
    """What one variant's lift edits (core.plans.FixPlan.variant)."""

    site: KernelSite
    edits: dict
    needed: object  # the import its rewrite adds
    shared: tuple  # the edited nodes outside the variant's def and arm, which every variant runs
    slot: tuple  # ("in" / "out", operand index, dim): the same operand in another variant


class _Arm:
    """The check a variant's plan passes before it is written (`arm(edits, ...)`), and `keep`,
    which hands the plan its edits."""

    def __init__(self, ctx, site: Optional[KernelSite], pin: Optional[ArmPin]) -> None:
        self.ctx, self.site, self.pin = ctx, site, pin
        self.record: Optional[VariantEdits] = None

    def __call__(self, edits: dict, needed, slot, dim: int) -> None:
        if self.pin is None or self.site is None:
            return
        mine = (self.site.kernel, self.pin.block)
        shared = tuple(n for n in edits if not any(n is m or any(a is m for a in self.ctx.ancestors(n)) for m in mine))
        self.record = VariantEdits(self.site, dict(edits), needed, shared, (slot.kind, slot.index, dim))

    def keep(self, plan):
        if self.record is not None and isinstance(plan, FixPlan):
            plan.variant = self.record
            # named as its def (and line), not as the name that picks it
            plan.description = plan.description.replace(f"in `{self.site.kernel_name}`", f"in {_which(self.ctx, self.site)}", 1)
        return plan


@contextmanager
def arm_planning(analysis, site: Optional[KernelSite]) -> Iterator[_Arm]:
    """Plan `site` (one variant of its call, or an ordinary call), yielding the `_Arm` its plan
    passes through; for a variant, with its arm's values pinned on the context."""
    if site is None or len(site.variants) < 2:
        yield _Arm(analysis.ctx, None, None)
        return
    ctx = analysis.ctx
    pin = variant_arm(ctx, site)
    if pin is None:  # the variants are not picked by plain bindings of one `if` before the call
        raise Refuse(entry_problem(analysis, site) or "the kernel's variants are not picked by one `if` before the call")
    with pin.pinned(ctx):
        yield _Arm(ctx, site, pin)


def _names(site: KernelSite) -> str:
    if len({d.name.value for d in site.variants}) > 1:
        return ", ".join(f"`{d.name.value}`" for d in site.variants)
    return f"{len(site.variants)} defs of `{site.kernel_name}`"


def _which(ctx, site: KernelSite) -> str:
    assert site.kernel is not None
    return f"`{site.kernel.name.value}` (line {ctx.span(site.kernel).line})"


def _opening(site: KernelSite) -> str:
    return f"the pallas_call runs `{site.kernel_name}`, one of {_names(site)} picked by a static `if`, and "


def together(analysis, outcomes: dict, codemod: str) -> dict:
    """`outcomes` with each variant's lift that edits what the call shares joined with the same
    lift in the other variants (or refused), and every lift of a call refused when one of its
    variants has windows and can lift none of them (each refused, other than waiting for a fix
    of its own): the call lifts its variants together or not at all."""
    out = _joined(analysis, outcomes, codemod)
    per_variant: dict[tuple[int, int], list] = {}
    for use in analysis.uses:
        site = use.kernel_site
        if site is not None and len(site.variants) > 1:  # a window no program-id lift speaks for counts too
            per_variant.setdefault((id(site.call), id(site.kernel)), []).append((site, use, out.get(use_key(use))))
    blocked: dict[int, tuple[KernelSite, str]] = {}
    for entries in per_variant.values():
        if not any(isinstance(o, FixPlan) or (isinstance(o, Refusal) and o.waits_for) for _, _, o in entries):
            site = entries[0][0]
            if _moves(analysis, site):
                continue  # lifted in an earlier round (or by its author): what is left stays, refused
            reason = next((o.reason for _, _, o in entries if isinstance(o, Refusal)), None) or (
                f"its window on line {analysis.ctx.span(entries[0][1].subscript).line} is no program-id window")
            blocked.setdefault(id(site.call), (site, reason))
    for use in analysis.uses:
        key, site = use_key(use), use.kernel_site
        if site is None or id(site.call) not in blocked or not isinstance(out.get(key), FixPlan):
            continue
        other, reason = blocked[id(site.call)]
        out[key] = Refusal(codemod, (
            f"{_opening(site)}pallas-fix lifts a call's variants together or not at all: variant "
            f"{_which(analysis.ctx, other)} can lift none of its windows: {reason}"
        ))
    return out


def _moves(analysis, site: KernelSite) -> bool:
    """Some operand of the variant already has a block the grid moves (a BlockSpec in its arm
    whose index_map is not all zeros)."""
    try:
        with arm_planning(analysis, site):
            cs = CallSite(analysis.ctx, site, analysis.detection.envs.get(site.kernel))
            return any(slot.kind in ("in", "out") and not cs.spec_of(slot).whole for slot in cs.slots.values())
    except (Refuse, CallSiteError):
        return False


def _joined(analysis, outcomes: dict, codemod: str) -> dict:
    """Each variant's lift with shared edits made one plan with the other variants' lifts of the
    same operand that write the same there; refused where one has none or writes otherwise."""
    plans = {id(o): o for o in outcomes.values() if isinstance(o, FixPlan) and o.variant is not None}
    replaced: dict[int, object] = {}
    for plan in plans.values():
        if id(plan) in replaced or not plan.variant.shared:  # type: ignore[union-attr]
            continue
        partners = [o for o in plans.values() if o is not plan and o.variant.site.call is plan.variant.site.call]  # type: ignore[union-attr]
        joined = _join(analysis, plan, partners, codemod)
        for member in [plan, *(joined.uses_from if isinstance(joined, _Joined) else ())]:
            replaced[id(member)] = joined.plan if isinstance(joined, _Joined) else joined
    if not replaced:
        return outcomes
    return {k: replaced.get(id(o), o) for k, o in outcomes.items()}


@dataclass
class _Joined:
    plan: FixPlan
    uses_from: list  # the partner plans it takes in


def _join(analysis, plan: FixPlan, partners: list, codemod: str):
    ctx = analysis.ctx
    mine: VariantEdits = plan.variant  # type: ignore[assignment]
    text = _shared_text(ctx, mine)
    kind, index, dim = mine.slot
    found = []
    for variant in mine.site.variants:
        if variant is mine.site.kernel:
            continue
        same = [p for p in partners if p.variant.site.kernel is variant and p.variant.slot[:2] == mine.slot[:2]]
        same.sort(key=lambda p: p.variant.slot != mine.slot)  # the same dim first
        if not same:
            line, written = _first_change(ctx.module.code, text)
            return Refusal(codemod, (
                f"{_opening(mine.site)}the lift of {_which(ctx, mine.site)} writes `{written}` (line {line}), which the "
                f"call reads for every variant; variant `{variant.name.value}` has no lift of the same operand "
                f"({kind}put {index}) to make with it, so it would run with that change too. Bind what differs once in "
                "each arm of the `if` (its specs, sizes and operands) to get this fix"
            ))
        other: VariantEdits = same[0].variant
        if {id(n) for n in other.shared} != {id(n) for n in mine.shared} or _shared_text(ctx, other) != text:
            return Refusal(codemod, (
                f"{_opening(mine.site)}the variants' lifts of {kind}put {index} disagree on what the call shares: "
                f"{_difference(ctx, mine, other)}; one call cannot be written for both. Bind what differs once in "
                "each arm of the `if` to get this fix"
            ))
        found.append(same[0])
    edits = dict(mine.edits)
    for partner in found:
        shared = {id(n) for n in partner.variant.shared}
        for n, e in partner.variant.edits.items():
            if id(n) in shared:
                continue
            if n in edits:  # both variants' own regions: never expected (their defs and arms are apart)
                return Refusal(codemod, f"{_opening(mine.site)}two variants' lifts edit `{ctx.code(n).strip()[:60]}` both")
            edits[n] = e
    needed = [p.variant.needed for p in [plan, *found]]

    def rewrite(module: cst.Module) -> cst.Module:
        return imports.add_imports(apply_edits(module, edits)[0], needed)

    names = ", ".join(_which(ctx, p.variant.site) for p in found)
    unsafe = any(p.safety is FixSafety.UNSAFE for p in [plan, *found])
    joined = FixPlan(plan.codemod, FixSafety.UNSAFE if unsafe else FixSafety.SAFE,
                     [u for p in [plan, *found] for u in p.uses],
                     f"{plan.description}, and the same operand's window in {names} (the call's shared "
                     f"edits are the same for both){_unsafe_notes(found)}", rewrite, site=plan.site,
                     guards=tuple(g for p in [plan, *found] for g in p.guards),
                     divided_only=any(p.divided_only for p in [plan, *found]))
    return _Joined(joined, found)


def _unsafe_notes(found: list) -> str:
    notes = [p.description.partition("; unsafe: ")[2] for p in found if p.safety is FixSafety.UNSAFE]
    return "".join(f"; unsafe: {n}" for n in notes if n)


def _shared_text(ctx, record: VariantEdits) -> str:
    """The module with only the variant's shared edits made."""
    return apply_edits(ctx.module, {n: record.edits[n] for n in record.shared})[0].code


def _first_change(before: str, after: str) -> tuple[int, str]:
    """(line, text) of the first line `after` writes differently from `before`."""
    a, b = before.splitlines(), after.splitlines()
    for tag, i1, _, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag != "equal":
            return i1 + 1, (b[j1].strip() if j1 < j2 else "(a line removed)")
    return 0, "(nothing)"


def _difference(ctx, mine: VariantEdits, other: VariantEdits) -> str:
    """What each variant's shared edits write that the other's do not (three lines at most each)."""
    ours, theirs = _added(ctx, mine), _added(ctx, other)
    assert mine.site.kernel is not None and other.site.kernel is not None

    def said(lines: list[str]) -> str:
        return ", ".join(f"`{line}`" for line in lines[:3]) or "nothing there"

    return (f"`{mine.site.kernel.name.value}` writes {said([x for x in ours if x not in theirs])} where "
            f"`{other.site.kernel.name.value}` writes {said([x for x in theirs if x not in ours])}")


def _added(ctx, record: VariantEdits) -> list[str]:
    before, after = ctx.module.code.splitlines(), _shared_text(ctx, record).splitlines()
    return [line[1:].strip() for line in difflib.unified_diff(before, after, lineterm="", n=0)
            if line.startswith("+") and not line.startswith("+++")]
