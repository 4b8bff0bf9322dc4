"""The facts a kernel's statements state about its `*refs` list (analysis.discovery.varargs reads
them), and the name each ref of the list has once the call fixes how many it passes.

A fact places a name at an index of a run of the list (`Run`: from a front index to a place
counted from the back, or a run of `refs[:n_in]` / `refs[n_in:]` cut at a count the call's
`functools.partial` binds: plain once that count is known, `StarFacts.at_sizes`). `star_names`
resolves them for one count: only the arms of a static `if` whose unpacking fits can run, and
two arms that both fit must agree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import libcst as cst


class VarargsError(Exception):
    """Why the names bound from `*refs` cannot be mapped to refs."""


@dataclass(frozen=True)
class Run:
    """A run of the star list: its items from front index `start` to `end` items before its
    back (`end` <= 0), as `*rest` unpacking leaves them. `split` names a count the kernel slices
    the whole list at (`refs[:n_in]`, `head`; `refs[n_in:]`, not `head`): a run whose bounds are
    not known until that count is (see StarFacts.split_names)."""

    start: int = 0
    end: int = 0
    split: Optional[str] = None
    head: bool = False

    def length(self, total: int) -> int:
        return total - self.start + self.end

    def position(self, index: int, total: int) -> Optional[int]:
        """The star-list position of `run[index]`, None when it is out of range."""
        if self.split is not None:
            return None  # bounds known only once the split count is (star_names refuses first)
        n = self.length(total)
        if not -n <= index < n:
            return None
        return self.start + (index if index >= 0 else n + index)


# An arm of a kernel-level `if`: (the `if`, "body" or "orelse"); None for the kernel's own body.
Arm = Optional[tuple[cst.If, str]]


@dataclass
class StarFacts:
    """What the kernel's statements say about its `*refs` list."""

    star: str
    binds: list[tuple[Arm, str, Run, int]] = field(default_factory=list)  # (arm, name, run, index)
    unpacks: list[tuple[Arm, Run, int, bool, cst.CSTNode]] = field(default_factory=list)  # (arm, run, n targets, starred, stmt)
    targets: set[int] = field(default_factory=set)  # ids of the Name nodes the bindings bind
    # `scale_ref = rest.pop(0) if has_scale else None`: (name, run popped, static test or None, stmt),
    # in the order the kernel-level statements run; rewrite.callsite.operand_groups maps them.
    pops: list[tuple[str, Run, Optional[cst.BaseExpression], cst.CSTNode]] = field(default_factory=list)
    # `for h_ref in h_refs:` over a starred run: (loop name, run); the name stands for every ref of the run.
    loops: list[tuple[str, Run, cst.For]] = field(default_factory=list)
    # `inner(idx, *refs)`: (callee's parameter name, run, index, call), names in the callee's scope
    # (analysis.discovery.forwarded_refs), read only on request; `refs[0].shape`: sizes read by index.
    forwards: list[tuple[str, Run, int, cst.Call]] = field(default_factory=list)
    sized: list[cst.Subscript] = field(default_factory=list)
    # `w_ref = ins[1] if n_in > 1 else None`: (arm, name, run, index, test), a ref only where the test holds.
    guarded: list[tuple[Arm, str, Run, int, cst.BaseExpression]] = field(default_factory=list)

    def names(self) -> set[str]:
        guarded = {name for _, name, *_ in self.guarded}
        return {name for _, name, _, _ in self.binds} | {name for name, *_ in self.pops} | {name for name, *_ in self.loops} | guarded

    def split_names(self) -> set[str]:
        """The counts the kernel slices its `*refs` at (`ins, outs = refs[:n_in], refs[n_in:]`)."""
        runs = [run for _, _, run, _ in self.binds] + [run for _, run, *_ in self.unpacks] + [run for _, _, run, *_ in self.guarded]
        runs += [run for _, run, *_ in self.pops + self.loops + self.forwards]
        return {run.split for run in runs if run.split is not None}

    def at_sizes(self, sizes: dict[str, int], total: int, flags: Optional[dict[str, bool]] = None) -> "StarFacts":
        """These facts for a list of `total` refs whose split counts are `sizes` (`n_in` -> 2) and
        whose kernel flags are `flags` (`has_scale` -> True): each cut run made plain, each
        guarded binding kept where its test holds and dropped where it fails. Raises VarargsError
        for a count or a test it cannot read."""
        if self.pops or self.loops or self.forwards or not self.split_names() <= set(sizes):
            raise VarargsError(f"the kernel slices `*{self.star}` at a count that is not a functools.partial keyword `len(...)` of the operands")
        plain = lambda run: _cut(run, sizes, total)  # noqa: E731
        binds = [(arm, name, plain(run), index) for arm, name, run, index in self.binds]
        for arm, name, run, index, test in self.guarded:
            if _holds(test, sizes, flags or {}):
                binds.append((arm, name, plain(run), index))
        unpacks = [(arm, plain(run), n, starred, stmt) for arm, run, n, starred, stmt in self.unpacks]
        return StarFacts(self.star, binds, unpacks, set(self.targets), sized=list(self.sized))


def _cut(run: Run, sizes: dict[str, int], total: int) -> Run:
    """A run of `refs[:k]` or `refs[k:]` (k = sizes[split]) as a run of the whole list of `total`."""
    if run.split is None:
        return run
    k = sizes[run.split]
    if not 0 <= k <= total:
        raise VarargsError(f"`{run.split}` is {k}, outside the {total} refs the call passes")
    return Run(run.start, run.end - (total - k)) if run.head else Run(k + run.start, run.end)


_COMPARE = {cst.GreaterThan: int.__gt__, cst.GreaterThanEqual: int.__ge__, cst.LessThan: int.__lt__,
            cst.LessThanEqual: int.__le__, cst.Equal: int.__eq__, cst.NotEqual: int.__ne__}


def _holds(test: cst.BaseExpression, sizes: dict[str, int], flags: dict[str, bool]) -> bool:
    """`n_in > 1` (a split count against an integer literal) at these sizes, `has_scale` or
    `not has_scale` (a kernel flag) at these flags."""
    if isinstance(test, cst.Name) and test.value in flags:
        return flags[test.value]
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not) and isinstance(test.expression, cst.Name):
        return not _holds(test.expression, sizes, flags)
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        left, (right,) = test.left, test.comparisons
        op = _COMPARE.get(type(right.operator))
        if op is not None and isinstance(left, cst.Name) and left.value in sizes and isinstance(right.comparator, cst.Integer):
            return op(sizes[left.value], int(right.comparator.evaluated_value))
    raise VarargsError(
        f"a ref is bound under `{cst.Module([]).code_for_node(test).strip()}`, which pallas-fix reads only as a split "
        "count compared with an integer (`w_ref = ins[1] if n_in > 1 else None`) or a flag functools.partial binds to "
        "the test its operand is passed under (`s_ref = refs[1] if has_scale else None`)"
    )


def star_names(facts: StarFacts, total: Optional[int], *, forwarded: bool = False) -> list[Optional[str]]:
    """The name of each item of the star list (None where no name is bound), for a list of
    `total` refs as the call site fixes it."""
    if total is None:
        raise VarargsError(
            f"the number of refs `*{facts.star}` receives is not fixed at the call site (its operands, out_shape and "
            "scratch_shapes must be readable); name the refs as parameters"
        )
    if total < 0:
        raise VarargsError(f"the call passes fewer refs than the parameters before `*{facts.star}`")
    if facts.pops or facts.loops:
        raise VarargsError(
            f"the kernel pops refs from `*{facts.star}` or loops over them, which pallas-fix maps only for operands built "
            "with a literal and `.append` under the same static tests, or passed on as the wrapper's own `*args`"
        )
    unsized = facts.split_names()
    if unsized:
        raise VarargsError(
            f"the kernel slices `*{facts.star}` at a count (`{facts.star}[:{min(unsized)}]`), which pallas-fix resolves only "
            "when functools.partial binds it to `len(operands)` of operands passed under tests; unpack by position "
            f"(`x_ref, *rest = {facts.star}`, then `w_ref, o_ref = rest` in the arm of an `if` on a static flag)"
        )
    if facts.guarded:
        name = facts.guarded[0][1]
        raise VarargsError(
            f"the kernel binds `{name}` from `*{facts.star}` under a conditional expression, which pallas-fix resolves only "
            "when its flag is bound with functools.partial to the test its operand is passed under; unpack by position "
            f"(`x_ref, *rest = {facts.star}`, then `{name}, o_ref = rest` in the arm of an `if` on a static flag)"
        )
    arms = _running_arms(facts, total)
    out: list[Optional[str]] = [None] * total
    where: dict[str, int] = {}
    for arm, name, run, index in facts.binds:
        if arm is not None and arm not in arms:
            continue
        pos = run.position(index, total)
        if pos is None or where.get(name, pos) != pos:
            raise VarargsError(
                f"`{name}` stands for different refs of `*{facts.star}` in different arms of an `if` that both fit the call's "
                f"{total} refs, so which operand it is depends on the test; unpack `{facts.star}` in one order and branch where the refs are used"
            )
        if out[pos] not in (None, name):
            raise VarargsError(f"two names (`{out[pos]}`, `{name}`) stand for ref {pos} of `*{facts.star}`")
        where[name], out[pos] = pos, name
    for name, run, index, _call in facts.forwards if forwarded else ():
        pos = run.position(index, total)  # None: a callee parameter past the refs names none
        if pos is not None and out[pos] not in (None, name):
            raise VarargsError(f"two names (`{out[pos]}`, `{name}`) stand for ref {pos} of `*{facts.star}`")
        if pos is not None:
            out[pos] = name
    # A name only some running arms bind is unbound when another runs: its reads either sit in
    # code that arm does not reach or fail when traced, so the position it has where bound holds.
    return out


def _fits(facts: StarFacts, arm: Arm, total: int) -> bool:
    """Can `arm`'s statements run with `total` refs (no unpacking of the wrong length, no index
    out of range)?"""
    for at, run, n, starred, _ in facts.unpacks:
        if at == arm and (run.length(total) < n - 1 if starred else run.length(total) != n):
            return False
    return all(run.position(index, total) is not None for at, _, run, index in facts.binds if at == arm)


def _running_arms(facts: StarFacts, total: int) -> set[tuple[cst.If, str]]:
    """The arms that can run with `total` refs; the kernel-level facts must fit."""
    if not _fits(facts, None, total):
        raise VarargsError(f"the kernel unpacks `*{facts.star}` with a different number of refs than the call passes")
    ifs = {arm[0] for arm, *_ in facts.binds + facts.unpacks if arm is not None}
    running: set[tuple[cst.If, str]] = set()
    for node in ifs:
        fitting = {which for which in ("body", "orelse") if _fits(facts, (node, which), total)}
        if not fitting:
            raise VarargsError(f"no arm of an `if` fits the {total} refs the call passes through `*{facts.star}`")
        running |= {(node, which) for which in fitting}
    return running
