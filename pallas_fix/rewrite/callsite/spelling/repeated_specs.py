"""Spec lists written as one spec repeated: `in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)] * 2`,
or one `pl.no_block_spec` standing for every operand (a pytree prefix of the specs).

Each operand's slot reads the one repeated spec. A plan that changes some of them cannot edit
that spec in place (it would change every slot), so the list is written out, one entry per
operand: the entries the plan leaves keep the repeated spec's text.
"""

from __future__ import annotations

from typing import Optional

import libcst as cst

from pallas_fix.analysis.context import ModuleContext
from pallas_fix.core import names as N
from pallas_fix.rewrite.text.syntax import elements


def repeated_items(ctx: ModuleContext, expr: Optional[cst.BaseExpression], at: cst.CSTNode) -> Optional[list[cst.BaseExpression]]:
    """The items of `[a, b] * k` (or `k * [a, b]`) with `k` a literal integer; None otherwise."""
    if expr is None:
        return None
    return repetition(ctx.resolve_value(expr, at), lambda seq: ctx.resolve_value(seq, at))


def repetition(value: cst.BaseExpression, resolve=lambda seq: seq) -> Optional[list[cst.BaseExpression]]:
    """The items of `value` when it is `[a, b] * k` or `k * [a, b]`, `k` a literal integer (the
    list as `resolve` reads it: a name bound to one, where the caller follows names); None otherwise."""
    if not (isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Multiply)):
        return None
    for seq, count in ((value.left, value.right), (value.right, value.left)):
        seq = resolve(seq)
        items = elements(seq) if isinstance(seq, cst.List) else None
        if items is not None and isinstance(count, cst.Integer):
            return items * int(count.evaluated_value)
    return None


def no_block_spec(ctx: ModuleContext, expr: Optional[cst.BaseExpression], at: cst.CSTNode) -> bool:
    """`pl.no_block_spec`: `BlockSpec()` with nothing set, the whole array, as an absent spec is."""
    return expr is not None and ctx.imports.is_(ctx.resolve_value(expr, at), N.NO_BLOCK_SPEC)
