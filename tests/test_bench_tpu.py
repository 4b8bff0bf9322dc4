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


def _old_case(bench, pair, size, ms, ran=True, oom=False, hand=None):
    """A case as a run saved it before the plain --apply column (no `apply` / `apply_why`)."""
    from dataclasses import asdict

    original = bench.Side(ran=ran, ms=ms[0] if ran else None, error="VMEM OOM: RESOURCE_EXHAUSTED" if oom else "")
    case = bench.Case(pair, "float32", size, "", "unsafe", original, bench.Side(ran=True, ms=ms[1]),
                      hand=bench.Side(ran=True, ms=hand) if hand else None,
                      err=0.0, err_against="original" if ran else "xla", agrees=True)
    d = asdict(case) | {"ratio": case.ratio}
    del d["apply"], d["apply_why"]
    return d


def _one_window_lifts(monkeypatch) -> None:
    """Reduction lifts as they were before the strip-mined ones (reduction.strip): one loop
    window per grid step, which multiplies the steps of an already pipelined call."""
    import pallas_fix.engine  # noqa: F401  (loads the codemods)

    patched = [m for name, m in list(sys.modules.items()) if name.endswith("lift_reduction") and hasattr(m, "strip_plan")]
    assert patched
    for module in patched:
        monkeypatch.setattr(module, "strip_plan", lambda *a, **k: None)


def test_saved_run_is_summarised_by_what_plain_apply_writes(tmp_path, capsys, monkeypatch):
    """Old JSON still loads; the tree decides --apply's column by the CLI's rule (a lift of an
    already pipelined call whose original fits is held back) and the speed summary counts only
    what --apply writes, the held-back rows listed apart, the VMEM rescues counted. The held-back
    rows are those of one-window lifts (the tree strip-mines these pairs now: the next test)."""
    import json

    _one_window_lifts(monkeypatch)
    bench = _bench()
    cases = [_old_case(bench, "map_silu", "prod", (0.0105, 0.00816)),        # 1.29x, written
             _old_case(bench, "matmul_tiled", "prod", (0.0721, 0.106)),      # 0.68x, held back
             _old_case(bench, "matmul_tiled", "vmem", (None, 0.393), ran=False, oom=True),  # rescue
             _old_case(bench, "flash_attention", "prod", (0.0869, 0.151), hand=0.125)]  # 0.58x, held back
    saved = tmp_path / "old.json"
    saved.write_text(json.dumps(cases))
    assert bench.main(["--table-from", str(saved)]) == 0
    out = capsys.readouterr().out
    rows = [ln for ln in out.splitlines() if ln.startswith("| map_silu") or ln.startswith("| matmul_tiled")]
    rows += [ln for ln in out.splitlines() if ln.startswith("| flash_attention")]
    assert [r.split(" | ")[5] for r in rows] == ["writes", "holds back", "writes", "holds back"], rows
    assert "rewrites plain --apply writes: geometric mean speed ratio 1.29x over 1 cases whose original fits, lowest 1.29x, 0 below 0.95x" in out
    assert "every rewrite fix_source makes (--lift-for-memory writes them all): geometric mean speed ratio 0.80x over 3 cases" in out
    assert "originals out of VMEM: 1; running (and agreeing) after the rewrite plain --apply writes: 1" in out
    held = out.split("held back by plain --apply (memory-only lifts; --lift-for-memory writes them): 2\n")[1]
    assert held.startswith("  matmul_tiled float32 prod (0.68x): trades speed for memory on TPU: the original fits on chip")
    assert "--lift-for-memory" in held.splitlines()[0]
    bars = out.split("issue 27's bars:\n")[1]
    assert "0 rewrites failing to compile where the original compiled: 0, met" in bars
    assert "every out-of-VMEM original with a fix runs after it: 1 of 1, met" in bars
    assert "geometric mean 1.29x (bar 1.0), lowest 1.29x (bar 0.95), met" in bars
    assert ("flash_attention float32 prod: the rewrite at 0.83x the speed of JAX's kernel at the same blocks (bar 0.9), "
            "NOT met; plain --apply holds it back") in bars


def test_the_tree_writes_the_strip_mined_lifts_it_held_back(tmp_path, capsys):
    """The same saved run decided by the tree as it is: the tiled matmul and flash attention lifts
    are strip-mined (windows per step cover the loop at these shapes, so the steps are not
    multiplied) and plain --apply writes them, whatever the old run measured for the one-window
    form."""
    import json

    bench = _bench()
    cases = [_old_case(bench, "matmul_tiled", "prod", (0.0721, 0.106)),
             _old_case(bench, "flash_attention", "prod", (0.0869, 0.151), hand=0.125)]
    saved = tmp_path / "old.json"
    saved.write_text(json.dumps(cases))
    assert bench.main(["--table-from", str(saved)]) == 0
    out = capsys.readouterr().out
    rows = [ln for ln in out.splitlines() if ln.startswith("| matmul_tiled") or ln.startswith("| flash_attention")]
    assert [r.split(" | ")[5] for r in rows] == ["writes", "writes"], rows
    assert "held back by plain --apply" not in out


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


@pytest.mark.interp
@pytest.mark.slow
def test_flash_variants_experiment_runs_on_cpu(tmp_path):
    """benchmarks/tpu_experiments/flash_variants.py --smoke: every kernel of the device experiment
    (the user's, its rewrite made now, JAX's, the three hand-edited variants) runs in TPU interpret
    mode and agrees with the original, and the rows land in --json."""
    import json

    spec = importlib.util.spec_from_file_location(
        "flash_variants_under_test", ROOT / "benchmarks" / "tpu_experiments" / "flash_variants.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    out = tmp_path / "fv.json"
    assert mod.main(["--smoke", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert sorted({r["kernel"] for r in rows}) == sorted(mod.KERNELS)
    assert len(rows) == len(mod.KERNELS) * len(mod.CONFIGS["smoke"])
    assert all(r["ran"] and r["agrees"] and r["against"] == "original" for r in rows), rows


@pytest.mark.interp
@pytest.mark.slow
def test_strip_blocks_experiment_runs_on_cpu(tmp_path):
    """benchmarks/tpu_experiments/strip_blocks.py --smoke: the rewrite called with m times the
    user's block (the strip-mined form issue 27 proposes for row-wise map loops) agrees with the
    original at the user's block, with fewer steps and more bytes per step as m grows."""
    import json

    spec = importlib.util.spec_from_file_location(
        "strip_blocks_under_test", ROOT / "benchmarks" / "tpu_experiments" / "strip_blocks.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    out = tmp_path / "sb.json"
    assert mod.main(["--smoke", "--pair", "map_silu", "--json", str(out)]) == 0
    rows = [r for r in json.loads(out.read_text()) if r["dtype"] == "float32"]
    assert [(r["m"], r["steps"]) for r in rows] == [(1, 4), (2, 2), (4, 1)]
    assert all(r["rewrite_agrees"] and r["rewrite_err"] == 0.0 and r["against"] == "original" for r in rows), rows
    per_step = [r["rewrite_bytes_per_step"] for r in rows]
    assert per_step == sorted(per_step) and per_step[0] * 4 == per_step[-1]
    assert [r["rule_pick"] for r in rows] == [False, False, True]  # 64 rows of 256 f32: far below the budget


def test_strip_rule_stops_at_the_vmem_share_and_the_row_cap():
    spec = importlib.util.spec_from_file_location(
        "strip_blocks_rule_under_test", ROOT / "benchmarks" / "tpu_experiments" / "strip_blocks.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    mib = 2**20

    def rows(per_m_bytes):
        return [{"m": m, "block_rows": 256 * m, "rewrite_bytes_per_step": b, "limit_bytes": 16 * mib}
                for m, b in per_m_bytes]

    by_bytes = rows([(1, 1 * mib), (2, 2 * mib), (4, 4 * mib), (8, 8 * mib)])  # 8 MiB > 16 / 4
    mod.mark_rule(by_bytes)
    assert [r["rule_pick"] for r in by_bytes] == [False, False, True, False]
    by_rows = rows([(1, 1024), (2, 2048), (4, 4096), (8, 8192)])  # 2048 rows > 1024
    mod.mark_rule(by_rows)
    assert [r["rule_pick"] for r in by_rows] == [False, False, True, False]
    none = rows([(1, 5 * mib), (2, 10 * mib)])  # nothing within the share: the user's block stays
    mod.mark_rule(none)
    assert [r["rule_pick"] for r in none] == [True, False]
