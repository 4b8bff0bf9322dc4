"""The in_specs of a call whose operands are appended under `if`s or passed as `*args`
(rewrite.callsite.operand_groups reads those lists): built beside the operands entry by entry,
absent (every operand whole), or a head of specs and a whole-array tail sized by the operand list
(`[tile_spec] * 3 + [pl.no_block_spec] * (len(operands) - 3)`, spelling.sized_tails). For the last
two, `cs.default_tail` holds (the starred list, how many of its items come before its first
variable entry, that entry's index), and a new spec is written only for an operand before it.
"""

from __future__ import annotations

from typing import Optional

import libcst as cst

from pallas_fix.analysis.context import walk
from pallas_fix.rewrite.callsite.call_timing import operand_change
from pallas_fix.rewrite.callsite.operand_groups import conditional_entries, misaligned, starred_entries
from pallas_fix.rewrite.callsite.spelling.operands import CallSiteError
from pallas_fix.rewrite.callsite.spelling.mirrored_tails import mirrored_parts
from pallas_fix.rewrite.callsite.spelling.sized_tails import (SizedTail, head_texts, is_len_of_name, read_sized_tail,
                                                             sized_tail_text, tail_text, written_lambdas)
from pallas_fix.rewrite.text.syntax import code


def conditional_in_specs(cs, spec: Optional[cst.BaseExpression]) -> cst.BaseExpression:
    """The in_specs of a CallSite whose operands are appended under `if`s, built the same way
    entry by entry: its items go to `cs.built`, the names its building statements read to
    `cs.builder_reads`."""
    if not isinstance(cs.site.kernel.params.star_arg, cst.Param):
        raise CallSiteError("the operands come from `*args` or are appended under `if`s, but the kernel takes a fixed list of refs; take them as `*refs`")
    how = (
        "build in_specs beside the operands: append each spec under the same `if` as its operand, and those of "
        "`*args` with `for a in args: in_specs.append(...)`"
    )
    if spec is None:
        cs.default_tail = _whole_tail(cs, how)
        return None
    built = conditional_entries(cs.ctx, spec, spec)  # read up to where the call (or its `dict(...)`) takes it
    tail = _read_whole_tail(cs, spec) if built is None else None
    if tail is not None:
        cs.default_tail, cs.built["in_specs"] = tail
        return spec
    if built is None:
        raise CallSiteError(
            f"the operands are appended under `if`s or passed as `*args`, but in_specs is not built so "
            f"({_spec_words(cs, spec)}); {how}"
        )
    why = misaligned(cs.ctx, cs.operand_entries[cs.num_prefetch :], built[0], "in_specs")
    if why is not None:
        raise CallSiteError(why)
    if any(id(r) not in built[1] for r in cs.other_reads(spec, within_call=False)):
        raise CallSiteError(f"`{cs.ctx.code(spec)}` (in_specs) is also used elsewhere; give this pallas_call its own in_specs")
    for slot in cs.slots.values():
        if slot.kind == "in" and built[0][slot.index].over is not None:
            slot.arg = built[0][slot.index].target  # `h` of `for h in hs:`: the group's array where its spec is written
            loop = cs.ctx.parent(slot.arg)
            passed = cs.operand_entries[cs.num_prefetch + slot.index].value  # `hs` as the kernel call spreads it
            why = operand_change(cs.ctx, cs.site, passed, loop.iter, "the loop that builds its specs") if isinstance(loop, (cst.For, cst.CompFor)) else None
            if why is not None:
                raise CallSiteError(why)
    cs.built["in_specs"] = [e.value for e in built[0]]
    cs.builder_reads |= built[1]
    return spec


def _spec_words(cs, spec: cst.BaseExpression) -> str:
    """What the in_specs a conditional operand list comes with is, for the refusal: its text, and
    why a repetition sized by the operands cannot take one operand's new spec."""
    value = cs.ctx.resolve_value(spec, cs.site.call)
    text = " ".join(cs.ctx.code(value).split())
    text = text if len(text) <= 100 else text[:97] + "..."
    sized = any(isinstance(n, cst.Call) and is_len_of_name(n) for n in walk(value))
    why = ", a repetition whose count is computed from the operands' length: no entry of it is one operand's" if sized else ""
    return f"it is `{text}`{why}"


def _whole_tail(cs, how: str) -> tuple[str, int, int]:
    """For a call with no in_specs (every operand whole): (the starred list `operands`, how many
    of its items come before its first variable entry, that entry's index). A new in_specs then
    writes its fixed entries and `[pl.BlockSpec()] * (len(operands) - j)` for the rest, so it
    follows the operand list whatever its length (see whole_tail_specs)."""
    first = next(k for k, e in enumerate(cs.operand_entries) if e.variable)
    offset = 0
    for a in cs.site.invocation.args:
        count = len(starred_entries(cs.ctx, a.value, cs.site.invocation) or []) if a.star == "*" else 1
        if offset <= first < offset + count:
            if a is not cs.site.invocation.args[-1] or not isinstance(a.value, cst.Name) or cs.num_prefetch:
                break
            return a.value.value, first - offset, first
        offset += count
    raise CallSiteError(f"the operands are appended under `if`s or passed as `*args`, and the call has no in_specs; {how}")


def _read_whole_tail(cs, spec: cst.BaseExpression):
    """`[x_spec] * 3 + [pl.no_block_spec] * (len(operands) - 3)` (spelling.sized_tails) whose numbers
    fit the operands: the tail and one spec node per operand, the tail's whole-array spec standing
    for each operand past the head (fixed ones too, when the head is shorter than they are)."""
    value = cs.ctx.resolve_value(spec, cs.site.call)
    sized = read_sized_tail(cs.ctx, value, cs.site.call)
    try:
        tail = _whole_tail(cs, "") if sized is not None else None
    except CallSiteError:
        return None
    if tail is None or not _fits(cs, sized, tail):
        return None
    return tail, sized.items() + [sized.whole] * (len(cs.operand_entries) - sized.length)


def _fits(cs, sized: SizedTail, tail: tuple[str, int, int]) -> bool:
    """The head covers the operands passed before `*operands` and none past its first variable
    entry, the tail the rest, and `len(operands)` is read where the list is complete."""
    name, before, first = tail
    offset = first - before  # operands passed before `*operands`
    if sized.name != name or not offset <= sized.length <= first or sized.drop != sized.length - offset:
        return False
    star = cs.site.invocation.args[-1].value
    if cs.ctx.resolve_value(sized.counted, sized.counted) is not cs.ctx.resolve_value(star, cs.site.invocation):
        return False
    at_len = conditional_entries(cs.ctx, sized.counted, sized.counted, operands=True)
    return at_len is not None and len(at_len[0]) == len(cs.operand_entries) - offset


def sized_tail_specs(cs, codes: dict[int, Optional[str]], blocked: dict[int, str], extends: bool) -> str:
    """The in_specs _read_whole_tail read, with the new specs `codes` of the slots `blocked`
    (index -> ref) in their entries and those of head entries (spelling.sized_tails); the tail's
    whole-array spec stands as it is for every other operand, whatever the grid. `extends`: the
    plan adds a grid axis."""
    value = cs.ctx.resolve_value(cs.site.kw("in_specs"), cs.site.call)
    sized = read_sized_tail(cs.ctx, value, cs.site.call)
    name, before, first = cs.default_tail
    kept = {k: c for k, c in codes.items() if c is not None and (k in blocked or k < sized.length)}
    if extends and written_lambdas(sized, kept):
        raise CallSiteError("in_specs repeats an index_map written in place and the rewrite adds a grid axis; name the spec")
    shared = [ref for k, ref in blocked.items() if k >= first]
    if not shared:
        return sized_tail_text(sized, kept, first - before)
    # An optional operand's own spec: the tail written as the operands are chosen (spelling.mirrored_tails).
    whole = code(sized.whole).strip()
    rest = mirrored_parts(cs.ctx, cs.operand_entries, first, kept, whole)
    if rest is None:
        raise CallSiteError(
            f"the rewrite blocks `{shared[0]}`, an optional or `*args` operand whose spec is the shared whole-array tail "
            f"`{code(sized.tail).strip()}`, and its operands are not chosen by conditional expressions or `if`s "
            f"pallas-fix can mirror; build in_specs beside the operands, appending each spec where its operand is appended"
        )
    fixed = ["[" + ", ".join(kept.get(k) or whole for k in range(sized.length, first)) + "]"] if first > sized.length else []
    return " + ".join(head_texts(sized, kept) + fixed + rest)


def whole_tail_specs(cs, texts: dict[int, str], blocked: set[int], plain_whole: str) -> str:
    """The new in_specs of a call that had none, when its operands are appended under `if`s or
    passed as `*args`: the fixed entries' specs, then one whole-array spec per remaining operand."""
    name, before, first = cs.default_tail
    if any(k >= first for k in blocked) or sorted(k for k in texts if k < first) != list(range(first)):
        raise CallSiteError(
            "a ref the rewrite blocks is an optional or `*args` operand (or an operand before them has no kernel name); "
            "build in_specs beside the operands, appending each spec where its operand is appended"
        )
    tail = tail_text(plain_whole, name, before)
    head = "[" + ", ".join(texts[k] for k in range(first)) + "]"
    return f"{head} + {tail}" if first else tail
