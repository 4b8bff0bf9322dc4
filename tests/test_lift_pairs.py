"""R1 (lift-loop, PF101) and R3 (program-id-blocks, PF103): golden pairs and refusals.

Fixtures: tests/fixtures/lift/ (conventions in tests/pair_harness.py). Every pair is checked four
ways: the rewrite is the golden text; both kernels agree in the interpreters; the jaxpr oracle
finds no dynamic slice left in the after-file (or the declared number); a second run changes
nothing.

BLOCKED pairs are kernels the codemods should rewrite but do not, or rewrite wrongly or untidily:
their after-file is written by hand (and verified like the others), and only the golden-text test
is a strict xfail naming the bug. Once the bug is fixed that test XPASSes and fails: regenerate
the after-file with the tool, read it, and drop the entry.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import pair_harness as H
from kernel_loading import FIXTURES
from pallas_fix.engine import analyze_source

FIX = FIXTURES / "lift"
PAIRS = H.pairs(FIX)
REFUSALS = H.refusals(FIX)

BLOCKED = {
}

BLOCKED_REFUSALS = {
}

LIBCST_RUNNER_BUG = (
    "make_codemod subclasses libcst.codemod.Codemod, but `python -m libcst.tool codemod` calls"
    " `command_class.add_args(parser)`, which only CodemodCommand has (AttributeError)"
)

# The forms the R1/R3 fixture set must cover.
REQUIRED = {
    "partial_block_fori", "jax_lax_multiple_of", "loop_from_one", "header_offset", "pl_loop_decorator",
    "pl_loop_step_chunk", "batch_grid_seq_loop", "larger_blockspec", "two_dims_transpose", "grid_spec",
    "nested_loops", "lambda_helper", "tpu_parallel", "tpu_arbitrary", "named_slices_comments",
    "bf16_kernel", "pid_rows_1d", "pid_rows_2d", "pid_two_axes", "pid_flattened_grid",
    "pid_decorator_partial", "pid_triton_load",
}


def _golden_params():
    out = []
    for p in PAIRS:
        marks = [pytest.mark.xfail(strict=True, reason=BLOCKED[p.name])] if p.name in BLOCKED else []
        out.append(pytest.param(p, id=p.name, marks=marks))
    return out


def _refusal_params():
    out = []
    for path in REFUSALS:
        reason = BLOCKED_REFUSALS.get(path.stem)
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        out.append(pytest.param(path, id=path.stem, marks=marks))
    return out


PAIR_PARAMS = [pytest.param(p, id=p.name) for p in PAIRS]

_POOL = H.VerdictPool("test_pair_verified_in_the_interpreters")


@pytest.fixture(autouse=True, scope="module")
def _start_interpreter_runs(request):
    # Interpreter runs are worker processes: start them first so that they overlap with the
    # in-process tests.
    _POOL.start(request.session)


# =========================================================================== the fixture set


def test_fixture_set_is_complete():
    H.check_fixture_set(FIX, min_pairs=16, min_refusals=10, blocked=BLOCKED)
    names = {p.name for p in PAIRS}
    assert REQUIRED <= names, sorted(REQUIRED - names)
    assert set(BLOCKED_REFUSALS) <= {p.stem for p in REFUSALS}
    assert len(names - set(BLOCKED)) >= 16, "fewer than 16 pairs the tool rewrites exactly"


@pytest.mark.parametrize("pair", PAIR_PARAMS)
def test_pair_exercises_r1_or_r3(pair):
    codes = {f.code for f in analyze_source(pair.before_source, str(pair.before)).findings}
    assert codes & {"PF101", "PF103"}, codes


# =========================================================================== (1) golden text


@pytest.mark.parametrize("pair", _golden_params())
def test_rewrite_matches_golden(pair):
    H.check_golden(pair)


# =========================================================================== (2) interpreters


@pytest.mark.interp
@pytest.mark.parametrize("pair", PAIR_PARAMS)
def test_pair_verified_in_the_interpreters(request, pair):
    H.check_verdicts(pair, _POOL.get(request, pair))


# =========================================================================== (3) jaxpr oracle


@pytest.mark.parametrize("pair", PAIR_PARAMS)
def test_oracle_counts_dynamic_slices_left(pair):
    H.check_oracle_counts(pair)


# =========================================================================== (4) fixed point


@pytest.mark.parametrize("pair", PAIR_PARAMS)
def test_second_run_changes_nothing(pair):
    H.check_idempotent(pair)


# =========================================================================== refusals


@pytest.mark.parametrize("path", _refusal_params())
def test_refusal_leaves_the_file_unchanged(path):
    H.check_refusal(path)


@pytest.mark.parametrize("path", [pytest.param(p, id=p.stem) for p in REFUSALS])
def test_refusal_fixture_is_a_real_kernel(path):
    H.check_real_kernel(path)


# =========================================================================== LibCST's own runner


@pytest.mark.parametrize(
    "name, codemod",
    [
        ("pl_loop_decorator", "pallas_fix.frontends.libcst_commands.LiftIndependentLoop"),
        ("pid_rows_2d", "pallas_fix.frontends.libcst_commands.ProgramIdBlocks"),
    ],
)
def test_libcst_runner_gives_the_golden_text(tmp_path: Path, name, codemod):
    pair = next(p for p in PAIRS if p.name == name)
    produced = H.run_libcst_codemod(codemod, pair.before_source, tmp_path, pair.before.name)
    assert produced == pair.after_source, H.text_diff(pair.after_source, produced, name)
