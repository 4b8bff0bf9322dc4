"""Prove `d divides n` and `p >= 0` for polynomials of sizes (analysis.loops.symbolic), from what the
code itself guarantees: arithmetic, floor division (`q = a // b` gives `q * b <= a`), `pl.cdiv`
whose division is exact, and the facts its checks state (`assert n % bs == 0`,
`if n % bs: raise ...`, `assert x.shape == (64, 128)`). A proof that fails is a refusal, never a
guess: every rule below holds for all positive integer values of the atoms.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterator, Optional

import libcst as cst

from pallas_fix.analysis.loops.poly import remove_factors
from pallas_fix.analysis.loops.symbolic import Poly, Symbols

Translate = Callable[[cst.BaseExpression], Optional[cst.BaseExpression]]


@dataclass
class Facts:
    divides: list[tuple[Poly, Poly]] = field(default_factory=list)  # (d, n): d divides n
    equal: dict[str, Poly] = field(default_factory=dict)  # atom key -> its value
    nonneg: list[Poly] = field(default_factory=list)  # p >= 0 (`assert a >= b` gives a - b)


def statements_before(ctx, at: cst.CSTNode) -> Iterator[list[cst.CSTNode]]:
    """For each scope around `at`, innermost first, its statements that run before the one
    holding `at` (all of them where none holds it): where the checks `at` may rely on stand."""
    for scope in ctx.scope_chain(at):
        stmts = ctx.body_statements(scope)
        holder = next((s for s in stmts if s is at or any(a is s for a in ctx.ancestors(at))), None)
        yield stmts[: stmts.index(holder)] if holder is not None else stmts


def read_facts(symbols: Symbols, stmts: list[cst.CSTNode], at: cst.CSTNode, facts: Facts, translate: Optional[Translate] = None) -> None:
    """Add what `assert COND` and `if COND: raise ...` statements guarantee. `translate` moves a
    condition's operands to where `at` is (a kernel's checks, read at its pallas_call)."""
    for stmt in stmts:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, cst.Assert):
                    _condition(symbols, small.test, True, at, facts, translate)
        elif isinstance(stmt, cst.If) and stmt.orelse is None and _only_raises(stmt.body):
            _condition(symbols, stmt.test, False, at, facts, translate)


def _only_raises(block: cst.BaseSuite) -> bool:
    body = block.body if isinstance(block, cst.IndentedBlock) else [block]
    stmts = [s for line in body for s in (line.body if isinstance(line, (cst.SimpleStatementLine, cst.SimpleStatementSuite)) else [line])]
    return bool(stmts) and all(isinstance(s, cst.Raise) for s in stmts)


def _condition(symbols: Symbols, test: cst.BaseExpression, holds: bool, at, facts: Facts, translate) -> None:
    """Facts from `test` being true (`holds`) or false (an `if test: raise`)."""
    if isinstance(test, cst.BooleanOperation):
        if isinstance(test.operator, cst.And) == holds:  # a and b holds / a or b fails: both
            _condition(symbols, test.left, holds, at, facts, translate)
            _condition(symbols, test.right, holds, at, facts, translate)
        return
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        _condition(symbols, test.expression, not holds, at, facts, translate)
        return
    if not holds and _modulo(test) is not None:  # `if n % bs: raise`
        _divides(symbols, _modulo(test), at, facts, translate)
        return
    if isinstance(test, cst.Comparison) and len(test.comparisons) > 1:
        if holds:  # `a == b == c` holds: each link does (a failing chain says only that one link fails)
            left = test.left
            for link in test.comparisons:
                _condition(symbols, cst.Comparison(left, [link]), True, at, facts, translate)
                left = link.comparator
        return
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        target = test.comparisons[0]
        op = type(target.operator)
        if op is (cst.Equal if holds else cst.NotEqual):
            _equality(symbols, test.left, target.comparator, at, facts, translate)
        elif op in _ORDER:
            big, small = (test.left, target.comparator) if _ORDER[op] == holds else (target.comparator, test.left)
            _at_least(symbols, big, small, at, facts, translate)


# comparison -> does it say "left >= right" when it holds (False: "right >= left" when it fails)
_ORDER = {cst.GreaterThanEqual: True, cst.GreaterThan: True, cst.LessThanEqual: False, cst.LessThan: False}


def _at_least(symbols: Symbols, big, small, at, facts: Facts, translate) -> None:
    pb, ps = _read(symbols, big, at, translate), _read(symbols, small, at, translate)
    if pb is not None and ps is not None:
        facts.nonneg.append(pb - ps)


def _modulo(expr: cst.BaseExpression) -> Optional[tuple[cst.BaseExpression, cst.BaseExpression]]:
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Modulo):
        return expr.left, expr.right
    return None


def _is_zero(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Integer) and int(expr.evaluated_value) == 0


def _equality(symbols: Symbols, left, right, at, facts: Facts, translate) -> None:
    for a, b in ((left, right), (right, left)):
        if _modulo(a) is not None and _is_zero(b):
            _divides(symbols, _modulo(a), at, facts, translate)
            return
    if isinstance(left, cst.Attribute) and left.attr.value == "shape" and isinstance(right, (cst.Tuple, cst.List)):
        for dim, el in enumerate(right.elements):  # `x.shape == (64, 128)`
            _equality(symbols, _dim_of(left, dim), el.value, at, facts, translate)
        return
    if _is_shape(left) and _is_shape(right):  # `x.shape == y.shape`: every dim either has
        for dim in range(_MAX_RANK):
            _equality(symbols, _dim_of(left, dim), _dim_of(right, dim), at, facts, translate)
        return
    pa, pb = _read(symbols, left, at, translate), _read(symbols, right, at, translate)
    if pa is None or pb is None:
        return
    for p, value in ((pa, pb), (pb, pa)):
        single = p.monomial()
        if single is not None and len(single[0]) == 1 and single[1] == 1 and not single[0][0].startswith("?"):
            facts.equal.setdefault(single[0][0], value)
            return


_MAX_RANK = 8  # dims past an array's rank never occur in a proof, so their facts are inert


def _is_shape(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Attribute) and expr.attr.value == "shape"


def _dim_of(shape: cst.BaseExpression, dim: int) -> cst.Subscript:
    return cst.Subscript(shape, [cst.SubscriptElement(cst.Index(cst.Integer(str(dim))))])


def _divides(symbols: Symbols, parts, at, facts: Facts, translate) -> None:
    n, d = (_read(symbols, e, at, translate) for e in parts)
    if n is not None and d is not None:
        facts.divides.append((d, n))


def _read(symbols: Symbols, expr: cst.BaseExpression, at, translate) -> Optional[Poly]:
    if translate is not None:
        moved = translate(expr)
        if moved is None:
            return None
        expr = moved
    return symbols.poly(expr, at)


class Prover:
    def __init__(self, symbols: Symbols, facts: Facts) -> None:
        self.symbols = symbols
        self.facts = facts

    def substitute(self, p: Poly, depth: int = 0) -> Poly:
        """`p` with the atoms the facts fix replaced by their values; quotients whose operands
        become constants are computed."""
        out = Poly()
        for m, c in p.terms:
            term = Poly.const(c)
            for key in m:
                term = term * self._atom_value(key, depth)
            out = out + term
        return out

    def _atom_value(self, key: str, depth: int) -> Poly:
        if depth > 8:
            return Poly.atom(key)
        if key in self.facts.equal:
            return self.substitute(self.facts.equal[key], depth + 1)
        atom = self.symbols.atoms.get(key)
        if atom is not None and atom.kind != "value" and atom.num is not None and atom.den is not None:
            num, den = self.substitute(atom.num, depth + 1), self.substitute(atom.den, depth + 1)
            a, b = num.constant(), den.constant()
            if a is not None and b:
                return Poly.const(a // b if atom.kind == "floor" else -(-a // b))
            if (num, den) != (atom.num, atom.den):  # `m // bm` with `assert bm == BM`: `m // BM`
                return self.symbols.quotient(atom.kind, num, den, atom.text)
        return Poly.atom(key)

    def divides(self, d: Poly, n: Poly, depth: int = 0) -> bool:
        d, n = self.substitute(d), self.substitute(n)
        if not n.terms:
            return True
        dc, nc = d.constant(), n.constant()
        if dc in (1, -1) or (dc and nc is not None and nc % dc == 0):
            return True
        if n.exact_quotient(d) is not None:
            return True
        if depth > 3:
            return False
        for fd, fn in self.facts.divides:  # d | fd | fn, and d divides what n adds to fn
            if self.divides(d, fd, depth + 1) and self.divides(d, n - self.substitute(fn), depth + 1):
                return True
        return len(n.terms) > 1 and all(self.divides(d, Poly.of({m: c}), depth + 1) for m, c in n.terms)

    def nonneg(self, p: Poly) -> bool:
        """p >= 0 for every positive value of its atoms that the facts allow: p itself, or what
        p exceeds one stated `a >= b` by, is shown non-negative term by term."""
        return any(self._termwise_nonneg(p - known) for known in [Poly(), *self.facts.nonneg])

    def _termwise_nonneg(self, p: Poly) -> bool:
        p = self.substitute(p)
        for _ in range(16):
            if all(c >= 0 for _m, c in p.terms):
                return True
            bounded = self._bound_one_term(p)
            if bounded is None:
                return False
            p = self.substitute(bounded)
        return False

    def _bound_one_term(self, p: Poly) -> Optional[Poly]:
        """Replace one negative term `-c * q * den * rest` by the smaller `-c * num * rest`, where
        `q = num // den` (q * den <= num), or `q = pl.cdiv(num, den)` with den dividing num."""
        for m, c in p.terms:
            if c >= 0:
                continue
            for key in dict.fromkeys(m):
                atom = self.symbols.atoms.get(key)
                if atom is None or atom.kind == "value" or atom.num is None or atom.den is None:
                    continue
                if atom.kind == "ceil" and not self.divides(atom.den, atom.num):
                    continue
                den = atom.den.monomial()
                if den is None or den[1] <= 0:
                    continue
                rest = remove_factors(m, (key, *den[0]))
                if rest is None:
                    continue
                scale = 1 if c % den[1] == 0 else den[1]
                others = Poly.of({k: v * scale for k, v in p.terms if k != m})
                return others + Poly.of({rest: c * scale // den[1]}) * atom.num
        return None
