"""Checks in the wrapper that the file's own example breaks.

`assert block_rows == BLOCK_ROWS` proves blocks inside the array only for the calls that pass
it. When a `# pallas-fix: example` call gives the wrapper values that make such an equality
false (`block_rows=8` against `BLOCK_ROWS = 16`), the original raises on the very call the
rewrite would be verified with, so the check proves nothing pallas-fix can confirm: the bounds
proofs leave it out (rewrite.proofs.bounds) and the refusal names it.
"""

from __future__ import annotations

from typing import Optional

import libcst as cst

from pallas_fix.analysis.context import ModuleContext
from pallas_fix.analysis.loops.symbolic import Poly, Symbols
from pallas_fix.core.directives import extract_directives
from pallas_fix.core.examples import ArgSpec, ExampleSyntaxError, parse_example

Values = dict[str, int]  # atom key -> its value in one example call


def broken_checks(symbols: Symbols, stmts: list[cst.CSTNode], at: cst.CSTNode) -> dict[int, str]:
    """id of each `assert A == B` statement among `stmts` that some example call of the function
    holding `at` makes false -> how (`block_rows == BLOCK_ROWS` is 8 == 16 in `f(..., block_rows=8)`)."""
    ctx = symbols.ctx
    examples = example_values(ctx, at)
    out: dict[int, str] = {}
    for stmt in stmts:
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for small in stmt.body:
            if not isinstance(small, cst.Assert):
                continue
            for left, right in _equalities(small.test):
                for call, values in examples:
                    a, b = (evaluate(symbols, symbols.poly(e, at), values) for e in (left, right))
                    if a is not None and b is not None and a != b:
                        out.setdefault(id(stmt), f"`{ctx.code(left)} == {ctx.code(right)}` is {a} == {b} in the example `{call}`")
    return out


def _equalities(test: cst.BaseExpression) -> list[tuple[cst.BaseExpression, cst.BaseExpression]]:
    """The `A == B` an assert's test states (through `and`)."""
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
        return _equalities(test.left) + _equalities(test.right)
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1 and isinstance(test.comparisons[0].operator, cst.Equal):
        return [(test.left, test.comparisons[0].comparator)]
    return []


def example_values(ctx: ModuleContext, at: cst.CSTNode) -> list[tuple[str, Values]]:
    """Per example call of the function holding `at`: its text, and the values it gives that
    function's integer parameters and its array parameters' dims, keyed as analysis.loops.symbolic
    keys them."""
    fn = ctx.enclosing_function(at)
    if fn is None or "pallas-fix: example" not in ctx.source:
        return []
    positional = [*fn.params.posonly_params, *fn.params.params]
    params = [*positional, *fn.params.kwonly_params]
    out = []
    for d in extract_directives(ctx.source):
        if d.kind != "example":
            continue
        try:
            ex = parse_example(d.text)
        except (ExampleSyntaxError, ValueError):
            continue
        if ex.entry != fn.name.value:
            continue
        values: Values = {}
        for position, p in enumerate(params):
            name = p.name.value
            given = ex.kwargs.get(name, ex.args[position] if position < min(len(ex.args), len(positional)) else None)
            value = given if given is not None else _literal_default(p)
            _bind(values, f"{name}@{id(fn)}", value)
        out.append((d.text.strip(), values))
    return out


def _literal_default(param: cst.Param) -> Optional[int]:
    default = param.default
    return int(default.evaluated_value) if isinstance(default, cst.Integer) else None


def _bind(values: Values, key: str, value: object) -> None:
    if isinstance(value, bool):
        return
    if isinstance(value, int):
        values[key] = value
    elif isinstance(value, ArgSpec):
        for dim, size in enumerate(value.shape):
            values[f"{key}.shape[{dim}]"] = size


def evaluate(symbols: Symbols, p: Poly, values: Values, depth: int = 0) -> Optional[int]:
    """The value of `p` in one example, or None when some atom's value is not known."""
    total = 0
    for monomial, coeff in p.terms:
        term = coeff
        for key in monomial:
            value = _atom_value(symbols, key, values, depth)
            if value is None:
                return None
            term *= value
        total += term
    return total


def _atom_value(symbols: Symbols, key: str, values: Values, depth: int) -> Optional[int]:
    if key in values:
        return values[key]
    atom = symbols.atoms.get(key)
    if atom is None or atom.kind == "value" or atom.num is None or atom.den is None or depth > 8:
        return None
    num, den = evaluate(symbols, atom.num, values, depth + 1), evaluate(symbols, atom.den, values, depth + 1)
    if num is None or not den:
        return None
    return num // den if atom.kind == "floor" else -(-num // den)
