"""Verification on the chip (pallas_fix/verify/device/): on a machine with a TPU,
each verdict also compiles original and rewrite there, compares and times them, and --apply lets
that measurement decide instead of the step-count model. The decision and the words are checked
with scripted verdicts (CI has no TPU); the run itself only where there is one."""

from __future__ import annotations

from pathlib import Path

import pytest

from pallas_fix.core.config import Config
from pallas_fix.engine import fix_source
from pallas_fix.frontends.kernel_rewrites import chip_times, rewrite_by_kernel
from pallas_fix.verify.device.chip import DeviceRun, tpu_visible
from pallas_fix.verify.runner import Verdict, verify_sources
from pallas_fix.core.examples import parse_example

MATMUL = Path(__file__).parent / "fixtures" / "codemods" / "lift_reduction" / "matmul_tpu_before.py"
EXAMPLE = "matmul(f32[256, 512], f32[512, 256], bm=128, bn=128, bk=128)"


def _records() -> list[dict]:
    """A lift the step-count model holds back (the original fits and is pipelined)."""
    return [{"kernel": "matmul_kernel", "trades_speed_for_memory": True, "fits_before": True, "steps_before": 4,
             "steps_after": 16, "adds_scratch": True, "before_bytes": 1 << 20, "after_bytes": 1 << 19}]


def _scripted(ms: dict, records: list[dict]):
    device = {"chip": "TPU v5 lite", "original": "ok", "rewrite": "ok", "ms": ms, "mismatch": None}

    def verify(old, new, kernel):
        return [Verdict(entry="matmul", status="verified", example=EXAMPLE, speed=records,
                        details={"pallas_calls": [{"kernel": kernel}], "device": device})]
    return verify


def test_a_measured_speed_outranks_the_model_both_ways():
    src = MATMUL.read_text()
    faster = rewrite_by_kernel(src, str(MATMUL), Config(), _scripted({"original": 0.2, "rewrite": 0.1}, _records()),
                               allow_unsafe=False)
    (k,) = faster.kernels
    assert k.status == "verified" and "pl.program_id(2)" in faster.source
    assert "measured on the TPU v5 lite at matmul(" in k.applied[0] and "0.2 ms -> 0.1 ms per call (2.00x" in k.applied[0]
    slower = rewrite_by_kernel(src, str(MATMUL), Config(), _scripted({"original": 0.1, "rewrite": 0.2}, _records()),
                               allow_unsafe=False)
    (k,) = slower.kernels
    assert k.status == "refused" and slower.source == src
    assert "already pipelined; measured on the TPU v5 lite" in k.reason and "(0.50x" in k.reason
    assert "--lift-for-memory" in k.reason
    # no step record says the call was pipelined before: written, saying how fast it measured
    unpiped = rewrite_by_kernel(src, str(MATMUL), Config(), _scripted({"original": 0.1, "rewrite": 0.2}, []),
                                allow_unsafe=False)
    (k,) = unpiped.kernels
    assert k.status == "verified" and "(0.50x the original's speed)" in k.applied[0]


def test_the_slowest_example_decides_and_a_failed_original_times_nothing():
    def verdict(ms, original="ok"):
        return Verdict(entry="m", status="verified", example=f"m({ms})",
                       details={"device": {"chip": "c", "original": original, "ms": ms}})
    assert chip_times([verdict({"original": 1.0, "rewrite": 0.5}), verdict({"original": 1.0, "rewrite": 2.0})])[0] == 0.5
    assert chip_times([verdict({"rewrite": 0.5}, original="VMEM OOM: ...")]) is None
    assert chip_times([Verdict(entry="m", status="verified")]) is None


def test_a_rewrite_failing_where_the_original_compiles_is_a_failure():
    run = DeviceRun("TPU v5 lite", rewrite="tiling: block shape (1, 100) ...")
    assert "the rewrite fails where the original runs: tiling" in run.failure
    rescued = DeviceRun("TPU v5 lite", original="VMEM OOM: RESOURCE_EXHAUSTED", ms={"rewrite": 3.66}, reference_rel_err=7.8e-4)
    assert rescued.failure is None
    assert rescued.note() == ("on the TPU v5 lite (compiled) the original fails (VMEM OOM) and the rewrite runs in 3.66 ms, "
                              "7.8e-04 from the interpreters' reference (relative)")
    both = DeviceRun("TPU v5 lite", ms={"original": 0.087, "rewrite": 0.124})
    assert both.note().endswith("0.087 ms -> 0.124 ms per call (0.70x)")
    assert DeviceRun("c", mismatch="max abs err 1").failure.endswith("outputs differ: max abs err 1")


def test_jax_platforms_cpu_turns_the_chip_check_off(monkeypatch):
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    assert tpu_visible() is False


@pytest.mark.skipif(tpu_visible(), reason="checks a machine without a TPU")
def test_without_a_tpu_verification_runs_nothing_compiled():
    src = MATMUL.read_text()
    new = fix_source(src, str(MATMUL), unsafe=True).source
    (v,) = verify_sources(src, new, [parse_example(EXAMPLE)], path=str(MATMUL), timeout_s=300)
    assert v.ok and "device" not in v.details and "compiled" not in v.message


@pytest.mark.skipif(not tpu_visible(), reason="needs a TPU")
def test_on_a_tpu_verification_compiles_both_and_times_them():
    src = MATMUL.read_text()
    new = fix_source(src, str(MATMUL), unsafe=True).source
    (v,) = verify_sources(src, new, [parse_example(EXAMPLE)], path=str(MATMUL), timeout_s=600)
    assert v.ok, v.message
    device = v.details["device"]
    assert device["original"] == "ok" and device["rewrite"] == "ok" and device["mismatch"] is None
    assert set(device["ms"]) == {"original", "rewrite"} and "(compiled) both run and agree" in v.message
