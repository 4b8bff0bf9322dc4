"""Polynomials with integer coefficients over named atoms (analysis.loops.symbolic says what the
atoms are), and the readings of a floor quotient that depend on its polynomials alone.

Every atom is taken to be a positive integer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

Monomial = tuple[str, ...]  # sorted atom keys, with repeats


@dataclass(frozen=True)
class Poly:
    terms: tuple[tuple[Monomial, int], ...] = ()  # sorted, no zero coefficients

    @staticmethod
    def of(terms: dict[Monomial, int]) -> "Poly":
        return Poly(tuple(sorted((m, c) for m, c in terms.items() if c)))

    @staticmethod
    def const(value: int) -> "Poly":
        return Poly.of({(): value})

    @staticmethod
    def atom(key: str) -> "Poly":
        return Poly.of({(key,): 1})

    def as_dict(self) -> dict[Monomial, int]:
        return dict(self.terms)

    def __add__(self, other: "Poly") -> "Poly":
        out = self.as_dict()
        for m, c in other.terms:
            out[m] = out.get(m, 0) + c
        return Poly.of(out)

    def __sub__(self, other: "Poly") -> "Poly":
        return self + other.scale(-1)

    def __mul__(self, other: "Poly") -> "Poly":
        out: dict[Monomial, int] = {}
        for m1, c1 in self.terms:
            for m2, c2 in other.terms:
                m = tuple(sorted(m1 + m2))
                out[m] = out.get(m, 0) + c1 * c2
        return Poly.of(out)

    def scale(self, k: int) -> "Poly":
        return Poly.of({m: c * k for m, c in self.terms})

    def constant(self) -> Optional[int]:
        """The value when the polynomial has no atoms."""
        if not self.terms:
            return 0
        if len(self.terms) == 1 and self.terms[0][0] == ():
            return self.terms[0][1]
        return None

    def monomial(self) -> Optional[tuple[Monomial, int]]:
        """(atoms, coefficient) when the polynomial is a single term."""
        return self.terms[0] if len(self.terms) == 1 else None

    def exact_quotient(self, den: "Poly") -> Optional["Poly"]:
        """self / den when `den` is one term dividing every term of self exactly."""
        single = den.monomial()
        if single is None:
            return None
        out: dict[Monomial, int] = {}
        for m, c in self.terms:
            rest = remove_factors(m, single[0])
            if rest is None or c % single[1]:
                return None
            out[rest] = c // single[1]
        return Poly.of(out)


def positive(p: Poly) -> bool:
    """Every term has a positive coefficient: the value is positive, atoms being positive."""
    return bool(p.terms) and all(c > 0 for _m, c in p.terms)


def rounded_up(num: Poly, den: Poly, text: str) -> tuple[str, Poly, int, str]:
    """`num // den` (den > 0) as the ceiling quotient the code means, (kind, num, shift, text) with
    `num // den == quotient - shift`: `(a + b - 1) // b` is `pl.cdiv(a, b)`, and `(a - 1) // b` is
    `pl.cdiv(a, b) - 1` (so `(a - 1) // b + 1` is `pl.cdiv(a, b)`) where `a` is positive, as the
    atom its ceiling becomes is taken to be. Both hold for every integer `a` and positive `b`; a
    grid, a trip count and a bound then read one quotient however each is spelled. Otherwise the
    floor as it is."""
    rest = num - den + Poly.const(1)
    if len(rest.terms) < len(num.terms):
        return "ceil", rest, 0, text
    after = num + Poly.const(1)
    if len(after.terms) < len(num.terms) and positive(after):
        return "ceil", after, 1, f"{text} + 1"
    return "floor", num, 0, text


def negative(p: Poly) -> bool:
    """Every term has a negative coefficient: the value is negative, atoms being positive."""
    return bool(p.terms) and all(c < 0 for _m, c in p.terms)


def remove_factors(m: Monomial, factors: Monomial) -> Optional[Monomial]:
    """`m` without one occurrence of each of `factors`; None when some factor is missing."""
    rest = list(m)
    for f in factors:
        if f not in rest:
            return None
        rest.remove(f)
    return tuple(rest)
