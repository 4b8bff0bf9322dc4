"""A reduction whose result is used inside a larger expression (R2):
`o_ref[...] = lax.fori_loop(...)`, `acc = lax.fori_loop(...).astype(jnp.bfloat16)`,
`o_ref[...] = lax.fori_loop(...) + b_ref[...]`.

The statement runs once, after the last iteration. Lifted, the loop's result lives in scratch
until the last grid step, so the statement moves into `_finalize` with the loop call replaced by
the carry loaded from scratch: the same expression over the same value. That holds when the
statement evaluates the call exactly once and unconditionally (not inside a lambda, a
comprehension, `x if c else ...` or `a and ...`), and when the rest of the statement reads no ref
the loop writes: Python evaluates operands left to right, so `o_ref[...] + fori_loop(...)` read
o_ref before the loop ran, while `_finalize` would read it after."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import libcst as cst

from pallas_fix.analysis.context import walk
from pallas_fix.core.plans import Refuse
from pallas_fix.rewrite.reduction.carry_names import names_only

_NESTED = (cst.Lambda, cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)
_CONDITIONAL = (cst.IfExp, cst.BooleanOperation)


def reduction_statement_ok(statement: cst.CSTNode, call: cst.Call) -> bool:
    """R2 can keep what this loop statement does with the result: bind it to (possibly nested)
    names, or use it inside a larger expression (`holds_loop_result`)."""
    small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 else None
    if isinstance(small, cst.Assign) and small.value is call and len(small.targets) == 1 and names_only(small.targets[0].target):
        return True
    return holds_loop_result(statement, call)


def holds_loop_result(statement: cst.CSTNode, call: cst.Call) -> bool:
    """The statement is one simple statement that evaluates `call` once, unconditionally, as
    part of a larger expression or into a place that is not a name (`o_ref[...] = fori_loop(...)`)."""
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return False
    small = statement.body[0]
    if isinstance(small, cst.Assign):
        value_ok = len(small.targets) == 1 and _inside(call, small.value)
    elif isinstance(small, (cst.AugAssign, cst.AnnAssign, cst.Expr)):
        value_ok = small.value is not None and _inside(call, small.value)
    else:
        return False
    if not value_ok or (isinstance(small, cst.Expr) and small.value is call):
        return False
    if isinstance(small, cst.Assign) and small.value is call and names_only(small.targets[0].target):
        return False  # the plain forms (`acc = fori_loop(...)`, `m, l = ...`) bind the result to names
    return not any(isinstance(n, _NESTED + _CONDITIONAL) and _inside(call, n) for n in walk(small))


def _inside(node: cst.CSTNode, root: cst.CSTNode) -> bool:
    return any(n is node for n in walk(root))


@dataclass(frozen=True)
class EmbeddedResult:
    statement: cst.SimpleStatementLine
    call_index: int  # the loop call's position among the statement's calls (pre-order)
    rest_names: frozenset[str]  # what the statement mentions outside the loop call

    def without_call(self) -> cst.SimpleStatementLine:
        """The statement with the loop call blanked out: what it reads besides the loop."""
        return self.finalize_form(self.statement, "_")

    def finalize_form(self, updated: cst.SimpleStatementLine, value_text: str) -> cst.SimpleStatementLine:
        """The (edited) statement with the loop call replaced by the carry's value."""
        return updated.visit(_ReplaceNthCall(self.call_index, cst.parse_expression(value_text)))  # type: ignore[return-value]


def embedded_result(region, written_refs: set[str]) -> Optional[EmbeddedResult]:
    """The statement that uses the loop's result inside a larger expression; None for the plain
    forms. `written_refs`: the refs the loop body writes."""
    statement, call = region.statement, region.loop.call
    if not holds_loop_result(statement, call):
        return None
    if not region.loop.carries:
        raise Refuse("the loop carries nothing, but its result is used")
    calls = [n for n in walk(statement) if isinstance(n, cst.Call)]
    rest = _variables_outside(statement, call)
    clash = sorted(rest & written_refs)
    if clash:
        raise Refuse(
            f"the statement that uses the loop's result also reads `{clash[0]}`, which the loop writes; after the lift "
            "it would read it after the last step instead of before the loop: assign the loop's result to a name first"
        )
    return EmbeddedResult(statement, next(i for i, n in enumerate(calls) if n is call), rest)


def _variables_outside(statement: cst.CSTNode, call: cst.Call) -> frozenset[str]:
    """The variable names the statement mentions outside `call` (not attribute or keyword names)."""
    skip = {id(n) for n in walk(call)}
    for n in walk(statement):
        if isinstance(n, cst.Attribute):
            skip.add(id(n.attr))
        elif isinstance(n, cst.Arg) and n.keyword is not None:
            skip.add(id(n.keyword))
    return frozenset(n.value for n in walk(statement) if isinstance(n, cst.Name) and id(n) not in skip)


class _ReplaceNthCall(cst.CSTTransformer):
    def __init__(self, index: int, replacement: cst.BaseExpression) -> None:
        self.index = index
        self.seen = -1
        self.replacement = replacement
        self.target: Optional[cst.Call] = None

    def visit_Call(self, node: cst.Call) -> bool:
        self.seen += 1
        if self.seen == self.index:
            self.target = node
        return True

    def leave_Subscript(self, original: cst.Subscript, updated: cst.Subscript) -> cst.BaseExpression:
        """`fori_loop(...)[0]` over a rebuilt tuple is its first leaf: `total_ref[...]`."""
        value, index = updated.value, updated.slice[0].slice if len(updated.slice) == 1 else None
        if original.value is not self.target or not isinstance(value, (cst.Tuple, cst.List)) or value.lpar[1:]:
            return updated
        if not (isinstance(index, cst.Index) and isinstance(index.value, cst.Integer)):
            return updated
        n = int(index.value.evaluated_value)
        return _atom(value.elements[n].value) if n < len(value.elements) else updated

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        if original is not self.target:
            return updated
        value = _atom(self.replacement)
        return value.with_changes(lpar=[*updated.lpar, *value.lpar], rpar=[*value.rpar, *updated.rpar])


def _atom(value: cst.BaseExpression) -> cst.BaseExpression:
    """`value`, parenthesised unless it already binds tighter than any operator around it."""
    if isinstance(value, (cst.Name, cst.Subscript, cst.Attribute, cst.Call, cst.Tuple, cst.List, cst.Dict)) or value.lpar:
        return value
    return value.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])  # `pl.program_id(0) + 1`
