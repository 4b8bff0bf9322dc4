"""--apply verifies and accepts each kernel's rewrite on its own (pallas_fix.frontends.kernel_rewrites).

The unit tests drive `rewrite_by_kernel` on the bundled example (three kernels: an independent
loop, program_id windows, an unsafe K reduction) with a scripted verifier, so that which kernel
fails is chosen by the test; the interpreter tests run the real thing through the CLI.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from pallas_fix.core.config import Config
from pallas_fix.engine import analyze_source
from pallas_fix.frontends.cli.app import main
from pallas_fix.frontends.kernel_rewrites import rewrite_by_kernel
from pallas_fix.verify.runner import Verdict

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "tiled_kernels.py"
SOURCE = EXAMPLE.read_text()
KERNELS = ("silu_kernel", "scale_rows_kernel", "matmul_kernel")


def scripted(outcomes: dict[str, str], calls: list):
    """A verifier answering `outcomes[kernel]` (verified | mismatch | elsewhere) for the kernel a
    rewrite changes; "elsewhere" is a verified example that never ran the kernel."""

    def verify(old: str, new: str, kernel):
        calls.append(kernel)
        status = outcomes.get(kernel, "verified")
        traced = "other_kernel" if status == "elsewhere" else kernel
        return [Verdict(entry="e", status="mismatch" if status == "mismatch" else "verified",
                        message="outputs differ", details={"pallas_calls": [{"kernel": traced}]})]

    return verify


def kernels_with_findings(text: str) -> set:
    return {f.kernel for f in analyze_source(text, "k.py", Config()).findings}


def test_every_kernel_is_verified_on_its_own_and_unsafe_fixes_count_once_verified():
    calls: list = []
    out = rewrite_by_kernel(SOURCE, "k.py", Config(), scripted({}, calls), allow_unsafe=False)
    assert [k.kernel for k in out.kernels] == list(KERNELS) and calls == list(KERNELS)
    assert all(k.status == "verified" for k in out.kernels)
    # matmul's fix is unsafe (a reduction): verified, it needs no --unsafe-fixes.
    assert out.remaining == [] and "pl.when" in out.source


def test_a_kernel_that_fails_verification_keeps_its_code_and_the_others_are_rewritten():
    out = rewrite_by_kernel(SOURCE, "k.py", Config(), scripted({"scale_rows_kernel": "mismatch"}, []), allow_unsafe=False)
    status = {k.kernel: k.status for k in out.kernels}
    assert status == {"silu_kernel": "verified", "scale_rows_kernel": "failed", "matmul_kernel": "verified"}
    assert kernels_with_findings(out.source) == {"scale_rows_kernel"}
    failed = next(k for k in out.kernels if k.status == "failed")
    assert "program_id window" in failed.reason and "outputs differ" in failed.reason
    # scale_rows' code is the original's, byte for byte.
    original = SOURCE[SOURCE.index("def scale_rows_kernel"): SOURCE.index("@jax.jit\ndef scale_rows")]
    assert original in out.source


def test_a_kernel_no_example_reaches_gets_only_its_safe_fixes_marked_not_verified():
    outcomes = {"silu_kernel": "elsewhere", "matmul_kernel": "elsewhere"}
    out = rewrite_by_kernel(SOURCE, "k.py", Config(), scripted(outcomes, []), allow_unsafe=False)
    status = {k.kernel: (k.status, k.reason) for k in out.kernels}
    assert status["silu_kernel"] == ("not verified", "no example reaches this kernel")
    assert status["scale_rows_kernel"][0] == "verified"
    assert status["matmul_kernel"][0] == "refused" and "--unsafe-fixes" in status["matmul_kernel"][1]
    assert kernels_with_findings(out.source) == {"matmul_kernel"}


def test_without_examples_safe_fixes_are_written_unverified_and_require_verified_refuses_them():
    out = rewrite_by_kernel(SOURCE, "k.py", Config(), None, allow_unsafe=False)
    assert [(k.kernel, k.status) for k in out.kernels] == [
        ("silu_kernel", "not verified"), ("scale_rows_kernel", "not verified"), ("matmul_kernel", "refused")]
    strict = rewrite_by_kernel(SOURCE, "k.py", Config(), None, allow_unsafe=True, require_verified=True)
    assert {k.status for k in strict.kernels} == {"refused"} and strict.source == SOURCE


def test_only_the_named_kernels_are_rewritten():
    out = rewrite_by_kernel(SOURCE, "k.py", Config(), scripted({}, []), allow_unsafe=False, only_kernels={"matmul_kernel"})
    assert [k.kernel for k in out.kernels] == ["matmul_kernel"]
    assert kernels_with_findings(out.source) == {"silu_kernel", "scale_rows_kernel"}


@pytest.mark.interp
def test_cli_apply_reports_per_kernel_and_writes_a_verified_reduction_without_unsafe_fixes(capsys, tmp_path):
    path = tmp_path / EXAMPLE.name
    shutil.copy(EXAMPLE, path)
    code = 0
    try:
        # matmul's panels fit on chip and are already pipelined over (i, j): lifting its K loop only
        # trades speed for memory on TPU, which --apply writes on request (tests/test_lift_intent.py)
        main(["--apply", "--lift-for-memory", str(path)])
    except SystemExit as exc:
        code = exc.code
    err = capsys.readouterr().err
    assert code == 0, err
    assert re.search(r"^verified matmul: 2 dynamic slices -> 0", err, re.M), err
    assert "lifted the reduction over `k` in `matmul_kernel`" in err
    assert kernels_with_findings(path.read_text()) == set()


@pytest.mark.interp
def test_a_kernel_the_original_cannot_run_is_verified_against_its_start_fixed_text(capsys, tmp_path):
    seed = Path(__file__).parent / "fixtures" / "kernel_rewrites" / "seed_gather_one_element.py"
    path = tmp_path / seed.name
    shutil.copy(seed, path)
    code = 0
    try:
        main(["--apply", "--backend", "tpu", str(path)])
    except SystemExit as exc:
        code = exc.code
    err = capsys.readouterr().err
    assert code == 0, err
    assert "not verified" in err and "no original output to compare with" in err  # the PF107 step
    # Only the start fix is written unverified; the lift and the gather are verified together.
    assert re.search(r"^verified gather: 2 dynamic slices -> 0,.*tpu-interpret", err, re.M), err
    text = path.read_text()
    assert "pltpu.PrefetchScalarGridSpec(" in text and "lambda k, idx_ref: (idx_ref[k], 0)" in text
    kernel = text[text.index("def gather_kernel"):text.index("def gather(")]
    assert "pl.ds(" not in kernel, kernel
    assert kernels_with_findings(text) == set()
