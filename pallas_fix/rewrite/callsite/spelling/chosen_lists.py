"""Operand lists chosen by a conditional expression between two literals.

    operands = (x, s) + ((b,) if has_bias else ())
    args = (x, w) if with_weight else (x,)
    operands = [group, start, end, a, b] + ([] if post is None else [post])

When one arm's items are the other's followed by more, the shared items are always passed and
the extra ones exactly when the test (or, for the `else` arm, its negation) holds: the same
reading as items appended under `if TEST:` (rewrite.callsite.operand_groups). Spec lists are
never read this way: an item written in both arms is two nodes, and an edit would land in one.
"""

from __future__ import annotations

from typing import Optional

import libcst as cst

from pallas_fix.rewrite.text.syntax import code, elements


def chosen_items(choice: cst.IfExp) -> Optional[tuple[list[cst.BaseExpression], list[cst.BaseExpression], cst.BaseExpression]]:
    """`(x, w) if with_weight else (x,)`, `(b,) if has_bias else ()`, `[] if post is None else
    [post]`: two literals, one the other's items followed by more. The shared items are always
    there (written the same in both arms; the caller checks each name is bound once, so they mean
    the same in both); the extra ones are there under the test (or its negation, when the `else`
    arm has them): (shared items, extra items, that test). Anything else (items that differ, a
    reordering, a nested choice, a shared item that is not a plain name) is None."""
    body, orelse = elements(choice.body), elements(choice.orelse)
    if body is None or orelse is None or not isinstance(choice.body, type(choice.orelse)):
        return None
    short, long, test = (orelse, body, choice.test) if len(body) >= len(orelse) else (body, orelse, _negated(choice.test))
    if len(short) == len(long) or [code(i).strip() for i in short] != [code(i).strip() for i in long[: len(short)]]:
        return None
    if not all(isinstance(i, cst.Name) for i in short):
        return None  # `(f(x), w) if c else (f(x),)`: a call in each arm need not give the same array
    return list(long[: len(short)]), list(long[len(short) :]), test


def _negated(test: cst.BaseExpression) -> cst.BaseExpression:
    """`x is not None` for `x is None` (and back), `t` for `not t`, else `not (t)`: the test an
    item of the `else` arm is there under, written as the wrapper would write it."""
    flip = {cst.Is: cst.IsNot, cst.IsNot: cst.Is}
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1 and type(test.comparisons[0].operator) in flip:
        op = flip[type(test.comparisons[0].operator)]()
        return test.with_changes(comparisons=[test.comparisons[0].with_changes(operator=op)], lpar=[], rpar=[])
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return test.expression
    return cst.UnaryOperation(cst.Not(), cst.parse_expression(f"({code(test).strip()})"))
