"""Expressions written in one place's names, rebuilt in another's, without losing where they stand.

`B` inside `def _out(r): B, T = r.shape; ...` means `r.shape[0]` of the argument a call passes
for `r`; `x.shape` inside `tuple(S(x.shape, x.dtype) for x in (a, b))` means `a.shape`, then
`b.shape`. `substitute` rebuilds an expression with such names replaced, keeping every part it
does not change the very node of the source (the argument `a` at the call, the module constant
`CHUNK`), so the readers that ask whether a name means at the pallas_call what it meant where it
stands (analysis.same_value) still can: only the nodes around them are new (`grafted_ids`).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional

import libcst as cst

# What a replacement may stand in without parentheses: it binds tighter than any operator.
_ATOMS = (cst.Name, cst.Attribute, cst.Subscript, cst.Call, cst.Integer, cst.Float, cst.SimpleString,
          cst.Tuple, cst.List)


def substitute(node: cst.CSTNode, lookup: Callable[[cst.Name], Optional[cst.BaseExpression]]) -> cst.CSTNode:
    """`node` with each name it reads replaced by `lookup(name)` (None: kept). Attribute and
    keyword names are not reads. Unchanged subtrees are the same objects as before."""
    if isinstance(node, cst.Name):
        found = lookup(node)
        return node if found is None else found
    changes = {}
    for f in dataclasses.fields(node):
        if _not_a_read(node, f.name):
            continue
        value = getattr(node, f.name)
        if isinstance(value, cst.CSTNode):
            new = _within(node, value, substitute(value, lookup))
            if new is not value:
                changes[f.name] = new
        elif isinstance(value, (list, tuple)) and value and all(isinstance(v, cst.CSTNode) for v in value):
            items = [_within(node, v, substitute(v, lookup)) for v in value]
            if any(a is not b for a, b in zip(items, value)):
                changes[f.name] = type(value)(items)
    return node.with_changes(**changes) if changes else node


# Where a replaced name stands alone (an item, an argument, an index): no parentheses needed.
_LOOSE = (cst.Element, cst.Arg, cst.Index, cst.Return, cst.Assign, cst.AssignTarget, cst.Expr, cst.StarredElement)


def _within(parent: cst.CSTNode, old: cst.CSTNode, new: cst.CSTNode) -> cst.CSTNode:
    """`new`, the replacement of the name `old` inside `parent`, parenthesised where an operator binds it."""
    if new is old or not isinstance(old, cst.Name) or isinstance(parent, _LOOSE):
        return new
    return grouped(new)  # type: ignore[arg-type]


def _not_a_read(node: cst.CSTNode, field_name: str) -> bool:
    return ((isinstance(node, cst.Attribute) and field_name == "attr")
            or (isinstance(node, cst.Arg) and field_name == "keyword"))


def grouped(expr: cst.BaseExpression) -> cst.BaseExpression:
    """`expr` as it may stand inside a larger expression: parenthesised unless an atom."""
    if isinstance(expr, _ATOMS) or expr.lpar:
        return expr
    return expr.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


def item(expr: cst.BaseExpression, index: int) -> cst.BaseExpression:
    """`expr[index]` (a dim of `x.shape`, the item of an unpacked tuple)."""
    at = cst.Integer(str(index)) if index >= 0 else cst.UnaryOperation(cst.Minus(), cst.Integer(str(-index)))
    return cst.Subscript(value=grouped(expr), slice=[cst.SubscriptElement(cst.Index(at))])


def grafted_ids(expr: cst.CSTNode, in_tree: Callable[[cst.CSTNode], bool]) -> set[int]:
    """The ids of the nodes of `expr` that a substitution built (not `in_tree`), down to the
    source's own nodes."""
    if in_tree(expr):
        return set()
    out = {id(expr)}
    for kid in _read_kids(expr):
        out |= grafted_ids(kid, in_tree)
    return out


def source_parts(expr: cst.CSTNode, in_tree: Callable[[cst.CSTNode], bool]) -> list[cst.CSTNode]:
    """The outermost nodes of the source inside a grafted `expr` (what its value reads)."""
    if in_tree(expr):
        return [expr]
    return [part for kid in _read_kids(expr) for part in source_parts(kid, in_tree)]


def _read_kids(node: cst.CSTNode) -> list[cst.CSTNode]:
    skip = {id(node.attr)} if isinstance(node, cst.Attribute) else set()
    if isinstance(node, cst.Arg) and node.keyword is not None:
        skip.add(id(node.keyword))
    return [k for k in node.children if id(k) not in skip]
