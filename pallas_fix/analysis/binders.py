"""The names a binding binds, as syntax: what ModuleContext's scope index records of bindings
that are not a plain `name = value` (an import, a `match` capture, `except ... as`, a loop
target, a walrus, `with ... as`, unpacking), for which it follows no value; and the small
syntactic readings every layer shares (a label, a None test, a docstring, a def's sole return,
an integer literal).
Imports only libcst."""

from __future__ import annotations

from typing import Optional

import libcst as cst


def bound_names(target: cst.BaseExpression) -> set[str]:
    """The names a binding target binds (`g`, `g, *h`); none for `x[0]` or `x.a`."""
    if type(target) is cst.Name:
        return {target.value}  # type: ignore[attr-defined]
    if type(target) in (cst.Tuple, cst.List):
        return set().union(*(bound_names(e.value) for e in target.elements))  # type: ignore[attr-defined]
    return bound_names(target.value) if type(target) is cst.StarredElement else set()  # type: ignore[attr-defined]


def positional_names(fn: cst.FunctionDef | cst.Lambda) -> list[str]:
    """The names a function's positional parameters bind, in order (position-only ones first)."""
    return [p.name.value for p in (*fn.params.posonly_params, *fn.params.params)]


UNASSIGNED_BINDERS = (cst.ImportAlias, cst.MatchAs, cst.MatchStar, cst.MatchMapping, cst.ExceptHandler)


def unassigned_name(node) -> str:
    """The name an import (`import a.b` binds `a`), a capture or a handler binds; "" for none."""
    target = node.rest if type(node) is cst.MatchMapping else node.name
    target = target.name if type(target) is cst.AsName else (node.asname.name if type(node) is cst.ImportAlias and node.asname else target)
    while type(target) is cst.Attribute:
        target = target.value
    return target.value if type(target) is cst.Name else ""


def paired(target: cst.BaseExpression, value: cst.BaseExpression) -> bool:
    """`a, b = x, y`: a tuple (or list) of targets against one of as many values, nothing starred."""
    return (type(target) in (cst.Tuple, cst.List) and type(value) in (cst.Tuple, cst.List)
            and len(target.elements) == len(value.elements)  # type: ignore[attr-defined]
            and not any(type(e) is cst.StarredElement for e in (*target.elements, *value.elements)))  # type: ignore[attr-defined]


def is_label(parent: cst.CSTNode, node: cst.Name) -> bool:
    """`node` (whose parent is `parent`) names an attribute (`x.node`) or a keyword argument
    (`f(node=...)`): a label, not a use of the variable `node`."""
    return (isinstance(parent, cst.Attribute) and parent.attr is node) or (isinstance(parent, cst.Arg) and parent.keyword is node)


def none_tested(test: cst.CSTNode) -> cst.BaseExpression | None:
    """What `test` compares with None when it is `x is None` / `x is not None` (None on either
    side): `x`, the optional value; None for any other test."""
    if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1):
        return None
    target = test.comparisons[0]
    if not isinstance(target.operator, (cst.Is, cst.IsNot)):
        return None
    sides = [test.left, target.comparator]
    nones = [s for s in sides if isinstance(s, cst.Name) and s.value == "None"]
    return next((s for s in sides if s not in nones), None) if len(nones) == 1 else None


def is_docstring(node: cst.CSTNode) -> bool:
    """A statement line holding only a string: a docstring where it comes first."""
    return (
        isinstance(node, cst.SimpleStatementLine)
        and len(node.body) == 1
        and isinstance(node.body[0], cst.Expr)
        and isinstance(node.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )


def sole_return(fn: cst.FunctionDef) -> cst.BaseExpression | None:
    """The value `fn` returns when its body, past a docstring, is that one `return` and nothing
    else (`def _queries(bq): return pl.ds(pl.program_id(0) * bq, bq)`); None otherwise."""
    if not isinstance(fn.body, cst.IndentedBlock):
        return None
    stmts = list(fn.body.body)
    if stmts and is_docstring(stmts[0]):
        stmts = stmts[1:]
    if len(stmts) != 1 or not isinstance(stmts[0], cst.SimpleStatementLine) or len(stmts[0].body) != 1:
        return None
    ret = stmts[0].body[0]
    return ret.value if isinstance(ret, cst.Return) else None


def int_literal(expr: cst.BaseExpression) -> Optional[int]:
    """The value of an integer literal, negated ones too (`3`, `-1`); None for anything else."""
    if isinstance(expr, cst.Integer):
        return int(expr.evaluated_value)
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus) and isinstance(expr.expression, cst.Integer):
        return -int(expr.expression.evaluated_value)
    return None
