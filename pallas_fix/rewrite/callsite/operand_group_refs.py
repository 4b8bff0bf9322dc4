"""Which operand each ref a kernel takes through `*refs` is, when the operand list is built
under `if`s or passes on the wrapper's own `*args` (rewrite.callsite.operand_groups reads those lists).

Every list is read in one numbering: each conditional entry counted once with its test, and a
group (`*hs`, as many operands as the wrapper is given) counted once. The mapping holds for
every call when each kernel name keeps its operand whatever the tests say and however long the
group is:

- a name bound from the front of `*refs` sits before every conditional entry and group, a name
  bound from the back after them;
- the j-th pop (`scale_ref = rest.pop(0) if has_scale else None`) takes the j-th entry of the
  conditional run, under a functools.partial flag bound to the very test its operand is
  appended under;
- a group is a starred run of `*refs` (`*h_refs, o_ref = refs`) exactly as long as the group,
  read only by `for h_ref in h_refs:`, so `h_ref` stands for every operand of the group.
"""

from __future__ import annotations

from typing import Optional

import libcst as cst

from pallas_fix.analysis.context import ModuleContext, walk
from pallas_fix.analysis.discovery.star_facts import StarFacts, VarargsError, star_names
from pallas_fix.analysis.discovery.varargs import checked_star_facts
from pallas_fix.core.model import KernelSite
from pallas_fix.rewrite.callsite.operand_groups import Entry, test_text


def all_present_ref_names(ctx: ModuleContext, site: KernelSite, env, leading: int, operands: list[Entry], n_out: int, scratch: Optional[int]) -> list[Optional[str]]:
    """The kernel's name for each item of its `*refs` in the one numbering of `operands` (then
    `n_out` outputs and `scratch` scratch refs), once the mapping is proved for every call;
    raises VarargsError saying what to change otherwise."""
    facts = checked_star_facts(site, env)
    if scratch is None:
        raise VarargsError("the number of scratch refs is not readable at the call site; write scratch_shapes as a list")
    total = len(operands) + n_out + scratch  # kernel positions; the `leading` named refs are the first
    groups = [k for k, e in enumerate(operands) if e.over is not None]
    if not groups and not facts.pops and not facts.loops:
        flags = _guard_flags(ctx, site, facts)
        return _counted_names(facts, leading, operands, total, _split_counts(ctx, site, facts), flags)
    if facts.split_names():
        raise VarargsError(f"the kernel slices `*{facts.star}` at a count and also pops or loops over its refs; unpack by position")
    if not groups:
        return _popped_names(ctx, site, facts, leading, operands, total)
    if len(groups) > 1 or facts.pops or any(e.test is not None for e in operands):
        raise VarargsError("the call passes more than one `*args` group, or one beside optional operands; pass one group")
    return _group_names(ctx, facts, leading, groups[0], total)


def _group_names(ctx: ModuleContext, facts: StarFacts, leading: int, group: int, total: int) -> list[Optional[str]]:
    """`*h_refs, o_ref = refs` with `for h_ref in h_refs:` for the group at kernel position `group`."""
    how = (
        f"unpack the group's refs into one starred name (`*h_refs, o_ref = {facts.star}`) and read it only as "
        "`for h_ref in h_refs:`"
    )
    if len(facts.loops) != 1 or any(arm is not None for arm, *_ in facts.binds + facts.unpacks):
        raise VarargsError(f"the kernel does not loop once over the refs of the `*args` group; {how}")
    (name, run, _loop), star_total = facts.loops[0], total - leading
    if leading + run.start != group or run.length(star_total) != 1 or any(r == run for _, _, r, _ in facts.binds):
        raise VarargsError(f"the kernel's `*{facts.star}` run it loops over is not exactly the `*args` group; {how}")
    out: list[Optional[str]] = [None] * star_total
    out[group - leading] = name
    for fixed, pos, front in _fixed_positions(ctx, facts, star_total):
        if (leading + pos >= group) if front else (leading + pos <= group):
            raise VarargsError(f"`{fixed}` is bound at a place of `*{facts.star}` the `*args` group may shift; {how}")
        out[pos] = fixed
    return out


def _popped_names(ctx: ModuleContext, site: KernelSite, facts: StarFacts, leading: int, operands: list[Entry], total: int) -> list[Optional[str]]:
    """The names, for operands appended under `if`s and refs popped under the same flags."""
    cond = [k for k, e in enumerate(operands) if e.test is not None]  # kernel positions: operands come first
    lo, hi = min(cond), max(cond)
    if leading > lo:
        raise VarargsError("a named kernel parameter stands for an operand appended under an `if`; take those refs through `*refs`")
    if any(arm is not None for arm, *_ in facts.binds + facts.unpacks) or facts.loops or not facts.pops:
        raise VarargsError(
            f"the kernel does not pop the optional refs from `*{facts.star}` while the operands are appended under `if`s; "
            "pop them in order (`scale_ref = rest.pop(0) if has_scale else None`)"
        )
    star_total = total - leading
    out: list[Optional[str]] = [None] * star_total
    for name, pos, front in _fixed_positions(ctx, facts, star_total):
        absolute = leading + pos
        if (front and absolute >= lo) or (not front and absolute <= hi) or out[pos] is not None:
            raise VarargsError(
                f"`{name}` is bound at a fixed place of `*{facts.star}` that an optional operand may shift; bind the refs "
                "before the optional ones from the front and those after them from the back"
            )
        out[pos] = name
    pops = list(_pop_positions(ctx, facts, star_total))
    for j, (name, test, pos) in enumerate(pops):
        entry = operands[leading + pos] if pos is not None and leading + pos < len(operands) else None
        if entry is None or _kernel_test(ctx, site, test) != test_text(ctx, entry.test) or out[pos] is not None:
            raise VarargsError(
                f"pop {j} of `*{facts.star}` (`{name}`) does not take operand {pos} under the same test; pop each optional "
                "ref under a flag bound with functools.partial to the `if` test its operand is appended under"
            )
        out[pos] = name
    popped = {leading + pos for _, _, pos in pops}
    if not set(cond) <= popped:
        raise VarargsError(f"an operand appended under an `if` has no ref popped from `*{facts.star}` under the same flag")
    return out


_MOST_TESTS = 4  # distinct tests whose every combination is checked (16 operand lists)


def _split_counts(ctx: ModuleContext, site: KernelSite, facts: StarFacts) -> dict[str, bool]:
    """For each count the kernel slices `*refs` at (`refs[:n_in]`), whether it is bound by
    functools.partial to `len(args)` of the one `*args` the call passes (so it counts the operands
    each call passes: True). Raises VarargsError for any other count."""
    out: dict[str, bool] = {}
    call = site.invocation
    star = call.args[0].value if call is not None and len(call.args) == 1 and call.args[0].star == "*" else None
    for name in facts.split_names():
        value = site.partial_kwargs.get(name)
        counted = (
            isinstance(value, cst.Call) and isinstance(value.func, cst.Name) and value.func.value == "len" and len(value.args) == 1
            and isinstance(star, cst.Name) and isinstance(value.args[0].value, cst.Name) and value.args[0].value.value == star.value
        )
        if not counted:
            raise VarargsError(
                f"the kernel slices `*{facts.star}` at `{name}`, which is not bound with functools.partial to `len(...)` of the "
                "operand list the call spreads; bind it so, or unpack by position"
            )
        out[name] = True
    return out


def _guard_flags(ctx: ModuleContext, site: KernelSite, facts: StarFacts) -> dict[str, str]:
    """For each kernel flag a guarded binding tests (`s_ref = refs[1] if has_scale else None`),
    the wrapper expression functools.partial binds it to (`has_scale=has_scale`), as text: it
    holds exactly where an operand passed under that same test is passed. Flags bound otherwise
    are left out (the binding is then refused when read)."""
    out: dict[str, str] = {}
    for *_, test in facts.guarded:
        flag = test.expression if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not) else test
        value = site.partial_kwargs.get(flag.value) if isinstance(flag, cst.Name) else None
        if value is not None and _same_names_as_call(ctx, site, value):
            out[flag.value] = ctx.code(value).strip()
    return out


def _same_names_as_call(ctx: ModuleContext, site: KernelSite, value: cst.BaseExpression) -> bool:
    """`value` (a partial's keyword) is written in the wrapper that builds the operands and every
    name in it is bound at most once there, so its text means there what the operands' test means."""
    scope = ctx.scope_of(site.call)
    return ctx.scope_of(value) is scope and all(
        len(ctx.assignments(n.value, scope)) <= 1 for n in walk(value) if isinstance(n, cst.Name)
    )


def _counted_names(facts: StarFacts, leading: int, operands: list[Entry], total: int,
                   counts: Optional[dict[str, bool]] = None, flags: Optional[dict[str, str]] = None) -> list[Optional[str]]:
    """The names, for optional operands and a kernel that unpacks `*refs` by position, also in the
    arms of a kernel-level `if` (`if has_bias: b_ref, o_ref = rest` / `else: (o_ref,) = rest`).

    Every combination of the operands' tests is a list of refs the call may pass; for each, the
    kernel's names are read at that count (varargs.star_names: only the arms whose unpacking fits
    the count can run, and two arms that both fit must agree) and taken back to the all-present
    numbering. The mapping holds when each name stands for the same operand in every combination
    that binds it, and no two names for one; combinations the wrapper never makes (tests that
    exclude each other) are checked too, so this may refuse, never mismatch."""
    tests = sorted({test_text_of(e) for e in operands if e.test is not None})
    if any(k < leading for k, e in enumerate(operands) if e.test is not None):
        raise VarargsError("a named kernel parameter stands for an operand passed only under a test; take those refs through `*refs`")
    if len(tests) > _MOST_TESTS:
        raise VarargsError(f"the operands are passed under {len(tests)} different tests; pallas-fix checks at most {_MOST_TESTS}")
    out: list[Optional[str]] = [None] * (total - leading)
    where: dict[str, int] = {}
    for mask in range(1 << len(tests)):
        held = {t for j, t in enumerate(tests) if mask >> j & 1}
        present = [k for k, e in enumerate(operands) if e.test is None or test_text_of(e) in held]
        positions = present + list(range(len(operands), total))  # all-present index of each ref passed
        star_total = len(positions) - leading
        sizes = {name: len(present) for name in counts or {}}  # `len(args)`: every operand passed, named or not
        truth = {flag: text in held for flag, text in (flags or {}).items() if text in tests}
        seen = facts.at_sizes(sizes, star_total, truth) if counts or facts.guarded else facts
        for pos, name in enumerate(star_names(seen, star_total)):
            if name is None:
                continue
            index = positions[leading + pos] - leading
            if where.get(name, index) != index or out[index] not in (None, name):
                raise VarargsError(
                    f"`{name}` stands for a different operand depending on which optional operands are passed "
                    f"({', '.join(tests)}); unpack `*{facts.star}` so each name keeps its operand (the optional refs in "
                    "the arm of an `if` on the same flag)"
                )
            where[name], out[index] = index, name
    return out


def test_text_of(entry: Entry) -> str:
    return cst.Module([]).code_for_node(entry.test).strip()


def _fixed_positions(ctx: ModuleContext, facts: StarFacts, star_total: int):
    """(name, star-list position, counted from the front?) of each name not popped. The names
    unpacked from a popped list after its pops are the last items of that list."""
    popped_runs = {run for _, run, _, _ in facts.pops}
    for run in popped_runs:
        if sum(1 for _, _, r, index in facts.binds if r == run and index >= 0) != _unpack_length(ctx, facts, run):
            raise VarargsError(f"a ref is taken from a popped list by a front index; unpack what is left (`(o_ref,) = rest`)")
    for _arm, name, run, index in facts.binds:
        if run in popped_runs:
            index = index - _unpack_length(ctx, facts, run) if index >= 0 else index
        pos = run.position(index, star_total)
        if pos is None:
            raise VarargsError(f"the kernel unpacks `*{facts.star}` with more names than the call passes refs")
        yield name, pos, index >= 0


def _unpack_length(ctx: ModuleContext, facts: StarFacts, run) -> int:
    """The one plain unpacking of a popped list, after all its pops (`(o_ref,) = rest`)."""
    unpacks = [(n, starred, stmt) for _arm, r, n, starred, stmt in facts.unpacks if r == run]
    last_pop = max(ctx.span(stmt).line for _, r, _, stmt in facts.pops if r == run)
    if len(unpacks) != 1 or unpacks[0][1] or ctx.span(unpacks[0][2]).line < last_pop:
        raise VarargsError(
            f"unpack what is left of `*{facts.star}` once, with no starred name, after all its pops (`(o_ref,) = rest`)"
        )
    return unpacks[0][0]


def _pop_positions(ctx: ModuleContext, facts: StarFacts, star_total: int):
    """(name, test, all-present position) of each pop, in the order they run (kernel-level
    statements, so in the order they are written)."""
    runs = {run for _, run, _, _ in facts.pops}
    if len(runs) != 1:
        raise VarargsError(f"the kernel pops from more than one list unpacked from `*{facts.star}`; pop from one")
    (run,) = runs
    ordered = sorted(facts.pops, key=lambda p: ctx.span(p[3]).line)
    for j, (name, _run, test, _stmt) in enumerate(ordered):
        yield name, test, run.position(j, star_total)


def _kernel_test(ctx: ModuleContext, site: KernelSite, test: Optional[cst.BaseExpression]) -> Optional[str]:
    """The wrapper's expression a pop's flag is bound to (`has_scale=scale is not None`)."""
    if test is None:
        return None
    if isinstance(test, cst.Name) and test.value in site.partial_kwargs:
        return ctx.code(site.partial_kwargs[test.value]).strip()
    raise VarargsError(
        f"a ref is popped under `{ctx.code(test).strip()}`; pop under a kernel flag bound with functools.partial to the "
        "`if` test its operand is appended under"
    )
