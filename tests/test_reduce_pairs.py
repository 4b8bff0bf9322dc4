"""R2 (lift-reduction, PF102): a fori_loop reduction becomes a sequential grid axis with scratch
carries, `_init` / `_finalize` under `pl.when`.

Fixtures: tests/fixtures/codemods/lift_reduction/ (conventions in tests/pair_harness.py). R2's
fixes are unsafe, so every rewrite here runs with unsafe fixes on. The checks every codemod pair
gets are in tests/test_codemod_pairs.py (the rewrite is the golden text; both kernels agree in the
interpreters; the jaxpr oracle finds no dynamic slice left in the after-file; a second run changes
nothing; refusals come out unchanged and are real kernels; LibCST's runner, opted in to unsafe
fixes through pyproject.toml, gives the golden text of matmul_tpu). This module adds R2's own:
the finding is PF102 where the oracle sees a dynamic slice, and only an unsafe fix; the
interpreter verdicts cover TPU interpret mode with race detection, on one and on several cores,
with the reduction axis "arbitrary" (Mosaic GPU kernels only under the HLO interpreter, since TPU
interpret mode rejects them); no PF102 is left; every PF102 finding of a refusal carries the
reason; comments survive.

hazard_*.py files are kernels for which R2 must either refuse or produce a rewrite that verifies;
it does neither yet (strict xfail).

BLOCKED pairs (pair_harness.BLOCKED, keys `lift_reduction/<name>`) are kernels R2 should rewrite
but does not, or rewrites into a broken file: their after-file is written by hand in the tool's
style (and verified like the others), and only the golden-text test is a strict xfail naming the
bug. Once the bug is fixed that test XPASSes and fails: regenerate the after-file with the tool,
read it, and drop the entry.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import pair_harness as H
from pallas_fix.core.config import Config
from pallas_fix.engine import analyze_source
from pallas_fix.core.model import FixSafety

FAMILY = H.FAMILIES["lift_reduction"]
FIX = FAMILY.path
PAIRS = FAMILY.pairs()
REFUSALS = FAMILY.refusals()
CODEMOD = FAMILY.codemod
UNSAFE = {"unsafe": True}

BLOCKED: dict[str, str] = {k.split("/", 1)[1]: v for k, v in H.BLOCKED.items() if k.startswith("lift_reduction/")}

# Blocked because detection gives the loop another code than PF102.
MISCLASSIFIED: set[str] = set()

# The forms issue 5 asks for.
REQUIRED = {
    "matmul_tpu", "matmul_mosaic_gpu", "row_moments", "flash_attention", "flash_attention_causal",
    "scaled_linear", "bias_grad_bf16",
    # issue 13: a scan's moving output block and a carry sized by a loaded value (refusals before).
    "scan_output_block_per_step", "carry_shape_from_loaded_value",
}
REQUIRED_REFUSALS = {"refuse_triton", "refuse_zeros_like_carry", "refuse_python_float_carry", "refuse_python_int_counter_read"}


def _mosaic_gpu(pair: H.Pair) -> bool:
    return "pallas import mosaic_gpu" in pair.before_source


def _pf102(source: str, path: Path) -> list:
    """The loop findings R2 answers: PF102 (the loop carries a value) and PF101 (it carries
    nothing but accumulates into a resident ref)."""
    return [f for f in analyze_source(source, str(path), Config()).findings if f.code in ("PF101", "PF102")]


PAIR_PARAMS = [pytest.param(p, id=p.name) for p in PAIRS]


@pytest.fixture(autouse=True, scope="module")
def _start_interpreter_runs(request):
    # Interpreter runs are worker processes: start them first so that they overlap with the
    # in-process tests. The pool is shared with test_codemod_pairs.py: each pair runs once.
    H.VERDICTS.start(request.session)


# =========================================================================== the fixture set


def test_fixture_set_is_complete():
    H.check_fixture_set(FIX, min_pairs=7, min_refusals=4, blocked=BLOCKED)
    names = {p.name for p in PAIRS}
    assert REQUIRED <= names, sorted(REQUIRED - names)
    assert REQUIRED_REFUSALS <= {p.stem for p in REFUSALS}
    assert len(names - set(BLOCKED)) >= 7, "fewer than 7 pairs the tool rewrites exactly"


@pytest.mark.parametrize(
    "pair",
    [
        pytest.param(p, id=p.name, marks=[pytest.mark.xfail(strict=True, reason=BLOCKED[p.name])] if p.name in MISCLASSIFIED else [])
        for p in PAIRS
    ],
)
def test_pair_is_an_unsafe_r2_fix(pair):
    # PF102 exactly where the oracle sees a dynamic slice, offered only as an unsafe fix.
    findings = _pf102(pair.before_source, pair.before)
    lines = {f.span.line for f in findings}
    for report in H.trace_reports(pair.before):  # one per example (strip_* pairs have two)
        # A scalar index (`x_ref[k, :]`, lifted into a squeezed dim) is the oracle's "scalar" kind.
        scalars = lines & {a.line for a in report.scalars()}
        assert lines == report.lines(str(pair.before)) | scalars
    fixable = [f for f in findings if f.fixable]
    assert all(f.fix_safety is FixSafety.UNSAFE and f.fix_id == CODEMOD for f in fixable)
    assert H.rewrite(pair.before_source, pair.before).source == pair.before_source, "applied without --unsafe-fixes"


# =========================================================================== interpreters


@pytest.mark.interp
@pytest.mark.parametrize("pair", PAIR_PARAMS)
def test_reduce_verdicts_cover_tpu_interpret_and_keep_the_reduction_sequential(request, pair):
    # The verdicts of test_codemod_pairs.py::test_pair_verified_in_the_interpreters (one run).
    verdicts = H.VERDICTS.get(request, pair)
    H.check_verdicts(pair, verdicts)
    for v in verdicts:
        # A scalar lift (a squeezed dim) has no dynamic slice to remove (test_scalar_indices.py counts its scalars).
        assert v.dynamic_slices_after == 0 and (v.dynamic_slices_before or H.trace_reports(pair.before)[0].scalars())
        assert len(v.seeds) >= 2
        (call,) = v.details["pallas_calls"]
        if _mosaic_gpu(pair):
            # TPU interpret mode rejects Mosaic GPU kernels: only the HLO interpreter checks them.
            assert v.interpreters == ["interpret"], v.interpreters
            if "plgpu.SMEM(" in pair.after_source:  # an induction carry leaves no scratch behind
                assert any("smem" in m for m in call["markers"]), call  # the plgpu.SMEM carry
        else:
            assert "tpu-interpret" in v.interpreters, v.interpreters
            # Several cores only where the rewrite leaves parallel grid points to spread over.
            if call.get("parallel_points", 1) > 1:
                assert any(i.startswith("tpu-interpret-") for i in v.interpreters), "no multi-core run"
            # Unset semantics (a call the rewrite gave its first grid axis) are Mosaic's default.
            semantics = call["dimension_semantics"] or ["arbitrary"] * len(call["grid"])
            if "scratch_shapes" in pair.after_source:
                assert semantics[-1] == "arbitrary", call
            else:  # a carry of step counters alone leaves the steps independent (lift_reduction._semantics)
                assert semantics[-1] in ("parallel", "arbitrary"), call


# =========================================================================== no PF102 left


@pytest.mark.parametrize("pair", PAIR_PARAMS)
def test_no_pf102_left_after_the_rewrite(pair):
    # (the golden text, the oracle and the second run: test_codemod_pairs.py)
    assert _pf102(pair.after_source, pair.after) == []


# =========================================================================== refusals


@pytest.mark.parametrize("path", [pytest.param(p, id=p.stem) for p in REFUSALS])
def test_every_pf102_finding_of_a_refusal_carries_the_reason(path):
    # (unchanged under unsafe fixes, some finding carrying the reason: test_codemod_pairs.py)
    # Every finding of the loop carries the reason, not just one of them.
    src = path.read_text()
    findings = _pf102(src, path)
    fragment = H.declared_refusal(src)
    assert findings and all(not f.fixable and fragment in (f.refusal or "") for f in findings), findings


@pytest.mark.parametrize("path", [pytest.param(p, id=p.stem) for p in REFUSALS])
def test_refusal_oracle_lines_are_the_pf102_lines(path):
    # (a real kernel with dynamic slices: test_codemod_pairs.py)
    # Scalar indices (`x_ref[k, :, :]`) are PF102 findings too; the oracle counts them apart.
    (report,) = H.trace_reports(path)
    scalar_lines = {a.line for a in report.scalars() if a.line is not None}
    assert report.lines(str(path)) | scalar_lines == {f.span.line for f in _pf102(path.read_text(), path)}


# =========================================================================== comments


KERNEL_WITH_COMMENTS = '''
import functools
import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def kernel(x_ref, o_ref, *, bc):
    # Chunks are lane-aligned, so each step is one unmasked load.
    def body(c, acc):
        return acc + jnp.sum(x_ref[:, pl.ds(c * bc, bc)], axis=1, keepdims=True)

    # Sum the row in column chunks: the whole row never sits in VMEM.
    acc = lax.fori_loop(0, x_ref.shape[1] // bc, body, jnp.zeros((8, 1), jnp.float32))
    o_ref[...] = acc


def row_sums(x, bc=128):
    return pl.pallas_call(
        functools.partial(kernel, bc=bc),
        out_shape=jax.ShapeDtypeStruct((x.shape[0], 1), jnp.float32),
        grid=(x.shape[0] // 8,),
        in_specs=[pl.BlockSpec((8, x.shape[1]), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((8, 1), lambda i: (i, 0)),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
    )(x)
'''


def test_comments_above_the_loop_and_its_body_survive():
    result = H.rewrite(KERNEL_WITH_COMMENTS, Path("commented_loop.py"), **UNSAFE)
    assert result.changed
    assert "# Chunks are lane-aligned, so each step is one unmasked load." in result.source
    assert "# Sum the row in column chunks: the whole row never sits in VMEM." in result.source


# =========================================================================== hazards


@pytest.mark.interp
def test_effect_before_a_read_keeps_its_place():
    from pallas_fix.verify.examples.sources import collect_examples
    from pallas_fix.verify.runner import verify_sources

    path = FIX / "hazard_effect_then_read.py"
    src = path.read_text()
    result = H.rewrite(src, path, **UNSAFE)
    assert result.error is None
    if result.changed:
        verdicts = verify_sources(src, result.source, collect_examples(path, src, pyproject=False), path=str(path))
        assert [v.status for v in verdicts] == ["verified"], [v.message for v in verdicts]


def test_names_a_skipped_steps_block_reads_are_kept_clear_of_index_map_parameters():
    # A causal trip count's skipped steps ask for `jnp.where(k < upper, k, 0)`, `upper` written with
    # the wrapper's names: an index_map parameter of one of those names would hide it (redteam9).
    import libcst as cst

    from pallas_fix.rewrite.blocks.plan import NewAxis, skipped_reads

    axis = NewAxis(cst.Name("n"), "k", "arbitrary", skipped_index="jnp.where(__new__ < (__grid0__ + 1) * bq // k, __new__, 0)")
    assert skipped_reads(axis) == {"jnp", "bq", "k"}
    assert skipped_reads(NewAxis(cst.Name("n"), "k", "arbitrary")) == set()
