"""Small syntax helpers shared by the call-site readers and writers: source text of a node,
literal tuple elements, operand parenthesising, `x.shape[d]` nodes."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from pallas_fix.analysis.context import walk


def code(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)


def elements(expr: cst.BaseExpression) -> Optional[list[cst.BaseExpression]]:
    """The items of a literal tuple or list without starred items, else None."""
    if isinstance(expr, (cst.Tuple, cst.List)):
        if any(isinstance(e, cst.StarredElement) for e in expr.elements):
            return None
        return [e.value for e in expr.elements]
    return None


def is_zero(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Integer) and int(expr.evaluated_value) == 0


def is_none(expr: Optional[cst.BaseExpression]) -> bool:
    """A literal `None` (a squeezed block dim, an absent block shape)."""
    return isinstance(expr, cst.Name) and expr.value == "None"


def is_plain_name(expr: Optional[cst.BaseExpression]) -> bool:
    if isinstance(expr, cst.Name):
        return True
    if isinstance(expr, cst.Attribute):
        return is_plain_name(expr.value)
    return False


def shape_index(arr: cst.BaseExpression, dim: int) -> cst.BaseExpression:
    """`arr.shape[dim]`."""
    if dim < 0:
        return cst.parse_expression(f"{code(arr)}.shape[{dim}]")
    return cst.Subscript(
        value=cst.Attribute(value=arr, attr=cst.Name("shape")),
        slice=[cst.SubscriptElement(cst.Index(cst.Integer(str(dim))))],
    )


def names_in(node: cst.CSTNode) -> set[str]:
    return {n.value for n in walk(node) if isinstance(n, cst.Name)}


def variable_names(node: cst.CSTNode) -> set[str]:
    """The variable names `node` mentions anywhere (nested functions included): not attribute
    names or keyword-argument names."""
    out: set[str] = set()
    skip: set[int] = set()
    for n in walk(node):
        if isinstance(n, cst.Attribute):
            skip.add(id(n.attr))
        elif isinstance(n, cst.Arg) and n.keyword is not None:
            skip.add(id(n.keyword))
        elif isinstance(n, cst.Name) and id(n) not in skip:
            out.add(n.value)
    return out


# Operands that never need parentheses where an expression is substituted.
_ATOMS = (cst.Name, cst.Attribute, cst.Call, cst.Subscript, cst.Integer, cst.Float, cst.SimpleString)


def parenthesized(expr: cst.BaseExpression) -> cst.BaseExpression:
    """`expr` as an operand: as it is when it is an atom or already in parentheses, else wrapped
    (`m + 1` where it replaces a name in `2 * n`)."""
    if expr.lpar or isinstance(expr, _ATOMS):
        return expr
    return expr.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


def paren_text(text: str) -> str:
    """`text` as an operand: atoms (`bs`, `x.shape[0]`) and text already in one pair of
    parentheses (`(bm // 2)`) as they are, anything else in parentheses."""
    simple = text.replace("_", "").replace(".", "").replace("[", "").replace("]", "")
    return text if simple.isalnum() or _grouped(text) else f"({text})"


def _grouped(text: str) -> bool:
    """`(a + b)`, not `(a) + (b)`: the first parenthesis closes at the end."""
    depth = 0
    for k, ch in enumerate(text):
        depth += (ch == "(") - (ch == ")")
        if depth == 0:
            return k == len(text) - 1 and k > 0
    return False


def uncommented(comma: cst.Comma) -> cst.Comma:
    """`comma` without the comment that ends its line (`x_ref,  # [bm, bk]`): the separator to
    copy after a new parameter or argument, in the same one-per-line or inline style."""
    ws = comma.whitespace_after
    if isinstance(ws, cst.ParenthesizedWhitespace) and ws.first_line.comment is not None:
        return comma.with_changes(whitespace_after=ws.with_changes(first_line=cst.TrailingWhitespace()))
    return comma


def followed_comma(comma: cst.Comma, sep: cst.Comma) -> cst.Comma:
    """The comma of what was last once new items follow it: `sep`'s line break and indent
    (those of the list's first comma), with the comment `comma` carried."""
    own, ws = comma.whitespace_after, sep.whitespace_after
    if isinstance(own, cst.ParenthesizedWhitespace) and own.first_line.comment is not None:
        ws = ws.with_changes(first_line=own.first_line) if isinstance(ws, cst.ParenthesizedWhitespace) else own
    return comma.with_changes(whitespace_after=ws)


def summands(expr: cst.BaseExpression) -> list[cst.BaseExpression]:
    """`a + b + c` (left-nested, unparenthesised) as [a, b, c]; anything else as [expr]."""
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Add) and not expr.lpar:
        return summands(expr.left) + [expr.right]
    return [expr]
