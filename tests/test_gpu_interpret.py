"""GPU interpret mode readiness: the PF2xx rules and the `--target gpu-interpret` rewrites.

Fixtures: tests/fixtures/gpu_interpret/
- `pf20N_*.py`: one kernel per hazard, run in GPU interpret mode as its author wrote it
  (`interpret=plgpu.InterpretGPUParams()`); `# expect: PF20N` marks where the finding belongs.
- `clean_kernels.py`: near misses of every rule that GPU interpret mode runs correctly.
- `run_modes.py`: runs fixtures under `interpret=True` and GPU interpret mode in a subprocess
  (it needs only jax, so it also ran on jax 0.10.2; see docs/gpu-interpret.md).
and the `--target gpu-interpret` rewrites' own, in tests/fixtures/codemods/static_unroll/ (R5) and
tests/fixtures/codemods/grid_to_loop/:
- `<name>_before.py` / `<name>_after.py`: golden rewrites under `--target gpu-interpret`.
- `refuse_*.py`: kernels those rewrites must leave alone, with the refusal they must give.
The checks every codemod pair gets (golden text and a second run under the target, only
static-unroll / grid-to-loop applied, refusals unchanged and refused under the target, verified in
GPU interpret mode, LibCST's runner on unroll and grid_loop) are in tests/test_codemod_pairs.py.

The interpreter runs are what make the claims true: each hazard fixture fails or computes wrong
results in GPU interpret mode while `interpret=True` runs it, and each after-file matches the
HLO reference in GPU interpret mode.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import pair_harness as H
from kernel_loading import FIXTURES, expected_markers
from pair_harness import Pair, declared_refusal

from pallas_fix.rules.gpu_interpret import hazards as gpu_interpret
from pallas_fix.core.config import Config
from pallas_fix.engine import analyze_source, fix_source
from pallas_fix.rules.registry import ORDER, RULES

FIX = FIXTURES / "gpu_interpret"
GPU = Config(target="gpu-interpret")
GPU_CODEMODS = {"static-unroll", "grid-to-loop"}
HAZARD_FILES = {p.name[:5].upper(): p for p in sorted(FIX.glob("pf2*.py"))}
# What each hazard looks like when GPU interpret mode runs the fixture (None: no error, wrong output).
OBSERVED = {
    "PF201": None,
    "PF202": "AssertionError",
    "PF203": "KeyError: VMEM",
    "PF204": "Only scalar arrays can be converted to Python scalars",
    "PF205": "Scalar arguments not (yet) supported on GPU",
    # jax 0.10.2 and 0.12.0.1 fail in the batching rule; 0.12.1 batches into a grid axis with
    # blocks, which the interpreter rejects as it does PF202's.
    "PF206": ("_pallas_call_batching_rule() got an unexpected keyword argument", "AssertionError"),
}
REWRITE_FAMILIES = [H.FAMILIES["static_unroll"], H.FAMILIES["grid_to_loop"]]
PAIRS = [p for f in REWRITE_FAMILIES for p in f.pairs()]
REFUSALS = [r for f in REWRITE_FAMILIES for r in f.refusals()]
# Every fixture of this module: the hazards and near misses, and the rewrites' pairs and refusals.
ALL_FIXTURES = sorted(p for p in FIX.glob("*.py") if p.name != "run_modes.py") + [
    p for f in REWRITE_FAMILIES for p in sorted(f.path.glob("*.py"))
]
# The originals of these pairs compute wrong results in GPU interpret mode (pl.program_id is 0).
WRONG_IN_GPU_INTERPRET = {"grid_loop", "grid_unroll", "grid_when"}


def _pf2(findings) -> set[tuple[int, str]]:
    return {(f.span.line, f.code) for f in findings if f.code.startswith("PF2")}


def _marked(source: str) -> set[tuple[int, str]]:
    return {(line, c) for line, codes in expected_markers(source).items() for c in codes if c.startswith("PF2")}


def _same(a, b) -> bool:
    return len(a) == len(b) and all(
        np.allclose(np.asarray(x, dtype=float), np.asarray(y, dtype=float), equal_nan=False) for x, y in zip(a, b)
    )


@pytest.fixture(scope="module")
def mode_runs() -> dict:
    """Every fixture kernel under `interpret=True` and GPU interpret mode, in one subprocess
    (running GPU interpret mode here would leave its global state in the test process)."""
    files = [str(p) for p in ALL_FIXTURES if not p.name.startswith("refuse_")]
    env = dict(os.environ, JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run(
        [sys.executable, str(FIX / "run_modes.py"), *files], capture_output=True, text=True, timeout=600, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = {Path(k).name: v for k, v in json.loads(proc.stdout).items()}
    assert len(out) == len(files), "two fixtures share a file name"
    return out


@pytest.fixture(autouse=True, scope="module")
def _start_interpreter_runs(request):
    # The verdicts of the pairs are shared with test_codemod_pairs.py: start them early.
    H.VERDICTS.start(request.session)


# =========================================================================== PF2xx rules


def test_every_rule_has_a_hazard_fixture():
    assert sorted(HAZARD_FILES) == sorted(gpu_interpret.HAZARDS) == sorted(OBSERVED)


@pytest.mark.interp
@pytest.mark.parametrize("code", sorted(OBSERVED))
def test_hazard_shows_in_gpu_interpret_mode_and_is_reported(code, mode_runs):
    path = HAZARD_FILES[code]
    source = path.read_text(encoding="utf-8")
    # The finding: where the markers say, under the default target (the module itself asks for
    # GPU interpret mode).
    findings = analyze_source(source, str(path)).findings
    assert _pf2(findings) == _marked(source)
    assert {c for _, c in _marked(source)} == {code}
    # The hazard: interpret=True runs the kernel; GPU interpret mode fails or is wrong.
    run = mode_runs[path.name]
    assert "out" in run["hlo"], run["hlo"]
    if OBSERVED[code] is None:
        assert "out" in run["gpu"], run["gpu"]
        ref, got = np.asarray(run["hlo"]["out"][0]), np.asarray(run["gpu"]["out"][0], dtype=float)
        assert np.allclose(got[:16], ref[:16]), "block 0 should still be right"
        assert not np.allclose(got[16:], ref[16:], equal_nan=False), "blocks 1.. should be wrong (never written)"
    else:
        seen = (OBSERVED[code],) if isinstance(OBSERVED[code], str) else OBSERVED[code]
        assert any(text in run["gpu"].get("error", "") for text in seen), run["gpu"]


@pytest.mark.interp
def test_near_misses_run_in_gpu_interpret_mode_and_are_not_reported(mode_runs):
    path = FIX / "clean_kernels.py"
    source = path.read_text(encoding="utf-8")
    for config in (Config(), GPU):
        assert _pf2(analyze_source(source, str(path), config).findings) == set()
    run = mode_runs[path.name]
    assert "out" in run["hlo"] and "out" in run["gpu"], run
    assert _same(run["gpu"]["out"], run["hlo"]["out"])


@pytest.mark.parametrize("code", sorted(OBSERVED))
def test_rules_fire_only_when_gpu_interpret_mode_is_in_play(code):
    path = HAZARD_FILES[code]
    source = path.read_text(encoding="utf-8")
    plain = source.replace("interpret=plgpu.InterpretGPUParams(),", "")
    assert "InterpretGPUParams" not in plain
    assert _pf2(analyze_source(plain, str(path)).findings) == set()
    assert _pf2(analyze_source(plain, str(path), GPU).findings) == _marked(source)


def test_force_gpu_interpret_mode_and_the_private_import_trigger_the_rules():
    source = (FIX / "pf203_vmem_scratch.py").read_text(encoding="utf-8").replace("interpret=plgpu.InterpretGPUParams(),", "")
    forced = source + "\n\ndef run(x):\n    with plgpu.force_gpu_interpret_mode():\n        return scaled(x)\n"
    private = "from jax._src.pallas.mosaic_gpu.interpret.params import InterpretGPUParams\n" + source
    for text in (forced, private):
        findings = analyze_source(text, "k.py").findings
        assert [f.code for f in findings if f.code.startswith("PF2")] == ["PF203"]
        assert "GPU interpret mode: the module uses" in findings[0].message


def test_pf201_is_an_error_and_points_at_the_program_id_call():
    path = HAZARD_FILES["PF201"]
    source = path.read_text(encoding="utf-8")
    (f,) = [f for f in analyze_source(source, str(path)).findings if f.code == "PF201"]
    assert f.severity == "error"
    line = source.splitlines()[f.span.line - 1]
    assert line[f.span.column : f.span.end_column] == "pl.program_id(0)"
    assert "(4 steps)" in f.message


def test_pf202_tells_a_moving_block_from_an_unproven_whole_block():
    base = (FIX / "pf202_blockspec.py").read_text(encoding="utf-8")
    unproven = base.replace("lambda i: (i,)", "lambda i: (0,)")
    whole = unproven.replace("pl.BlockSpec((BS,),", "pl.BlockSpec(x.shape,")
    moving = [f.message for f in analyze_source(base, "k.py").findings if f.code == "PF202"]
    maybe = [f.message for f in analyze_source(unproven, "k.py").findings if f.code == "PF202"]
    assert len(moving) == 2 and all("selects block `i`" in m for m in moving)
    assert len(maybe) == 2 and all("cannot prove is the whole array" in m for m in maybe)
    assert _pf2(analyze_source(whole, "k.py").findings) == set()


def test_pf2xx_suppression():
    path = HAZARD_FILES["PF203"]
    source = path.read_text(encoding="utf-8").replace("# expect: PF203", "# pallas-fix: ignore[PF203]")
    assert _pf2(analyze_source(source, str(path)).findings) == set()


def test_rules_are_registered_unordered_and_documented_with_versions(capsys):
    from pallas_fix.frontends.cli.app import main

    for code, hazard in gpu_interpret.HAZARDS.items():
        rule = RULES[code]
        assert code not in ORDER, "kernel rules must not claim dynamic indices"
        for version in hazard.versions:
            assert version in rule.doc, f"{code} doc does not say it was observed on jax {version}"
        assert "What to do" in rule.doc or "Fix" in rule.doc
        with pytest.raises(SystemExit) as exit_info:
            main(["explain", code])
        assert exit_info.value.code in (0, None)
        assert rule.summary in capsys.readouterr().out
    assert RULES["PF201"].severity == "error"


def test_messages_warn_when_the_installed_jax_was_not_checked(monkeypatch):
    path = HAZARD_FILES["PF205"]
    source = path.read_text(encoding="utf-8")
    monkeypatch.setattr(gpu_interpret, "installed_jax_version", lambda: "0.9.0")
    (f,) = [f for f in analyze_source(source, str(path)).findings if f.code == "PF205"]
    assert "observed on jax 0.10.2, 0.12.0.1 and 0.12.1; not checked on the installed jax 0.9.0" in f.message
    monkeypatch.setattr(gpu_interpret, "installed_jax_version", lambda: "0.12.0.1")
    (f,) = [f for f in analyze_source(source, str(path)).findings if f.code == "PF205"]
    assert "not checked" not in f.message
    assert "confirmed on this version" in gpu_interpret.verification_note("0.10.2")
    assert "not checked on the installed jax 0.13.0" in gpu_interpret.verification_note("0.13.0")


def test_installed_version_comes_from_package_metadata():
    from importlib import metadata

    assert gpu_interpret.installed_jax_version() == metadata.version("jax")


# =========================================================================== rewrites


def test_fixture_set():
    assert {p.name for p in PAIRS} >= {"unroll", "unroll_carry", "pl_loop_unroll", "grid_loop", "grid_unroll", "grid_when"}
    assert all(p.after.exists() for p in PAIRS)
    assert all(declared_refusal(r.read_text(encoding="utf-8")) for r in REFUSALS)
    assert len(REFUSALS) >= 6


@pytest.mark.parametrize("pair", PAIRS, ids=str)
def test_default_target_offers_no_gpu_interpret_rewrite(pair: Pair):
    analysis = analyze_source(pair.before_source, str(pair.before))
    assert not {f.fix_id for f in analysis.findings} & GPU_CODEMODS
    assert not {p.codemod for p in analysis.plans} & GPU_CODEMODS


def test_blockspec_rewrites_are_screened_out_under_the_gpu_interpret_target():
    path = H.FAMILIES["static_unroll"].path / "refuse_unroll_over_limit.py"
    source = path.read_text(encoding="utf-8")
    default = analyze_source(source, str(path))
    assert any(p.codemod == "lift-loop" for p in default.plans), "lift-loop should lift this loop by default"
    reasons = [f.refusal or "" for f in analyze_source(source, str(path), GPU).findings if f.code == "PF101"]
    assert reasons and all("lift-loop would add a BlockSpec whose window is not the whole array (PF202)" in r for r in reasons)


def test_unroll_limit_is_configurable():
    pair = next(p for p in PAIRS if p.name == "unroll")
    tight = Config(target="gpu-interpret", unroll_limit=3)
    result = fix_source(pair.before_source, str(pair.before), tight)
    assert result.source == pair.before_source
    assert any("more than the unroll limit 3" in (f.refusal or "") for f in result.remaining)


def test_suppressed_pf201_keeps_its_grid():
    pair = next(p for p in PAIRS if p.name == "grid_when")
    source = pair.before_source.replace(
        "    @pl.when(pl.program_id(0) == 0)\n", "    @pl.when(pl.program_id(0) == 0)  # pallas-fix: ignore[PF201]\n"
    )
    assert source != pair.before_source
    assert fix_source(source, str(pair.before), GPU).source == source


def test_pf201_carries_the_grid_to_loop_fix_only_under_the_target():
    path = HAZARD_FILES["PF201"]
    source = path.read_text(encoding="utf-8")
    (plain,) = [f for f in analyze_source(source, str(path)).findings if f.code == "PF201"]
    assert not plain.fixable and "--target gpu-interpret" in plain.refusal
    (targeted,) = [f for f in analyze_source(source, str(path), GPU).findings if f.code == "PF201"]
    assert targeted.fixable and targeted.fix_id == "grid-to-loop"


@pytest.mark.interp
@pytest.mark.parametrize("pair", PAIRS, ids=str)
def test_rewrite_matches_the_reference_in_gpu_interpret_mode(request, pair: Pair, mode_runs):
    # The verdicts of test_codemod_pairs.py::test_pair_verified_in_the_interpreters (one run).
    verdicts = H.VERDICTS.get(request, pair)
    assert verdicts, "no verdict"
    for v in verdicts:
        assert v.status == "verified", v.message
        assert "gpu-interpret" in v.interpreters
        assert "gpu-interpret on jax" in v.message
        if v.dynamic_slices_after is not None:
            assert v.dynamic_slices_after == pair.remaining
    # Directly, outside the verifier: the after-file in GPU interpret mode gives the original's
    # interpret=True result; the grid originals do not.
    before, after = mode_runs[pair.before.name], mode_runs[pair.after.name]
    reference = before["hlo"]["out"]
    assert _same(after["gpu"]["out"], reference)
    if pair.name in WRONG_IN_GPU_INTERPRET:
        assert "out" in before["gpu"] and not _same(before["gpu"]["out"], reference)


@pytest.mark.interp
def test_the_default_targets_lifted_loop_does_not_run_in_gpu_interpret_mode():
    """Why the target matters: R1's grid + BlockSpecs fail there, R5's unrolled loop does not."""
    from pallas_fix.verify import collect_examples, verify_sources

    pair = next(p for p in PAIRS if p.name == "unroll")
    if not any(p.codemod == "lift-loop" for p in analyze_source(pair.before_source, str(pair.before)).plans):
        pytest.fail("lift-loop no longer lifts this loop: the test needs a kernel it lifts")
    lifted = fix_source(pair.before_source, str(pair.before), codemods={"lift-loop"})
    assert lifted.changed
    examples = collect_examples(pair.before, pair.before_source, pyproject=False)
    (v,) = verify_sources(pair.before_source, lifted.source, examples, gpu_interpret=True, tpu_interpret=False)
    assert v.status == "error" and "has_trivial_window" in v.message, v.message


def test_run_modes_reads_example_directives():
    """The runner's tiny directive parser agrees with pallas-fix's on every fixture it runs."""
    from pallas_fix.verify.examples.sources import collect_examples

    directive = re.compile(r"#\s*pallas-fix:\s*example\s+(\w+)\(")
    for path in ALL_FIXTURES:
        source = path.read_text(encoding="utf-8")
        examples = collect_examples(path, source, pyproject=False)
        assert [e.entry for e in examples] == directive.findall(source), path.name


def test_an_atomic_index_array_is_pf108_but_not_pf204():
    """`atomic_add(o_ref, idx, v)` in GPU interpret mode fails, but not with PF204's TypeError
    (jax 0.12: a ValueError from the swap the atomic becomes), so only PF108 speaks for it."""
    source = (
        "import jax\nimport jax.numpy as jnp\nfrom jax.experimental import pallas as pl\n"
        "from jax.experimental.pallas import triton as pltriton\n"
        "from jax.experimental.pallas import mosaic_gpu as plgpu\n\n\n"
        "def k(b_ref, v_ref, o_ref):\n    pltriton.atomic_add(o_ref, b_ref[...], v_ref[...])\n\n\n"
        "def f(b, v):\n    return pl.pallas_call(k, out_shape=jax.ShapeDtypeStruct((16,), jnp.float32),"
        " interpret=plgpu.InterpretGPUParams())(b, v)\n"
    )
    assert [(f.span.line, f.code) for f in analyze_source(source, "k.py").findings] == [(9, "PF108")]
