"""A ceiling quotient spelled by hand, `(n + b - 1) // b`, `-(-n // b)` or `(n - 1) // b + 1`, is
`pl.cdiv(n, b)` to the symbolic layer (analysis.loops.symbolic.Symbols.quotient): the same atom,
so grids, trip counts and the bounds proofs read one quotient, and a kernel behaves as its
`pl.cdiv` twin does. Golden pairs: program_id_blocks/pid_ragged_round_up_*,
pid_ragged_minus_one_relu, refuse_ragged_round_up_grid; lift_loop/ragged_*_trip_unsafe."""

from __future__ import annotations

import itertools

import libcst as cst
import pytest

from pallas_fix.analysis.context import ModuleContext, walk
from pallas_fix.analysis.loops.symbolic import Poly, Symbols
from pallas_fix.engine import analyze_source, fix_source
from pallas_fix.verify.examples.ceilings import observed_source
from pallas_fix.verify.examples.sources import collect_examples
from pallas_fix.verify.runner import verify_sources

from kernel_loading import FIXTURES

_SOURCE = """\
from jax.experimental import pallas as pl

BS = 16


def f(n, m, bs, k):
    d = k - 2
    neg = -4
    return {exprs}
"""


def _read(*texts: str) -> tuple[Symbols, list[Poly]]:
    """The polynomials of `texts`, read in one function where `n`, `m`, `bs`, `k` are parameters
    (positive atoms), `BS` a module constant 16, `d = k - 2` (not known positive), `neg = -4`."""
    ctx = ModuleContext(_SOURCE.format(exprs=", ".join(texts) + ","))
    symbols = Symbols(ctx)
    ret = next(node for node in walk(ctx.module) if isinstance(node, cst.Return)).value
    return symbols, [symbols.poly(el.value, el.value) for el in ret.elements]


@pytest.mark.parametrize("cdiv, hand", [
    ("pl.cdiv(n, BS)", "(n + BS - 1) // BS"),
    ("pl.cdiv(n, BS)", "(n + 15) // 16"),  # a literal divisor
    ("pl.cdiv(n, BS)", "-(-n // BS)"),
    ("pl.cdiv(n, BS)", "(n - 1) // BS + 1"),
    ("pl.cdiv(n, 16)", "(n - 1) // 16 + 1"),
    ("pl.cdiv(n, bs)", "(n + bs - 1) // bs"),  # a divisor the prover takes as positive: a size
    ("pl.cdiv(n, bs)", "-(-n // bs)"),
    ("pl.cdiv(n, bs)", "(n - 1) // bs + 1"),
    ("pl.cdiv(n * m, bs)", "(n * m + bs - 1) // bs"),
    ("pl.cdiv(n + m, BS)", "(n + m - 1) // BS + 1"),
    ("2 * pl.cdiv(n, BS)", "2 * ((n + BS - 1) // BS)"),
])
def test_a_hand_spelled_ceiling_is_the_cdiv_atom(cdiv: str, hand: str):
    symbols, (want, got) = _read(cdiv, hand)
    assert got == want, (symbols.text(got), symbols.text(want))
    assert _ceilings(symbols, got), symbols.text(got)


@pytest.mark.parametrize("cdiv, other", [
    ("pl.cdiv(n, BS)", "(n + BS - 2) // BS"),  # cdiv(n - 1, BS)
    ("pl.cdiv(n, BS)", "(n + BS) // BS"),  # n // BS + 1
    ("pl.cdiv(n, bs)", "(n + bs - 2) // bs"),
    ("pl.cdiv(n, bs)", "(n + bs) // bs"),
    ("pl.cdiv(n, bs)", "(n - 1) // bs"),  # one less
    ("pl.cdiv(n, BS)", "(n - 1) // BS + 2"),
    ("pl.cdiv(n, d)", "(n + d - 1) // d"),  # `d = k - 2` may be 0 or negative
    ("pl.cdiv(n, d)", "(n - 1) // d + 1"),
    ("pl.cdiv(n, neg)", "(n + neg - 1) // neg"),  # a negative divisor
])
def test_other_quotients_are_not_that_ceiling(cdiv: str, other: str):
    symbols, (want, got) = _read(cdiv, other)
    assert got != want, symbols.text(got)


@pytest.mark.parametrize("text", ["(n + d - 1) // d", "(n - 1) // d + 1", "(n - m - 1) // BS + 1"])
def test_no_ceiling_where_the_divisor_or_the_count_may_not_be_positive(text: str):
    """`d = k - 2` may be 0 or negative; `n - m` may be 0 or negative, where `(n - m - 1) // BS + 1`
    is no `pl.cdiv` whose atom the prover may take as positive."""
    symbols, (got,) = _read(text)
    assert not _ceilings(symbols, got), symbols.text(got)


_SPELLINGS = [
    "(n + BS - 1) // BS", "(n + 15) // 16", "-(-n // BS)", "(n - 1) // BS + 1", "(n + bs - 1) // bs",
    "-(-n // bs)", "(n - 1) // bs + 1", "(n - 1) // bs", "(n + bs - 2) // bs", "(n + bs) // bs", "n // bs",
    "(n * m + bs - 1) // bs", "(n + m - 1) // bs + 1", "(n - 1) // 16", "-n // bs", "n // -bs",
]


@pytest.mark.parametrize("text", _SPELLINGS)
def test_the_reading_has_the_value_python_computes(text: str):
    """Whatever atom a quotient becomes, its polynomial evaluates to what Python computes, for
    every positive n, m and divisor tried."""
    symbols, (poly,) = _read(text)
    for n, m, bs in itertools.product(range(1, 41), (1, 3), range(1, 10)):
        env = {"n": n, "m": m, "bs": bs, "BS": 16}
        assert _value(symbols, poly, env) == eval(text, {}, env), (text, env, symbols.text(poly))


def _ceilings(symbols: Symbols, p: Poly) -> list[str]:
    return [k for m, _c in p.terms for k in m if symbols.atoms[k].kind == "ceil"]


def _value(symbols: Symbols, p: Poly, env: dict[str, int]) -> int:
    total = 0
    for monomial, coeff in p.terms:
        term = coeff
        for key in monomial:
            term *= _atom_value(symbols, key, env)
        total += term
    return total


def _atom_value(symbols: Symbols, key: str, env: dict[str, int]) -> int:
    atom = symbols.atoms[key]
    if atom.kind == "value":
        return env[key.split("@")[0]]
    num, den = _value(symbols, atom.num, env), _value(symbols, atom.den, env)
    return num // den if atom.kind == "floor" else -(-num // den)


_OBSERVED = """\
from jax.experimental import pallas as pl

BS = 16


def f(n, b):
    return (n + BS - 1) // BS, (n + 15) // 16, -(-n // b), (n - 1) // b + 1, (n + BS - 2) // BS, (n + 1) // 3, n // b
"""


def test_the_worker_observes_hand_spelled_ceilings_as_cdiv_calls():
    """verify.examples.ceilings: the four hand spellings (not the other quotients) call `pl.cdiv`
    with their operands, and every value is the original's, for any sign of the operands."""
    from jax.experimental import pallas as pl

    observed = observed_source(_OBSERVED)
    assert observed is not None and observed_source("def f(n):\n    return n // 2\n") is None
    plain, seen = {}, {}
    exec(compile(_OBSERVED, "<plain>", "exec"), plain)
    exec(compile(observed, "<observed>", "exec"), seen)
    recorded, original = [], pl.cdiv
    pl.cdiv = lambda a, b: recorded.append((a, b)) or original(a, b)
    try:
        for n, b in itertools.product(range(-5, 41), (1, 2, 3, 7, -3)):
            recorded.clear()
            assert seen["f"](n, b) == plain["f"](n, b), (n, b)
            assert recorded == [(n, 16), (n, 16), (n, b), (n, b)], (n, b, recorded)
    finally:
        pl.cdiv = original


# =========================================================================== whole kernels

_LIFT_LOOP = FIXTURES / "codemods" / "lift_loop"
_TRAP = {"hand": _LIFT_LOOP / "ragged_round_up_trip_rejected.py", "cdiv": _LIFT_LOOP / "ragged_cdiv_trip_rejected.py"}


def _findings(source: str) -> list[tuple]:
    result = analyze_source(source, "<kernel>")
    return [(f.code, f.span.line, f.fixable, f.fix_safety, f.refusal) for f in result.findings]


@pytest.mark.parametrize("rows", [48, 40])
@pytest.mark.parametrize("hand", ["(n + BS - 1) // BS", "-(-n // BS)", "(n - 1) // BS + 1"])
def test_a_hand_spelled_trip_count_is_offered_as_the_cdiv_one_is(hand: str, rows: int):
    """The ragged loop of lift_loop/ragged_cdiv_trip_rejected.py: an unsafe fix in every spelling
    (the hand spellings were refused, `the last block may run past the end`, where `pl.cdiv` lifted)."""
    source = _TRAP["cdiv"].read_text(encoding="utf-8")
    source = "\n".join(line for line in source.splitlines() if "example" not in line or f"[{rows}," in line)
    assert "pl.cdiv(n, BS)" in source and f"f32[{rows}, 128]" in source
    assert _findings(source.replace("pl.cdiv(n, BS)", hand)) == _findings(source)
    assert all(f[2] for f in _findings(source))
    assert _code(_TRAP["hand"]) == _code(_TRAP["cdiv"]).replace("pl.cdiv(n, BS)", "(n + BS - 1) // BS")  # twins


@pytest.mark.parametrize("spelling", sorted(_TRAP))
def test_the_ragged_loop_is_never_verified(spelling: str):
    """The trap the hand spelling once fell into (lift_loop's old refuse_ragged_round_up_trip):
    where BS does not divide n the rewrite's partial last block and the original's clamped window
    disagree. Verification rejects it at 40 rows, and at 48 rows on the ragged variant (45 rows) it
    derives from the count, recorded from `pl.cdiv` or from its hand spelling
    (verify.examples.ceilings): `--apply` writes it in neither spelling."""
    path = _TRAP[spelling]
    source = path.read_text(encoding="utf-8")
    fixed = fix_source(source, str(path), unsafe=True)
    assert fixed.changed and "grid=" in fixed.source, fixed.remaining
    verdicts = verify_sources(source, fixed.source, collect_examples(path, source, pyproject=False), path=str(path),
                              timeout_s=240)
    assert [v.status for v in verdicts] == ["mismatch", "mismatch"], [(v.status, v.message) for v in verdicts]
    assert "f32[45, 128]" in verdicts[0].message, verdicts[0].message  # 48 rows verify; the ragged variant does not


def _code(path) -> str:
    """The file past its docstring."""
    source = path.read_text(encoding="utf-8")
    return source[source.index('"""', 3) + 3:]
