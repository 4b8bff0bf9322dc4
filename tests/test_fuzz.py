"""Fuzzing: mutated fixture kernels through analysis, fixes and the notebook machinery.

Properties checked on every mutant (tests/fuzz_strategies.py: consistent renames, reordered
independent assignments, inserted comments and blank lines, changed constants, broken syntax,
deleted lines):

* `analyze_source` returns, or raises `SourceError` (unparsable input) and nothing else;
* `fix_source` raises nothing on parsable input (on unparsable input, the same `SourceError` as
  analysis); when it changes the source the result parses, and a second run changes nothing;
  a fix error leaves the source as it was;
* findings point inside the file and every output format renders them;
* notebooks: the virtual module of any cells always parses, and splitting it gives the cells back.

Profiles: the fast one runs in `make test` (fixed seed, a few hundred cases, well under a minute).
`PALLAS_FIX_FUZZ=long` selects the long one (tests marked `slow`): thousands of cases
(`PALLAS_FIX_FUZZ_EXAMPLES`, default 5000) and, on a small sample of mutants that a fix rewrites,
verification through the Pallas interpreters (the rewrite must verify equal whenever the mutated
original still runs): `PALLAS_FIX_FUZZ=long pytest -m slow tests/test_fuzz.py`.
"""

from __future__ import annotations

import json
import os
import random
import traceback

import libcst as cst
import pytest
from hypothesis import HealthCheck, assume, given, note, settings

from fuzz_strategies import (
    MEANING_PRESERVING,
    MUTATIONS,
    Mutant,
    apply_mutations,
    fixture_sources,
    mutants,
    notebook_cells,
    split_lines,
)
from pallas_fix.engine import SourceError, analyze_source, fix_source
from pallas_fix.frontends.files.notebook import build_virtual, dump_notebook, json_style, split_cells
from pallas_fix.output import render_github, render_json, render_sarif, render_text

LONG = os.environ.get("PALLAS_FIX_FUZZ") == "long"
LONG_EXAMPLES = int(os.environ.get("PALLAS_FIX_FUZZ_EXAMPLES", "5000"))
VERIFY_EXAMPLES = int(os.environ.get("PALLAS_FIX_FUZZ_VERIFY_EXAMPLES", "8"))
PATH = "mutant.py"
_RELAXED = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]

FAST = settings(max_examples=160, deadline=None, derandomize=True, database=None, suppress_health_check=_RELAXED)
FAST_MEANING = settings(
    max_examples=80, deadline=None, derandomize=True, database=None, suppress_health_check=_RELAXED
)
FAST_NOTEBOOK = settings(max_examples=100, deadline=None, derandomize=True, database=None, suppress_health_check=_RELAXED)
SLOW = settings(max_examples=LONG_EXAMPLES, deadline=None, suppress_health_check=_RELAXED)
SLOW_NOTEBOOK = settings(max_examples=max(100, LONG_EXAMPLES // 5), deadline=None, suppress_health_check=_RELAXED)
long_only = pytest.mark.skipif(not LONG, reason="long fuzz profile: set PALLAS_FIX_FUZZ=long")


def check_mutant(m: Mutant):
    """The properties above for one mutant; the FixResult when the mutant parses."""
    lines = m.text.splitlines() or [""]
    try:
        analysis = analyze_source(m.text, PATH)
    except SourceError as exc:
        assert 1 <= exc.line <= len(m.text.splitlines()) + 2, f"error position {exc.line} outside the file"
        try:
            fix_source(m.text, PATH)
        except SourceError:
            pass  # same as analysis: the file cannot be parsed
        return None
    for f in analysis.findings:
        assert 1 <= f.span.line <= f.span.end_line <= len(lines), f"finding outside the file: {f}"
    render_text(analysis.findings)
    json.loads(render_json(analysis.findings))
    json.loads(render_sarif(analysis.findings))
    render_github(analysis.findings)

    result = fix_source(m.text, PATH)
    _note(f"applied: {result.applied}; error: {result.error}")
    if result.error:
        assert result.source == m.text, "a failed fix must leave the source unchanged"
    if result.changed:
        cst.parse_module(result.source)
        again = fix_source(result.source, PATH)
        assert not again.changed, f"a second fix_source run changed the result:\n{again.source}"
    return result


def _note(text: str) -> None:
    try:
        note(text)
    except Exception:  # outside a Hypothesis test (the sweep below) there is nothing to note into
        pass


def test_fixtures_are_there():
    names = [n for n, _ in fixture_sources()]
    assert len(names) >= 30 and all(n.endswith(".py") for n in names)


@FAST
@given(m=mutants())
def test_fuzz_analysis_and_fixes(m):
    check_mutant(m)


@FAST_MEANING
@given(m=mutants(kinds=MEANING_PRESERVING, max_mutations=4))
def test_fuzz_meaning_preserving_mutants_still_parse_and_analyse(m):
    # these mutations keep a parsable fixture parsable: analysis must succeed
    try:
        cst.parse_module(m.text)
    except cst.ParserSyntaxError:
        pytest.fail(f"a meaning-preserving mutation broke the syntax of {m.fixture}")
    check_mutant(m)


def _notebook(cells: list[str]) -> dict:
    return {
        "cells": [
            {"cell_type": "code", "execution_count": None, "id": f"c{i}", "metadata": {}, "outputs": [], "source": c}
            for i, c in enumerate(cells)
        ],
        "metadata": {"language_info": {"name": "python"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def check_notebook(cells: list[str]) -> None:
    nb = _notebook(cells)
    vm = build_virtual(nb)
    cst.parse_module(vm.text)  # cells that do not parse are left out, so the module always parses
    assert split_cells(vm, vm.text) == dict(enumerate(cells))
    analyze_source(vm.text, "nb.ipynb")
    text = json.dumps(nb, indent=1, ensure_ascii=False) + "\n"
    assert dump_notebook(nb, json_style(text, nb)) == text


@FAST_NOTEBOOK
@given(cells=notebook_cells())
def test_fuzz_notebook_cells_round_trip(cells):
    check_notebook(cells)


# -- reproducers of crashes the fuzz tests found --------------------------------------------------------
BUILTIN_IN_TRACED_CONSTANT = """import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

BS = 32


def kernel(x_ref, o_ref):
    o_ref[...] = x_ref[pl.ds(jnp.array(True) * BS, BS), :]


def f(x):
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((BS, 128), x.dtype))(x)
"""


@pytest.mark.parametrize("arg", ["True", "None", "len"])
def test_builtin_name_inside_a_traced_constant_start(arg):
    source = BUILTIN_IN_TRACED_CONSTANT.replace("jnp.array(True)", f"jnp.array({arg})")
    assert check_mutant(Mutant("reproducer", (), source)) is not None


SELF_REFERENCING_START = """import jax
from jax.experimental import pallas as pl

ROWS = 8


def kernel(x_ref, o_ref):
    off = pl.multiple_of(off * ROWS, ROWS)
    o_ref[...] = x_ref[pl.ds(off, ROWS), :]


def f(x):
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((ROWS, 128), x.dtype))(x)
"""


def test_start_defined_in_terms_of_itself():
    assert check_mutant(Mutant("reproducer", (), SELF_REFERENCING_START)) is not None


NEGATIVE_PROGRAM_ID_AXIS = """import jax
from jax.experimental import pallas as pl

BS = 8


def kernel(x_ref, o_ref):
    t = pl.program_id({axis})
    o_ref[pl.ds(t * BS, BS), :] = x_ref[pl.ds(t * BS, BS), :]


def f(x):
    return pl.pallas_call(kernel, grid=(4,), out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
"""


@pytest.mark.parametrize("axis", ["-1", "axis=-1"])
def test_negative_program_id_axis(axis):
    assert check_mutant(Mutant("reproducer", (), NEGATIVE_PROGRAM_ID_AXIS.format(axis=axis))) is not None


NEGATIVE_SHAPE_INDEX = """import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl

BS = 64


def kernel(x_ref, o_ref):
    def body(i, carry):
        o_ref[:, pl.ds(i * BS, BS)] = jnp.tanh(x_ref[:, pl.ds(i * BS, BS)])
        return carry

    lax.fori_loop(0, x_ref.shape[-1] // BS, body, None)


def f(x):
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
"""


def test_trip_count_from_a_negative_shape_index():
    assert check_mutant(Mutant("reproducer", (), NEGATIVE_SHAPE_INDEX)) is not None


# -- long profile -------------------------------------------------------------------------------------
@pytest.mark.slow
@long_only
@SLOW
@given(m=mutants(max_mutations=4))
def test_fuzz_long_analysis_and_fixes(m):
    check_mutant(m)


@pytest.mark.slow
@long_only
@SLOW_NOTEBOOK
@given(cells=notebook_cells())
def test_fuzz_long_notebook_cells_round_trip(cells):
    check_notebook(cells)


@pytest.mark.slow
@pytest.mark.interp
@long_only
@settings(max_examples=VERIFY_EXAMPLES, deadline=None, suppress_health_check=_RELAXED + [HealthCheck.filter_too_much])
@given(m=mutants(kinds=MEANING_PRESERVING + ("constants",), max_mutations=2))
def test_fuzz_long_rewrites_verify(m):
    """Where the mutated original still runs, a rewrite must verify equal (or not be made)."""
    from pallas_fix.core.examples import ExampleSyntaxError
    from pallas_fix.verify.examples.sources import collect_examples
    from pallas_fix.verify.runner import format_verdict, verify_sources

    result = check_mutant(m)
    assume(result is not None and result.changed)
    try:
        examples = collect_examples(PATH, m.text, pyproject=False)
    except ExampleSyntaxError:
        examples = []
    assume(examples)
    verdicts = verify_sources(m.text, result.source, examples, path=PATH, timeout_s=300)
    if all(v.status == "verified" for v in verdicts):
        return
    # Only a failure if the mutated original itself runs: compare it with itself.
    baseline = verify_sources(m.text, m.text, examples, path=PATH, timeout_s=300)
    assume(all(v.status == "verified" for v in baseline))
    pytest.fail("rewrite of a running kernel did not verify:\n" + "\n".join(format_verdict(v) for v in verdicts)
                + f"\n--- rewrite ---\n{result.source}")


@pytest.mark.slow
@long_only
def test_fuzz_long_sweep():
    """Plain random cases that do not stop at the first failure: every distinct crash (exception
    type + innermost pallas-fix frame) is listed with its shortest mutant, for the bug report.
    Seeds: PALLAS_FIX_FUZZ_SEED (default 1_000_000) + case number; the same case replays from it.
    PALLAS_FIX_FUZZ_REPORT=path writes the counts and failures as JSON."""
    seed0 = int(os.environ.get("PALLAS_FIX_FUZZ_SEED", "1000000"))
    sources = fixture_sources()
    kinds = list(MUTATIONS)
    counts = {"cases": 0, "parsed": 0, "rewritten": 0, "notebooks": 0}
    failures: dict[str, dict] = {}
    for n in range(LONG_EXAMPLES):
        rnd = random.Random(seed0 + n)
        fixture, text = rnd.choice(sources)
        chosen = tuple(rnd.choice(kinds) for _ in range(rnd.randint(1, 4)))
        m = Mutant(fixture, chosen, apply_mutations(text, chosen, rnd))
        counts["cases"] += 1
        try:
            result = check_mutant(m)
            if result is not None:
                counts["parsed"] += 1
                counts["rewritten"] += result.changed
            if n % 4 == 0:
                lines = split_lines(m.text)
                cuts = sorted({rnd.randint(0, len(lines)) for _ in range(rnd.randint(0, 5))})
                bounds = [0, *cuts, len(lines)]
                check_notebook(["".join(lines[a:b]) for a, b in zip(bounds, bounds[1:])])
                counts["notebooks"] += 1
        except Exception as exc:
            frames = [
                f for f in traceback.extract_tb(exc.__traceback__)
                if "/pallas_fix/" in f.filename or "/codemods/" in f.filename
            ]
            last = frames[-1] if frames else None
            where = "/".join(last.filename.rsplit("/", 2)[-2:]) + f":{last.lineno}" if last else "tests"
            key = f"{type(exc).__name__} at {where}"
            entry = failures.setdefault(key, {"count": 0, "seed": None, "text": None})
            entry["count"] += 1
            if entry["text"] is None or len(m.text) < len(entry["text"]):
                entry.update(seed=seed0 + n, fixture=fixture, kinds=chosen, message=str(exc)[:300], text=m.text)
    if os.environ.get("PALLAS_FIX_FUZZ_REPORT"):
        with open(os.environ["PALLAS_FIX_FUZZ_REPORT"], "w") as fh:
            json.dump({"counts": counts, "failures": failures}, fh, indent=1)
    print(f"fuzz sweep: {counts}")
    assert not failures, "\n\n".join(
        f"{key}: {f['count']} case(s); shortest: seed {f['seed']}, {f['fixture']} {f['kinds']}: "
        f"{f['message']}\n{f['text']}"
        for key, f in failures.items()
    )
