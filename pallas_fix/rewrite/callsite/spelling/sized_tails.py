"""Spec lists whose tail is one whole-array spec repeated as often as a list of operands has items
left, as a wrapper with optional operands writes them:

    operands = [group, start, end, a, b] + ([] if post is None else [post])
    in_specs=[tile_spec] * 3 + [pl.no_block_spec] * (len(operands) - 3)

The head is any `+` of list literals and literal repetitions (`[a] * 3`, `[a, b] + [c] * 2`); the
tail is `[W] * len(operands)` or `[W] * (len(operands) - k)`, W a spec that is the whole array
whatever the grid (`pl.BlockSpec()`, `pl.no_block_spec`). Whether the numbers fit the operands is
the caller's to check (rewrite.callsite.operand_groups); this reads and writes the spelling.

A new spec for an operand inside the head rewrites only the head part that holds it (a repetition
written out item by item); one for a fixed operand the tail covers gets its own list between the
head and a tail that starts after it, so every other entry keeps the text the user wrote.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import libcst as cst

from pallas_fix.analysis.context import ModuleContext, walk
from pallas_fix.core import names as N
from pallas_fix.rewrite.callsite.spelling.repeated_specs import repetition
from pallas_fix.rewrite.text.syntax import code, elements, summands


@dataclass(frozen=True)
class SizedTail:
    """`head + [whole] * (len(name) - drop)`: the head's parts as written, each with the spec
    nodes it stands for, one per operand."""

    parts: tuple[tuple[cst.BaseExpression, tuple[cst.BaseExpression, ...]], ...]
    tail: cst.BaseExpression  # `[whole] * (len(name) - drop)` as written
    whole: cst.BaseExpression
    counted: cst.Name  # `operands` in `len(operands)`
    drop: int

    @property
    def name(self) -> str:
        return self.counted.value

    @property
    def length(self) -> int:
        """How many operands the head gives specs to."""
        return sum(len(items) for _part, items in self.parts)

    def items(self) -> list[cst.BaseExpression]:
        return [i for _part, items in self.parts for i in items]


def read_sized_tail(ctx: ModuleContext, value: cst.BaseExpression, at: cst.CSTNode) -> Optional[SizedTail]:
    """The spelling of `value`, or None when it is not such a list."""
    parts_and_tail = summands(value)
    tail = _tail(ctx, parts_and_tail[-1], at)
    parts = [(p, _head_items(p)) for p in parts_and_tail[:-1]]
    if tail is None or any(items is None for _p, items in parts):
        return None
    return SizedTail(tuple((p, tuple(items)) for p, items in parts), parts_and_tail[-1], *tail)


def sized_tail_text(tail: SizedTail, codes: dict[int, str], offset: int) -> str:
    """The spec list with `codes` (operand index -> new spec text) in place, every index past the
    head one the tail covers; `offset`: the operands passed before the list `tail.name` spreads."""
    out, start = head_texts(tail, codes), tail.length
    moved = sorted(k for k in codes if k >= start)
    if moved:  # fixed operands the tail covered: their own entries, the tail starting after them
        out.append("[" + ", ".join(codes.get(k) or code(tail.whole) for k in range(start, moved[-1] + 1)) + "]")
        start = moved[-1] + 1
    out.append(tail_text(code(tail.whole), tail.name, start - offset))
    return " + ".join(out)


def tail_text(whole: str, name: str, drop: int) -> str:
    """`[whole] * len(name)`, or `[whole] * (len(name) - drop)`: one whole-array spec for each
    item of the operand list `name` past its first `drop`."""
    count = f"len({name})" + (f" - {drop}" if drop else "")
    return f"[{whole}] * " + (f"({count})" if drop else count)


def head_texts(tail: SizedTail, codes: dict[int, str]) -> list[str]:
    """The head's parts: as written, or item by item where one of them gets a new spec."""
    out, start = [], 0
    for part, items in tail.parts:
        span = range(start, start + len(items))
        changed = any(k in codes for k in span)
        out.append("[" + ", ".join(codes.get(k) or code(i) for k, i in zip(span, items)) + "]" if changed else _one_line(part))
        start += len(items)
    return out


def _one_line(part: cst.BaseExpression) -> str:
    """A part as written, a list an earlier round broke one item per line joined back (the new
    text is laid out again as a whole: rewrite.text.line_width); one with comments stays."""
    text = code(part)
    items = elements(part) if isinstance(part, cst.List) and "\n" in text and "#" not in text else None
    return text if items is None or any("\n" in code(i) for i in items) else "[" + ", ".join(code(i) for i in items) + "]"


def written_lambdas(tail: SizedTail, codes: dict[int, str]) -> bool:
    """Whether a head part this rewrite writes out holds an index_map written in place (whose
    own edits, a new grid parameter, would be lost with the part's old text)."""
    start = 0
    for _part, items in tail.parts:
        if any(k in codes for k in range(start, start + len(items))):
            if any(isinstance(n, cst.Lambda) for i in items for n in walk(i)):
                return True
        start += len(items)
    return False


def _head_items(part: cst.BaseExpression) -> Optional[list[cst.BaseExpression]]:
    """The items of a list literal, or of `[a, b] * 3` / `3 * [a, b]`."""
    return elements(part) if isinstance(part, cst.List) else repetition(part)


def _tail(ctx: ModuleContext, part: cst.BaseExpression, at: cst.CSTNode) -> Optional[tuple[cst.BaseExpression, cst.Name, int]]:
    """(W, name, k) of `[W] * (len(name) - k)` or `[W] * len(name)` (k = 0)."""
    if not (isinstance(part, cst.BinaryOperation) and isinstance(part.operator, cst.Multiply) and isinstance(part.left, cst.List)):
        return None
    items = elements(part.left)
    if items is None or len(items) != 1 or not _whole_spec(ctx, items[0], at):
        return None
    count, drop = part.right, 0
    if isinstance(count, cst.BinaryOperation) and isinstance(count.operator, cst.Subtract) and isinstance(count.right, cst.Integer):
        count, drop = count.left, int(count.right.evaluated_value)
    if not is_len_of_name(count):
        return None
    return items[0], count.args[0].value, drop


def is_len_of_name(node: cst.BaseExpression) -> bool:
    """`len(name)`."""
    return (
        isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value == "len"
        and len(node.args) == 1 and not node.args[0].star and isinstance(node.args[0].value, cst.Name)
    )


def _whole_spec(ctx: ModuleContext, node: cst.BaseExpression, at: cst.CSTNode) -> bool:
    """`pl.BlockSpec()` or `pl.no_block_spec`: the whole array on any grid (no index_map to extend)."""
    value = ctx.resolve_value(node, at)
    if isinstance(value, cst.Call) and not value.args:
        return ctx.imports.is_(value.func, N.BLOCK_SPEC)
    return ctx.imports.is_(value, N.NO_BLOCK_SPEC)
