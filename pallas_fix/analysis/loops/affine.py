"""Affine decomposition of slice starts: `(i + 1) * bs` -> {i: bs} + bs.

A start is block-shaped for a window of size Z when every term is an integer multiple of Z; then
the block index is the start divided by Z (`i + 1`), which is what an index_map must return.
Coefficients are products of an integer and static factors kept as source text (`bs`,
`x_ref.shape[0] // 4`), so `i * bs` matches a window `bs` whose value nobody knows statically.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Optional

import libcst as cst

Factors = tuple[str, ...]  # sorted multiset of static factor texts


@dataclass(frozen=True)
class Coeff:
    mult: int
    factors: Factors = ()

    def times(self, other: "Coeff") -> "Coeff":
        return Coeff(self.mult * other.mult, tuple(sorted(self.factors + other.factors)))

    def divide(self, size: "Coeff") -> Optional[int]:
        """self / size when that is an integer, else None."""
        if size.mult == 0:
            return None
        mine, theirs = Counter(self.factors), Counter(size.factors)
        if mine != theirs:
            return None
        if self.mult % size.mult:
            return None
        return self.mult // size.mult

    def provably_not_multiple(self, size: "Coeff") -> bool:
        """True when self cannot be an integer multiple of size whatever the factors' values."""
        mine, theirs = Counter(self.factors), Counter(size.factors)
        if not mine and not theirs:
            return self.mult % size.mult != 0 if size.mult else True
        # `i + 3` against a window `bs`: a multiple only for tiny windows nobody uses as blocks.
        return not mine and bool(theirs) and self.mult != 0


@dataclass
class Affine:
    terms: dict[str, Coeff] = field(default_factory=dict)  # atom key -> coefficient
    const: list[Coeff] = field(default_factory=list)  # sum of static terms
    atoms: dict[str, cst.BaseExpression] = field(default_factory=dict)  # key -> expression
    # static factor text -> one expression spelling it (what a symbolic block offset is written from)
    factor_exprs: dict[str, cst.BaseExpression] = field(default_factory=dict)

    def add(self, other: "Affine", sign: int = 1) -> "Affine":
        out = Affine(dict(self.terms), list(self.const), {**self.atoms, **other.atoms},
                     {**self.factor_exprs, **other.factor_exprs})
        for key, c in other.terms.items():
            c = Coeff(c.mult * sign, c.factors)
            if key in out.terms:
                prev = out.terms[key]
                if prev.factors != c.factors:
                    raise _NotAffine
                out.terms[key] = Coeff(prev.mult + c.mult, prev.factors)
            else:
                out.terms[key] = c
        out.const.extend(Coeff(c.mult * sign, c.factors) for c in other.const)
        return out

    def scale(self, c: Coeff) -> "Affine":
        return Affine(
            {k: v.times(c) for k, v in self.terms.items()},
            [v.times(c) for v in self.const],
            dict(self.atoms),
            dict(self.factor_exprs),
        )

    def is_static(self) -> bool:
        return not any(c.mult for c in self.terms.values())

    def as_coeff(self) -> Optional[Coeff]:
        """A purely static, single-term value as a coefficient."""
        if not self.is_static():
            return None
        merged = _merge_const(self.const)
        if len(merged) == 0:
            return Coeff(0)
        if len(merged) == 1:
            return merged[0]
        return None


class _NotAffine(Exception):
    pass


def _merge_const(const: list[Coeff]) -> list[Coeff]:
    by_factors: dict[Factors, int] = {}
    for c in const:
        by_factors[c.factors] = by_factors.get(c.factors, 0) + c.mult
    return [Coeff(m, f) for f, m in by_factors.items() if m]


@dataclass
class Hooks:
    """How the decomposer learns about names: supplied by the provenance environment."""

    is_dynamic: Callable[[cst.BaseExpression], bool]
    atom_key: Callable[[cst.BaseExpression], Optional[str]]  # a dynamic leaf (loop index, program_id)
    atom_bounds: Callable[[cst.BaseExpression], tuple]  # (lower, step) expressions of a loop atom
    static_int: Callable[[cst.BaseExpression], Optional[int]]
    inline: Callable[[cst.Name], Optional[cst.BaseExpression]]  # single assignment of a local name
    strip: Callable[[cst.BaseExpression], Optional[cst.BaseExpression]]  # pl.multiple_of(x, n) -> x
    code: Callable[[cst.CSTNode], str]
    # Read a quotient or remainder of a program id by a static divisor (`pid // H`, `lax.rem(pid, H)`)
    # as an atom of its own (`fold_atom`), for planners that write it in an index_map.
    folds: bool = False


def decompose(expr: cst.BaseExpression, hooks: Hooks) -> Optional[Affine]:
    try:
        return _dec(expr, hooks, 0)
    except _NotAffine:
        return None


def _dec(expr: cst.BaseExpression, h: Hooks, depth: int) -> Affine:
    if depth > 24:
        raise _NotAffine
    if isinstance(expr, cst.Integer):
        return Affine(const=[Coeff(int(expr.evaluated_value))])
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus):
        return Affine().add(_dec(expr.expression, h, depth + 1), -1)
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Plus):
        return _dec(expr.expression, h, depth + 1)
    stripped = h.strip(expr)
    if stripped is not None:
        return _dec(stripped, h, depth + 1)
    fold = fold_atom(expr, h) if h.folds else None
    if fold is not None:
        return Affine(terms={fold: Coeff(1)}, atoms={fold: expr})
    key = h.atom_key(expr)
    if key is not None:
        # A loop index is `lower + step * g` in terms of its iteration number g, the quantity a
        # grid axis provides; program_id is g itself.
        lower, step = h.atom_bounds(expr)
        step_coeff = Coeff(1)
        if step is not None:
            step_aff = _dec(step, h, depth + 1)
            step_coeff = step_aff.as_coeff()
            if step_coeff is None or not step_aff.is_static():
                raise _NotAffine
        out = Affine(terms={key: step_coeff}, atoms={key: expr})
        if lower is not None:
            low = _dec(lower, h, depth + 1)
            if not low.is_static():
                raise _NotAffine
            out = out.add(low)
        return out
    if isinstance(expr, cst.BinaryOperation):
        left = _dec(expr.left, h, depth + 1)
        right = _dec(expr.right, h, depth + 1)
        if isinstance(expr.operator, cst.Add):
            return left.add(right)
        if isinstance(expr.operator, cst.Subtract):
            return left.add(right, -1)
        if isinstance(expr.operator, cst.Multiply):
            lc, rc = left.as_coeff(), right.as_coeff()
            if rc is not None:
                return _with_factors(left.scale(rc), right)
            if lc is not None:
                return _with_factors(right.scale(lc), left)
            raise _NotAffine
        if not h.is_dynamic(expr):
            return _static_leaf(expr, h)
        raise _NotAffine
    if not h.is_dynamic(expr):
        return _static_leaf(expr, h)
    if isinstance(expr, cst.Name):
        value = h.inline(expr)
        if value is not None:
            return _dec(value, h, depth + 1)
    raise _NotAffine


def _with_factors(product: Affine, factor: Affine) -> Affine:
    product.factor_exprs.update(factor.factor_exprs)
    return product


def _static_leaf(expr: cst.BaseExpression, h: Hooks) -> Affine:
    value = h.static_int(expr)
    if value is not None:
        return Affine(const=[Coeff(value)])
    text = h.code(expr)
    return Affine(const=[Coeff(1, (text,))], factor_exprs={text: expr})


@dataclass
class BlockIndex:
    """start == sum(mult_k * atom_k) * size + offset * size."""

    atoms: dict[str, int]  # atom key -> integer multiplier
    offset: int
    atom_exprs: dict[str, cst.BaseExpression]
    # `+ mult * expr` terms of a symbolic block offset (`nb - 1 - i`: (1, nb)), kernel-side exprs.
    symbolic: tuple[tuple[int, cst.BaseExpression], ...] = ()


def block_index(start: Affine, size: Coeff) -> Optional[BlockIndex]:
    atoms: dict[str, int] = {}
    for key, coeff in start.terms.items():
        if coeff.mult == 0:
            continue
        q = coeff.divide(size)
        if q is None:
            return None
        atoms[key] = q
    offset = 0
    for c in _merge_const(start.const):
        q = c.divide(size)
        if q is None:
            return None
        offset += q
    return BlockIndex(atoms, offset, start.atoms)


def symbolic_block_index(start: Affine, size: Coeff) -> Optional[BlockIndex]:
    """The block index of a start whose constant part is, besides integer blocks, a sum of
    integer multiples of one static factor times `size` (`(nb - 1 - i) * bs`: block `nb - 1 - i`),
    the factor kept as the kernel expression that spells it; None for anything else."""
    if any(c.mult and c.divide(size) is None for c in start.terms.values()):
        return None
    plain, symbolic = [], []
    for c in _merge_const(start.const):
        if c.divide(size) is not None:
            plain.append(c)
            continue
        mine, theirs = Counter(c.factors), Counter(size.factors)
        rest = list((mine - theirs).elements())
        if theirs - mine or not size.mult or c.mult % size.mult or len(rest) != 1 or rest[0] not in start.factor_exprs:
            return None
        symbolic.append((c.mult // size.mult, start.factor_exprs[rest[0]]))
    base = block_index(Affine(start.terms, plain, start.atoms), size)
    if base is None or not symbolic:
        return None
    return BlockIndex(base.atoms, base.offset, base.atom_exprs, tuple(symbolic))


def symbolic_offset(start: Affine, size: Coeff) -> Optional[str]:
    """`nb // 2` when `start` would be a block index but for a constant term that is a symbolic
    multiple of `size` (`(nb // 2) * bs`: a loop from `nb // 2`), else None."""
    if any(c.mult and c.divide(size) is None for c in start.terms.values()):
        return None
    extra = []
    for c in _merge_const(start.const):
        if not c.mult or c.divide(size) is not None:
            continue
        mine, theirs = Counter(c.factors), Counter(size.factors)
        if theirs - mine or c.mult % size.mult:
            return None
        rest = sorted((mine - theirs).elements())
        mult = c.mult // size.mult
        parts = ([str(mult)] if mult != 1 else []) + rest
        extra.append(" * ".join(f"({f})" if " " in f and len(parts) > 1 else f for f in parts))
    return " + ".join(f"`{e}`" for e in extra) if extra else None


def provably_not_block(start: Affine, size: Coeff) -> bool:
    for coeff in start.terms.values():
        if coeff.mult and coeff.provably_not_multiple(size):
            return True
    return any(c.mult and c.provably_not_multiple(size) for c in _merge_const(start.const))


_FOLDS = ("lax.div", "lax.rem", "jnp.floor_divide", "jnp.remainder", "jnp.mod")
_FLOOR_FOLDS = ("lax.div", "jnp.floor_divide")


def fold_parts(expr: cst.BaseExpression, h: Hooks) -> Optional[tuple[cst.BaseExpression, str, cst.BaseExpression]]:
    """(dividend, "//" or "%", divisor) of `a // b`, `a % b`, `lax.div(a, b)`, `lax.rem(a, b)`,
    `jnp.floor_divide(a, b)`, `jnp.remainder(a, b)`, `jnp.mod(a, b)`; None for anything else.
    lax.div and lax.rem round toward zero: the same as `//` and `%` only where `a >= 0` and
    `b > 0`, which whoever writes the parts as `//` / `%` must know."""
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, (cst.FloorDivide, cst.Modulo)):
        return expr.left, "//" if isinstance(expr.operator, cst.FloorDivide) else "%", expr.right
    if isinstance(expr, cst.Call) and len(expr.args) == 2 and not any(a.keyword or a.star for a in expr.args):
        func = h.code(expr.func)
        if func.endswith(_FOLDS):
            return expr.args[0].value, "//" if func.endswith(_FLOOR_FOLDS) else "%", expr.args[1].value
    return None


def fold_atom(expr: cst.BaseExpression, h: Hooks) -> Optional[str]:
    """The atom key (`fold:0://:H`) of a quotient or remainder of one program id by a static
    divisor, else None. A program id is never negative, so floor and truncating division agree
    on it; the divisor's sign is the planner's to prove where it writes the index_map."""
    parts = fold_parts(expr, h)
    if parts is None:
        return None
    value, op, divisor = parts
    if h.is_dynamic(divisor):
        return None
    aff = decompose(value, h)
    if aff is None or any(c.mult for c in aff.const):
        return None
    terms = [(k, c) for k, c in aff.terms.items() if c.mult]
    if len(terms) != 1 or terms[0][1] != Coeff(1) or not terms[0][0].startswith("pid:"):
        return None
    return f"fold:{terms[0][0].split(':')[1]}:{op}:{h.code(divisor)}"


def folded_index(expr: cst.BaseExpression, h: Hooks) -> Optional[cst.BaseExpression]:
    """The first quotient or remainder of a traced value that `expr` is computed from, through
    single assignments: `i_nh // H`, `i_nh % H`, `lax.div(t, nn)`, `lax.rem(t, nn)`, where the
    divided value is a grid or loop index itself and the divisor is static (`(r * r) % n` is not
    one). Such an index splits one grid or loop index into two, which `decompose` does not model;
    windows.py names it in the refusal."""
    def splits(e: cst.BaseExpression) -> bool:
        if isinstance(e, cst.BinaryOperation) and isinstance(e.operator, (cst.FloorDivide, cst.Modulo)):
            return _splits_index(e.left, e.right, h)
        return (isinstance(e, cst.Call) and h.code(e.func).endswith(_FOLDS) and len(e.args) == 2
                and _splits_index(e.args[0].value, e.args[1].value, h))

    return _first_fold(expr, h, splits)


def shifted_fold(expr: cst.BaseExpression, h: Hooks) -> Optional[cst.BaseExpression]:
    """The first quotient or remainder that `expr` is computed from (through single assignments)
    whose dividend moves with a grid or loop index without being that index itself
    (`(pid - 1) // H`, `(2 * t) % n`): a value that may be negative, or whose parts no index_map
    written as `index // n` gives; None when there is none."""

    def shifted(e: cst.BaseExpression) -> bool:
        parts = fold_parts(e, h)
        if parts is None:
            return False
        aff = decompose(parts[0], h)
        return aff is not None and not aff.is_static() and not _splits_index(parts[0], parts[2], h)

    return _first_fold(expr, h, shifted)


def _first_fold(expr: cst.BaseExpression, h: Hooks, match, depth: int = 0) -> Optional[cst.BaseExpression]:
    """The first part of `expr` (through operators, stripped calls and single assignments) that
    `match` accepts."""
    if depth > 16:
        return None
    if match(expr):
        return expr
    if isinstance(expr, cst.BinaryOperation):
        return _first_fold(expr.left, h, match, depth + 1) or _first_fold(expr.right, h, match, depth + 1)
    if isinstance(expr, cst.UnaryOperation):
        return _first_fold(expr.expression, h, match, depth + 1)
    if isinstance(expr, cst.Call):
        stripped = h.strip(expr)
        return _first_fold(stripped, h, match, depth + 1) if stripped is not None else None
    if isinstance(expr, cst.Name) and h.is_dynamic(expr):
        value = h.inline(expr)
        return _first_fold(value, h, match, depth + 1) if isinstance(value, cst.BaseExpression) else None
    return None


def _splits_index(value: cst.BaseExpression, divisor: cst.BaseExpression, h: Hooks) -> bool:
    """`value` is one grid or loop index itself (its iteration number, counted from 0 by 1) and
    `divisor` is static: their quotient and remainder are two indices folded into one."""
    if h.is_dynamic(divisor):
        return False
    aff = decompose(value, h)
    if aff is None or any(c.mult for c in aff.const):
        return False
    terms = [c for c in aff.terms.values() if c.mult]
    return len(terms) == 1 and terms[0] == Coeff(1)
