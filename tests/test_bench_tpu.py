"""benchmarks/bench_tpu.py: its CPU path (each pair's rewrite made by the product and checked in
TPU interpret mode) and, where JAX's default backend is a TPU, one compiled pair."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import jax
import pytest

ROOT = Path(__file__).resolve().parents[1]


def _bench():
    spec = importlib.util.spec_from_file_location("bench_tpu_under_test", ROOT / "benchmarks" / "bench_tpu.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up by name
    spec.loader.exec_module(mod)
    return mod


def test_every_pair_is_listed_and_has_its_hooks():
    bench = _bench()
    files = sorted(p.stem for p in (ROOT / "benchmarks" / "tpu_pairs").glob("*.py"))
    assert sorted(bench.PAIRS) == files
    for name in bench.PAIRS:
        text = (ROOT / "benchmarks" / "tpu_pairs" / f"{name}.py").read_text()
        for hook in ("ENTRY = ", "CASES = ", "def make_inputs(", "def xla(", "# pallas-fix: example "):
            assert hook in text, f"{name} lacks {hook!r}"


def test_compile_errors_are_named():
    bench = _bench()
    scoped = RuntimeError("RESOURCE_EXHAUSTED: E1001: CompileTimeScopedVmemOom: Scoped allocation ...")
    physical = RuntimeError("RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory in memory space vmem.")
    tiling = ValueError("The Pallas TPU lowering currently requires that the last two dimensions of your block shape are divisible by 8 and 128")
    assert bench.classify_error(scoped).startswith("VMEM OOM: RuntimeError: RESOURCE_EXHAUSTED")
    assert bench.classify_error(physical).startswith("VMEM OOM")
    assert bench.classify_error(tiling).startswith("tiling")
    assert bench.classify_error(KeyError("x")).startswith("error: KeyError")


@pytest.mark.interp
def test_cpu_path_makes_the_rewrite_and_it_agrees():
    bench = _bench()
    [rec] = bench.smoke(["map_silu"])
    assert rec["fix"] == "safe", rec  # plain --apply lifts this loop without needing verification
    assert rec["ok"], rec["problem"]
    assert rec["err"] == 0.0  # the same arithmetic, block by block


@pytest.mark.interp
def test_cpu_path_reports_a_rewrite_that_differs(monkeypatch):
    bench = _bench()
    made = bench.make_rewrite

    def wrong(source, path):  # the product's rewrite with its arithmetic changed
        rewrite = made(source, path)
        rewrite.source = rewrite.source.replace("1.0 + jnp.exp(-x)", "2.0 + jnp.exp(-x)")
        return rewrite

    monkeypatch.setattr(bench, "make_rewrite", wrong)
    [rec] = bench.smoke(["map_silu"])
    assert not rec["ok"]
    assert rec["problem"].startswith("outputs differ")


@pytest.mark.skipif(jax.default_backend() != "tpu", reason="needs a TPU (JAX's default backend is not tpu)")
def test_on_a_tpu_the_rewrite_compiles_and_agrees():
    bench = _bench()
    original, rewritten, rewrite = bench.load_pair("map_silu")
    case = bench.bench_case("map_silu", original, rewritten, rewrite, "prod", "float32", repeat=3)
    assert case.original.ran and case.rewrite.ran, (case.original.error, case.rewrite.error)
    assert case.agrees and case.err_against == "original"
    assert case.ratio is not None and case.ratio > 0
