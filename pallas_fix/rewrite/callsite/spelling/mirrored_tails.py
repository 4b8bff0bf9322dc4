"""The optional operands' part of a spec list written the way the operands are chosen, for a lift
that blocks one of them (rewrite.callsite.conditional_specs):

    operands = [group, start, end, a, b] + ([] if post is None else [post])
    in_specs=[tile_spec] * 3 + [pl.no_block_spec] * (len(operands) - 3)
 -> in_specs=[tile_spec] * 3 + [pl.no_block_spec, pl.no_block_spec] + ([] if post is None else [post_spec])

Each choice between two literals (spelling.chosen_lists) is mirrored with the same test and the
same arms, each item its spec; operands appended under `if TEST:` get `([spec] if TEST else [])`;
a fixed operand among them, its own entry. The specs then follow the operands whatever the tests
say, entry by entry, with no count to compute. `*args` groups and choices whose arms share items
are not written (None): the caller refuses.
"""

from __future__ import annotations

from typing import Optional

import libcst as cst

from pallas_fix.analysis.context import ModuleContext
from pallas_fix.rewrite.callsite.spelling.chosen_lists import chosen_items
from pallas_fix.rewrite.text.syntax import code, elements


def mirrored_parts(ctx: ModuleContext, entries: list, start: int, codes: dict[int, str], whole: str) -> Optional[list[str]]:
    """The `+` parts that give `entries[start:]` (operand_groups.Entry, in all-present numbering)
    their specs: `codes[k]` for entry k, `whole` for the rest."""
    parts, k = [], start
    while k < len(entries):
        entry = entries[k]
        if entry.over is not None:
            return None  # `*args`: no one expression gives each item its own spec
        if entry.test is None:
            parts.append(f"[{codes.get(k) or whole}]")
            k += 1
            continue
        choice = _choice_of(ctx, entry.value)
        if choice is not None:
            read = chosen_items(choice)
            extra = read[1] if read is not None and not read[0] else []
            if not extra or [id(e.value) for e in entries[k : k + len(extra)]] != [id(i) for i in extra]:
                return None
            body, orelse = _arm(choice.body, k, codes, whole), _arm(choice.orelse, k, codes, whole)
            parts.append(f"({body} if {code(choice.test).strip()} else {orelse})")  # the same test, the same arms
            k += len(extra)
            continue
        test = code(entry.test).strip()
        n = next((j for j in range(k, len(entries)) if entries[j].test is not entry.test), len(entries)) - k
        if any(_choice_of(ctx, e.value) is not None or e.over is not None for e in entries[k : k + n]):
            return None
        specs = ", ".join(codes.get(j) or whole for j in range(k, k + n))
        parts.append(f"([{specs}] if {_guarded(entry.test, test)} else [])")
        k += n
    return parts


def _choice_of(ctx: ModuleContext, value: cst.BaseExpression) -> Optional[cst.IfExp]:
    """The `a if t else b` whose arm literal holds `value` as an item, if any."""
    arm = ctx.parent(value)
    arm = ctx.parent(arm) if isinstance(arm, cst.Element) else arm
    choice = ctx.parent(arm) if isinstance(arm, (cst.List, cst.Tuple)) else None
    return choice if isinstance(choice, cst.IfExp) and arm in (choice.body, choice.orelse) else None


def _arm(arm: cst.BaseExpression, start: int, codes: dict[int, str], whole: str) -> str:
    """One arm of a mirrored choice: a list of its items' specs (a spec list is a list, whatever the
    operands' literals are)."""
    return "[" + ", ".join(codes.get(start + i) or whole for i in range(len(elements(arm) or []))) + "]"


def _guarded(test: cst.BaseExpression, text: str) -> str:
    """The test as the `if` of a conditional expression: bracketed when it binds looser."""
    loose = isinstance(test, (cst.IfExp, cst.Lambda, cst.NamedExpr)) and not test.lpar
    return f"({text})" if loose else text
