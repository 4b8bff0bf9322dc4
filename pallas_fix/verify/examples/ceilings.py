"""Ceiling quotients spelled by hand, made visible to the worker's ragged variants.

The worker derives a ragged variant of an example (verify.worker.ragged) from the Python-int
calls of `pl.cdiv` the original makes while traced: a size its divisor divides is made one it
does not. A count written `(n + b - 1) // b`, `-(-n // b)` or `(n - 1) // b + 1` is the same
quotient (analysis.loops.symbolic reads it as `pl.cdiv`, and a lift treats it so), but plain
integer arithmetic that nothing records: a lift verified only where b divides n would be
accepted where its `pl.cdiv` twin is rejected on a ragged variant.

`observed_source` rewrites each such quotient into a call that hands its two operands to
`pl.cdiv` (looked up when it runs, so the worker's recording sees it) and returns the value the
original expression computes, whatever the operands are; the worker traces that source only to
choose the variants' sizes, never for a verdict. Only syntax is matched: the divisor must be
spelled the same in both places, or be the integer one more than the added constant.
"""

from __future__ import annotations

import ast
from typing import Optional

# `(lambda a, b: (<pl.cdiv recorded when both are Python ints>, <the original expression>)[1])(A, B)`
_PALLAS = "__import__('jax.experimental.pallas', fromlist=['cdiv'])"
_CALL = ("(lambda _pf_a, _pf_b: ({pallas}.cdiv(_pf_a, _pf_b) if type(_pf_a) is int and type(_pf_b) is int else None,"
         " {value})[1])")
_TEMPLATES = {
    "round_up": "(_pf_a + _pf_b - 1) // _pf_b",
    "round_up_literal": "(_pf_a + {added}) // _pf_b",
    "negated": "-(-_pf_a // _pf_b)",
    "minus_one": "(_pf_a - 1) // _pf_b + 1",
}


def observed_source(source: str) -> Optional[str]:
    """`source` with every hand-spelled ceiling quotient recorded as a `pl.cdiv` call; None when
    it has none (or does not parse)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    marker = _Recorded()
    tree = ast.fix_missing_locations(marker.visit(tree))
    return ast.unparse(tree) if marker.found else None


class _Recorded(ast.NodeTransformer):
    def __init__(self) -> None:
        self.found = 0

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        return self._replaced(self.generic_visit(node))

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.AST:
        return self._replaced(self.generic_visit(node))

    def _replaced(self, node: ast.AST) -> ast.AST:
        matched = ceiling_parts(node)
        if matched is None:
            return node
        form, num, den, added = matched
        self.found += 1
        value = _TEMPLATES[form].format(added=added)
        call = ast.parse(_CALL.format(pallas=_PALLAS, value=value), mode="eval").body
        return ast.copy_location(ast.Call(func=call, args=[num, den], keywords=[]), node)


def ceiling_parts(node: ast.AST) -> Optional[tuple[str, ast.expr, ast.expr, int]]:
    """(form, a, b, added constant) when `node` is `(a + b - 1) // b`, `(a + c) // (c + 1)`,
    `-(-a // b)` or `(a - 1) // b + 1`."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = node.operand
        if (isinstance(inner, ast.BinOp) and isinstance(inner.op, ast.FloorDiv) and isinstance(inner.left, ast.UnaryOp)
                and isinstance(inner.left.op, ast.USub)):
            return "negated", inner.left.operand, inner.right, 0
        return None
    if not isinstance(node, ast.BinOp):
        return None
    if isinstance(node.op, ast.Add) and _is_int(node.right, 1) and _floor_div(node.left):
        left = node.left.left
        if isinstance(left, ast.BinOp) and isinstance(left.op, ast.Sub) and _is_int(left.right, 1):
            return "minus_one", left.left, node.left.right, 0
        return None
    if not _floor_div(node) or not isinstance(node.left, ast.BinOp):
        return None
    num, den = node.left, node.right
    if (isinstance(num.op, ast.Sub) and _is_int(num.right, 1) and isinstance(num.left, ast.BinOp)
            and isinstance(num.left.op, ast.Add) and ast.dump(num.left.right) == ast.dump(den)):
        return "round_up", num.left.left, den, 0
    added = num.right.value if isinstance(num.op, ast.Add) and _is_int(num.right) else None
    if added is not None and added >= 1 and _is_int(den, added + 1):
        return "round_up_literal", num.left, den, added
    return None


def _floor_div(node: ast.AST) -> bool:
    return isinstance(node, ast.BinOp) and isinstance(node.op, ast.FloorDiv)


def _is_int(node: ast.AST, value: Optional[int] = None) -> bool:
    return (isinstance(node, ast.Constant) and type(node.value) is int
            and (value is None or node.value == value))
