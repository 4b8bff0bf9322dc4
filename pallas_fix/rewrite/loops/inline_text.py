"""The text pieces of inlining a helper (rewrite.loops.helper_inline): parameter reads renamed,
the docstring as comment lines, the statement that hands the return value to the call's targets,
and the call's statement replaced by the inlined body with its comments kept.

May import core and rewrite.text."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from pallas_fix.analysis.context import walk
from pallas_fix.core.plans import Refuse
from pallas_fix.rewrite.text.syntax import code, variable_names


class Renamer(cst.CSTTransformer):
    def __init__(self, renames: dict[int, str]) -> None:
        self.renames = renames

    def on_leave(self, original_node, updated_node):
        new = self.renames.get(id(original_node))
        return updated_node.with_changes(value=new) if new is not None and isinstance(updated_node, cst.Name) else updated_node


def docstring(stmts: list[cst.BaseStatement]) -> tuple[list, list[cst.BaseStatement]]:
    """(the docstring as comment lines, the statements after it)."""
    first = stmts[0] if stmts else None
    if not (isinstance(first, cst.SimpleStatementLine) and isinstance(first.body[0], cst.Expr)
            and isinstance(first.body[0].value, cst.SimpleString)):
        return [], stmts
    text = str(first.body[0].value.evaluated_value).strip()
    return [cst.EmptyLine(comment=cst.Comment(f"# {l.strip()}".rstrip())) for l in text.splitlines()], stmts[1:]


def trimmed(lines) -> list:
    lines = list(lines)
    while lines and lines[0].comment is None:
        lines.pop(0)
    return lines


def result_statements(statement: cst.SimpleStatementLine, value: Optional[cst.BaseExpression], helper: cst.FunctionDef) -> list:
    """The statement that hands the return value to the call's targets (none for a bare call
    whose value is plain names)."""
    small = statement.body[0]
    if isinstance(small, cst.Expr):  # the value is dropped: plain names need not be read
        plain = value is None or isinstance(value, cst.Name) or (
            isinstance(value, cst.Tuple) and all(isinstance(e.value, cst.Name) for e in value.elements))
        return [] if plain else [cst.SimpleStatementLine([cst.Expr(value)])]
    if value is None:
        raise Refuse(f"the kernel assigns what `{helper.name.value}` returns, and it returns nothing")
    if isinstance(small, cst.AnnAssign):
        return [cst.SimpleStatementLine([small.with_changes(value=value)])]
    pairs = _paired(small, value)
    if pairs is None:
        return [cst.SimpleStatementLine([small.with_changes(value=value)])]
    if not pairs:
        return []
    # One assignment per pair (`in_specs = (q_spec, k_spec)`, `out_specs = o_spec`): no value
    # reads a target (`_paired`), so the order of the assignments does not matter.
    return [cst.parse_statement(f"{code(t)} = {code(v)}\n") for t, v in pairs]


def _paired(small: cst.Assign, value: cst.BaseExpression) -> Optional[list]:
    """`a, _, _ = x, m, l` as the pairs it keeps, `(a, x)`: a value dropped into `_` goes where it
    is a plain name (reading it does nothing), and so does `acc = acc`. None where the two sides
    do not pair up."""
    if len(small.targets) != 1:
        return None
    target = small.targets[0].target
    if not (isinstance(target, cst.Tuple) and isinstance(value, cst.Tuple)) or len(target.elements) != len(value.elements):
        return None
    if any(isinstance(e, cst.StarredElement) for e in [*target.elements, *value.elements]):
        return None
    if not all(isinstance(e.value, cst.Name) for e in target.elements):
        return None  # a store into a ref or attribute: split, a later value could read what it wrote
    pairs = [(t.value, v.value) for t, v in zip(target.elements, value.elements)]
    kept = [(t, v) for t, v in pairs if not (isinstance(t, cst.Name) and isinstance(v, cst.Name) and t.value in ("_", v.value))]
    targets = [code(t) for t, _ in kept]
    if len(set(targets)) != len(targets) or any(variable_names(v) & set(targets) for _, v in kept):
        return None  # a target a value reads: the tuple assignment reads every value first
    return kept


def splice(statement: cst.SimpleStatementLine, stmts: list[cst.BaseStatement]):
    """The call's statement replaced by `stmts`, its comments above the first and its trailing
    comment on the last."""
    if not stmts:
        return lambda _n: cst.RemovalSentinel.REMOVE

    def edit(updated):
        out = list(stmts)
        out[0] = out[0].with_changes(leading_lines=[*updated.leading_lines, *out[0].leading_lines])
        if updated.trailing_whitespace.comment is not None and isinstance(out[-1], cst.SimpleStatementLine):
            out[-1] = out[-1].with_changes(trailing_whitespace=updated.trailing_whitespace)
        return cst.FlattenSentinel(out)

    return edit
