"""`analysis.discovery.reachable`: a report parses only the statements its kernels reach, and says exactly
what the analysis of the whole file says.

The equivalence tests take every kernel fixture, put unrelated code between its top-level
statements (functions, classes, constants, a docstring naming pallas_call, indented trailing
comments), and compare the findings of `analyze_source(reach=True)` with those of the whole
file's analysis: codes, places, messages, provenance, refusals and whether a fix is offered.
"""

from __future__ import annotations

import ast
import functools
import random
import textwrap
from pathlib import Path

import libcst as cst
import pytest

from pallas_fix.analysis import result as result_module
from pallas_fix.analysis.discovery.reachable import reachable_source
from pallas_fix.analysis.result import analyze
from pallas_fix.analysis.discovery.top_level import first_line, last_line, statement_groups
from pallas_fix.core.config import Config
from pallas_fix.engine import analyze_source, fix_source
from pallas_fix.rules.gpu_interpret.hazards import trigger

FIXTURES = Path(__file__).parent / "fixtures"
_FAMILIES = ["detect", "traps", "verify", "lsp", "gpu_interpret", "synthesis", "kernel_rewrites", "blind", "real"]


def _parses(path: Path) -> bool:
    try:
        ast.parse(path.read_text(encoding="utf-8"))
    except SyntaxError:
        return False
    return True


_KERNEL_FILES = sorted(
    p for p in [
        *(p for fam in _FAMILIES for p in (FIXTURES / fam).rglob("*.py")),
        *(FIXTURES / "codemods").rglob("*_before.py"),
        *(FIXTURES / "codemods").rglob("refuse_*.py"),
    ] if _parses(p)
)

KERNEL = '''\
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

# pallas-fix: example add(f32[512, 128])

BLOCK = 128


def _unrelated(xs):
    """Mentions pallas_call only in words."""
    return [x * 2 for x in xs]


def add_kernel(x_ref, o_ref):
    i = pl.program_id(0)
    rows = pl.ds(i * BLOCK, BLOCK)
    o_ref[rows, :] = x_ref[rows, :] + 1.0


def add(x):
    m, _ = x.shape
    return pl.pallas_call(add_kernel, grid=(m // BLOCK,), out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
'''

FILLER = [
    '''\
def _filler_{k}(values, start, size=8):
    """pallas_call is only named here, in a docstring."""
    chunk = values[start * size:(start + 1) * size]
    return [v / max(1.0, sum(chunk)) for v in chunk]
''',
    '''\
class _Settings{k}:
    def __init__(self, size=4):
        self.size = size
        # an indented comment at the end of the class body, then one after a blank line

    # LibCST gives this one to the class too
''',
    '''\
_TABLE_{k} = {{
    "a": 1,
    "b": [i for i in range(3)],
}}
''',
    '''\
@functools.lru_cache(maxsize=None)
def _cached_{k}(n):
    total = 0
    for j in range(n):
        total += j
    return total
''',
    '''\
if _TABLE_{k} if False else True:
    _flag_{k} = 1
else:
    _flag_{k} = 2
''',
]


def _with_filler(source: str, seed: int, copies: int = 3) -> str:
    """`source` with filler blocks after some of its top-level statements (never inside one)."""
    lines = source.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    ends = [last_line(g) for g in statement_groups(ast.parse(source))]
    rng = random.Random(seed)
    inserts: dict[int, list[str]] = {}
    for k in range(copies * len(FILLER)):
        at = rng.choice([0] + ends)
        text = FILLER[k % len(FILLER)].format(k=k)
        if k % len(FILLER) == 4:  # refers to a table: put one right before it
            text = FILLER[2].format(k=k) + "\n\n" + text
        inserts.setdefault(at, []).append("\n\n" + text + "\n")
    out = []
    for n, line in enumerate(lines, 1):
        if n == 1 and 0 in inserts and not _starts_with_future_or_docstring(source):
            out.extend(inserts.pop(0))
        out.append(line)
        out.extend(inserts.get(n, []))
    out.extend(inserts.get(0, []))
    return "".join(out)


def _starts_with_future_or_docstring(source: str) -> bool:
    body = ast.parse(source).body
    return bool(body) and (isinstance(body[0], ast.ImportFrom) and body[0].module == "__future__" or isinstance(body[0], ast.Expr))


def _same_findings(source: str, path: str, monkeypatch) -> None:
    """With every unreached statement emptied, however few there are."""
    whole = analyze_source(source, path)
    monkeypatch.setattr(result_module, "reachable_source", functools.partial(reachable_source, keep_at_most=1.0))
    reached = analyze_source(source, path, reach=True)
    assert trigger(reached.analysis) == trigger(whole.analysis)  # which interpreters verify
    assert reached.findings == whole.findings
    assert [f.fixable for f in reached.findings] == [f.fixable for f in whole.findings]


# -- what is kept -----------------------------------------------------------------------------------
def test_statements_the_kernel_does_not_reach_are_emptied_and_lines_stay():
    source = KERNEL + "".join("\n\n" + FILLER[0].format(k=k) for k in range(6))
    reduced = reachable_source(source)
    assert reduced is not None
    assert reduced.count("\n") == source.count("\n")
    assert "_filler_" not in reduced and "_unrelated" not in reduced
    for kept in ("def add_kernel", "BLOCK = 128", "def add(x)", "import functools"):
        assert kept in reduced
    # every kept line is where it was
    for a, b in zip(source.splitlines(), reduced.splitlines()):
        assert b in ("", a)
    cst.parse_module(reduced)


def test_callers_aliases_and_import_aliases_of_pallas_call_are_kept():
    source = textwrap.dedent('''\
        import jax
        from jax.experimental.pallas import pallas_call as pc

        def kernel(x_ref, o_ref):
            o_ref[...] = x_ref[...]

        def run(x):
            return pc(kernel, out_shape=x)(x)

        def main():
            return run(1)
        ''') + "".join("\n\n" + FILLER[0].format(k=k) for k in range(8))
    reduced = reachable_source(source)
    assert reduced is not None
    for kept in ("return pc(kernel", "def main():"):
        assert kept in reduced
    assert "_filler_" not in reduced


RAMP = '''\
import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl

# pallas-fix: example ramp(f32[64, 128])

ROWS = 16


def ramp_kernel(x_ref, o_ref):
    def body(i, carry):
        o_ref[pl.ds(i * ROWS, ROWS), :] = x_ref[pl.ds(i * ROWS, ROWS), :] + 1.0
        return carry

    lax.fori_loop(0, x_ref.shape[0] // ROWS, body, None)


def ramp(x):
    return pl.pallas_call(ramp_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
'''


def test_a_use_of_the_kernel_the_reduced_tree_leaves_out_still_refuses_its_lift():
    # The other use names no pallas_call, so the reduced tree drops it and a lift is planned
    # there; the plan sends the analysis back to the whole file, where the use refuses it.
    source = RAMP + "\n\ndef _reference(x_ref, o_ref):\n    ramp_kernel(x_ref, o_ref)\n" + "".join(
        "\n\n" + FILLER[0].format(k=k) for k in range(10))
    reduced = reachable_source(source)
    assert reduced is not None and "def _reference" not in reduced
    whole, reached = analyze_source(source), analyze_source(source, reach=True)
    assert whole.findings and all(not f.fixable for f in whole.findings)
    assert any("outside its pallas_call" in (f.refusal or "") for f in whole.findings)
    assert reached.findings == whole.findings and not reached.ctx.reduced
    assert any(f.fixable for f in analyze_source(RAMP).findings)  # without the other use it lifts


def test_a_binding_of_a_name_the_kernel_reads_is_kept_wherever_it_is():
    source = KERNEL + "\n\ndef _reset():\n    global BLOCK\n    BLOCK = 64\n" + "".join(
        "\n\n" + FILLER[0].format(k=k) for k in range(8))
    reduced = reachable_source(source)
    assert reduced is not None and "def _reset():" in reduced


def test_a_module_naming_pallas_call_only_in_words_keeps_only_its_imports():
    source = "import jax\n\n" + "".join("\n\n" + FILLER[0].format(k=k) for k in range(4))
    reduced = reachable_source(source)
    assert reduced is not None and reduced.strip() == "import jax"
    assert analyze_source(source, reach=True).findings == analyze_source(source).findings == []


def test_an_indented_comment_after_an_emptied_block_goes_with_it():
    source = KERNEL + "\n\n" + FILLER[1].format(k=0) + "\n" + "".join("\n\n" + FILLER[0].format(k=k) for k in range(6))
    reduced = reachable_source(source)
    assert reduced is not None and "# LibCST gives this one" not in reduced
    whole, part = cst.parse_module(source), cst.parse_module(reduced)
    # the kept function above the emptied class has the same body (its footer included)
    body = lambda m: next(m.code_for_node(s.body) for s in m.body if isinstance(s, cst.FunctionDef) and s.name.value == "add")  # noqa: E731
    assert body(part) == body(whole)


def test_nothing_is_emptied_when_almost_everything_is_reached():
    assert reachable_source(KERNEL) is None


def test_statements_naming_gpu_interpret_mode_are_kept_with_their_uses():
    # What turns the mode on is looked for in the whole module, through import aliases too.
    source = KERNEL.replace("import functools\n", "import functools\n\nfrom jax.experimental.pallas import mosaic_gpu as plgpu\n"
                            "from jax.experimental.pallas.mosaic_gpu import InterpretGPUParams as IGP\n") + (
        "\n\nINTERPRET = IGP()\n\n\ndef _setup():\n    jax.config.update('jax_pallas_gpu_interpret_mode', True)\n"
        + "".join("\n\n" + FILLER[0].format(k=k) for k in range(8)))
    reduced = reachable_source(source)
    assert reduced is not None and "INTERPRET = IGP()" in reduced and "def _setup():" in reduced
    assert "_filler_" not in reduced
    whole = analyze(source)
    part = analyze(source, reach=True)
    assert part.ctx.reduced
    assert trigger(part) == trigger(whole) is not None
    assert not analyze(source, config=Config(target="gpu-interpret"), reach=True).ctx.reduced


def test_text_ast_cannot_parse_is_left_to_libcst():
    assert reachable_source(KERNEL + "\ndef broken(:\n") is None


def test_a_fix_found_on_the_reduced_tree_is_planned_and_applied_on_the_whole_file():
    source = KERNEL + "".join("\n\n" + FILLER[k % 4].format(k=k) for k in range(12))
    assert reachable_source(source) is not None
    result = analyze_source(source, reach=True)
    assert any(f.plan is not None for f in result.findings)
    assert not result.ctx.reduced and result.ctx.module.code == source
    fixed = fix_source(source, analysis=result)
    assert fixed.changed and not fixed.error
    for k in range(12):  # nothing of the file was lost
        assert FILLER[k % 4].format(k=k) in fixed.source


# -- the same findings ------------------------------------------------------------------------------
def _cases(every: int, skip: int = 0):
    """Every `every`-th kernel file; with `skip`, leaving out every `skip`-th (the sample the fast
    lane checks, which `make test` runs too: each file is analysed once there, not twice)."""
    kept = _KERNEL_FILES[::every]
    left_out = set(_KERNEL_FILES[::skip]) if skip else set()
    return [pytest.param(p, id=str(p.relative_to(FIXTURES))) for p in kept if p not in left_out]


@pytest.mark.parametrize("path", _cases(9))
def test_same_findings_with_filler_sample(path: Path, monkeypatch):
    source = _with_filler(path.read_text(encoding="utf-8"), seed=len(path.name))
    assert reachable_source(source, keep_at_most=1.0) is not None
    _same_findings(source, str(path), monkeypatch)


@pytest.mark.slow
@pytest.mark.parametrize("path", _cases(1, skip=9))
def test_same_findings_with_filler(path: Path, monkeypatch):
    source = _with_filler(path.read_text(encoding="utf-8"), seed=len(path.name))
    assert reachable_source(source, keep_at_most=1.0) is not None
    _same_findings(source, str(path), monkeypatch)


def _jax_sources() -> list[Path]:
    import jax

    root = Path(jax.__file__).parent
    return sorted(p for d in ("_src/pallas", "experimental/pallas") for p in (root / d).rglob("*.py")
                  if "pallas_call" in p.read_text(encoding="utf-8"))


@pytest.mark.slow
@pytest.mark.parametrize("path", _jax_sources(), ids=lambda p: p.name)
def test_same_findings_on_jax_pallas_sources(path: Path, monkeypatch):
    _same_findings(path.read_text(encoding="utf-8"), str(path), monkeypatch)
