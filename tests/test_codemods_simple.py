"""The expression-level codemods: traced constant → Python int (R4, PF104) and non-integer start →
integer scalar (PF107).

Fixtures live in tests/fixtures/codemods/traced_constant/ and tests/fixtures/codemods/scalar_start/:
- `<case>_before.py` / `_after.py`: golden pairs (scalar_start's `unsafe` case needs unsafe fixes);
- `refuse_*.py`: files the codemod must leave unchanged; a line ending in `# refuse: <words>`
  carries a finding whose refusal contains <words>.

The checks every codemod pair gets are in tests/test_codemod_pairs.py (each codemod run alone:
the golden text; a second run, even with unsafe fixes, applies nothing; refusals unchanged with and
without unsafe fixes, every finding of the code a marked refusal; static detection and the jaxpr
agree on what stays dynamic and the fixed kind of slice is gone; both kernels verified in the
interpreters, PF107's in GPU interpret mode too, except unsafe and one-element pairs; the LibCST
runner and `pallas-fix --apply --no-verify --select CODE` write the golden text and leave a
refusal alone). This module adds their own checks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import pair_harness as H
from pallas_fix.core.config import Config
from pallas_fix.engine import analyze_source, fix_source
from pallas_fix.core.model import FixSafety
from pallas_fix.verify.examples.sources import collect_examples

FIX = H.CODEMOD_FIXTURES
CODEMODS = {
    # fixture folder: (codemod name, rule code, module, LibCST codemod class)
    "traced_constant": ("traced-constant", "PF104", "traced_constant", "TracedConstantToInt"),
    "scalar_start": ("scalar-start", "PF107", "scalar_start", "ScalarStart"),
}
GPU_ERROR = "Dynamic indexing not supported in GPU interpret mode"
HLO_ONE_ELEMENT_ERROR = "start_indices arguments to dynamic_slice must be scalars"


def _codemod_of(path: Path) -> tuple[str, str, str, str]:
    info = CODEMODS.get(path.parent.name)
    assert info is not None, f"{path} is in no codemod folder of this module"
    return info


def _pairs() -> list[tuple[Path, Path]]:
    return [(p.before, p.after) for folder in CODEMODS for p in H.FAMILIES[folder].pairs()]


PAIRS = _pairs()
PAIR_IDS = [f"{b.parent.name}/{b.name.removesuffix('_before.py')}" for b, _ in PAIRS]
REFUSALS = [r for folder in CODEMODS for r in H.FAMILIES[folder].refusals()]


def _unsafe(path: Path) -> bool:
    return H.FAMILIES[path.parent.name].needs_unsafe(path.name.removesuffix("_before.py").removesuffix("_after.py"))


def _fix(path: Path, source: str | None = None, *, unsafe: bool | None = None):
    name = _codemod_of(path)[0]
    src = path.read_text() if source is None else source
    return fix_source(src, str(path), Config(), codemods={name}, unsafe=_unsafe(path) if unsafe is None else unsafe)


def _one_element(before: Path) -> bool:
    return "def reference(" in before.read_text()


def test_fixture_sets_are_complete():
    counts = {folder: sum(1 for b, _ in PAIRS if b.parent.name == folder and not _unsafe(b)) for folder in CODEMODS}
    assert all(n >= 4 for n in counts.values()), counts
    assert all(after.exists() for _, after in PAIRS)
    assert {_codemod_of(p)[0] for p in REFUSALS} == {info[0] for info in CODEMODS.values()}


# =========================================================================== findings


@pytest.mark.parametrize("before, after", PAIRS, ids=PAIR_IDS)
def test_every_reported_start_gets_a_fix_and_none_remains(before, after):
    name, code, _, _ = _codemod_of(before)
    findings = [f for f in analyze_source(before.read_text(), str(before)).findings if f.code == code]
    assert findings
    for f in findings:
        assert f.fixable and f.fix_id == name, (f.span.line, f.refusal)
    safeties = {f.fix_safety for f in findings}
    # an unsafe pair needs --unsafe-fixes for at least one of its fixes; a safe pair for none
    assert (FixSafety.UNSAFE in safeties) is _unsafe(before), safeties
    left = [f for f in analyze_source(after.read_text(), str(after)).findings if f.code == code]
    assert left == []


def test_unsafe_casts_are_not_applied_by_default():
    before = FIX / "scalar_start" / "unsafe_before.py"
    src = before.read_text()
    assert _fix(before, unsafe=False).source == src
    (finding,) = [f for f in analyze_source(src, str(before)).findings if f.code == "PF107"]
    assert finding.fix_safety is FixSafety.UNSAFE
    plan = next(p for p in analyze_source(src, str(before)).plans if p.codemod == "scalar-start")
    assert "strided window" in plan.description


# =========================================================================== refusals


def test_narrow_dtype_refusal_names_the_wrapped_value():
    path = FIX / "traced_constant" / "refuse_traced_constant.py"
    (f,) = [f for f in analyze_source(path.read_text(), str(path)).findings if "jnp.int8" in (f.refusal or "")]
    assert "200" in f.refusal and "[-128, 127]" in f.refusal


# =========================================================================== GPU interpret mode


_GPU_HARNESS = textwrap.dedent(
    """
    import json, sys, tempfile
    import numpy as np
    job = json.loads(sys.stdin.read())
    from pallas_fix.verify.worker import main as W
    from pallas_fix.core.examples import parse_example
    import jax
    from jax.experimental.pallas import mosaic_gpu as plgpu
    W.install_patches()
    tmp = tempfile.mkdtemp()
    mods = {}
    for kind, key in (("original", "before"), ("rewritten", "after")):
        with W.forced_interpreter(True):
            mods[key] = W.load_module(kind, job[key], job["path"], tmp)
    ex = parse_example(job["example"])
    call = W.Call(ex)
    out = {}
    def leaves(o):
        return [np.asarray(x, dtype=np.float64).tolist() for x in jax.tree_util.tree_leaves(o)]
    for seed in (0, 1):
        inputs = call.inputs(seed)
        for key in ("before", "after"):
            fn = getattr(mods[key], ex.entry)
            for name, interp in (("hlo", True), ("gpu", plgpu.InterpretGPUParams())):
                W._reset_interpreters()
                try:
                    out[f"{key}-{name}-{seed}"] = {"ok": True, "leaves": leaves(W.Runner(fn, call, interp)(inputs))}
                except Exception as e:
                    out[f"{key}-{name}-{seed}"] = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        ref = getattr(mods["before"], "reference", None)
        if ref is not None:
            out[f"reference-{seed}"] = {"ok": True, "leaves": leaves(call.bind(ref)(*inputs))}
    print("@@RESULT@@" + json.dumps(out))
    """
)


def _close(got: dict, want: dict) -> bool:
    return len(got["leaves"]) == len(want["leaves"]) and all(
        np.allclose(np.array(a), np.array(b), rtol=1e-5, atol=1e-5) for a, b in zip(got["leaves"], want["leaves"])
    )


@pytest.mark.interp
@pytest.mark.parametrize(
    "before, after",
    [p for p in PAIRS if p[0].parent.name == "scalar_start" and not _unsafe(p[0])],
    ids=[i for p, i in zip(PAIRS, PAIR_IDS) if p[0].parent.name == "scalar_start" and not _unsafe(p[0])],
)
def test_gpu_interpret_mode_rejects_the_original_and_runs_the_rewrite(before, after):
    src = before.read_text()
    (example,) = collect_examples(before, src)
    job = {"before": src, "after": after.read_text(), "path": str(before), "example": example.text}
    run = subprocess.run(
        [sys.executable, "-c", _GPU_HARNESS], input=json.dumps(job), capture_output=True, text=True, timeout=600,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )
    assert "@@RESULT@@" in run.stdout, run.stderr[-3000:]
    res = json.loads(run.stdout.split("@@RESULT@@", 1)[1])
    one_element = _one_element(before)
    for seed in (0, 1):
        assert not res[f"before-gpu-{seed}"]["ok"]
        assert GPU_ERROR in res[f"before-gpu-{seed}"]["error"]
        if one_element:
            # the (1,)-shaped start cannot run in the HLO interpreter either: the fixture's
            # plain jax.numpy `reference` stands in for the original
            assert HLO_ONE_ELEMENT_ERROR in res[f"before-hlo-{seed}"]["error"]
            want = res[f"reference-{seed}"]
        else:
            want = res[f"before-hlo-{seed}"]
            assert want["ok"], want.get("error")
        for where in ("hlo", "gpu"):
            got = res[f"after-{where}-{seed}"]
            assert got["ok"], got.get("error", "")[-2000:]
            assert _close(got, want), f"after under {where} differs from the reference (seed {seed})"


@pytest.mark.interp
def test_int32_cast_is_the_conversion_the_hlo_interpreter_applies():
    """A float (or bool) start and the same start cast with `.astype(jnp.int32)` read and write
    the same elements in the HLO interpreter, for fractional, negative, out-of-range, huge,
    infinite and NaN starts: the interpreter converts a start with convert_element_type(int32)
    before its dynamic_slice / dynamic_update_slice, which is exactly what the cast does."""
    import jax
    import jax.numpy as jnp
    from jax import lax
    from jax.experimental import pallas as pl

    n, w = 64, 8
    starts = np.array(
        [0, 0.4, 0.5, 0.9999, 1, 3.7, -0.5, -0.9, -1, -3.7, -63.5, 55.9, 56, 56.1, 63.9, 64, 100.5, -100.5,
         2.0**31, -(2.0**31), 3e9, -3e9, np.inf, -np.inf, np.nan, 1e-30, 7.5, 2.0**24 + 2],
        np.float32,
    )
    k = len(starts)

    def run(cast: bool):
        def kernel(s_ref, x_ref, o_ref, p_ref, q_ref, b_ref):
            def body(i, carry):
                f = s_ref[i]
                st = f.astype(jnp.int32) if cast else f
                o_ref[pl.ds(i * w, w)] = x_ref[pl.ds(st, w)]  # get
                p_ref[...] = jnp.zeros_like(p_ref)
                p_ref[pl.ds(st, w)] = x_ref[pl.ds(i, w)]  # swap
                p_ref[pl.ds(st, w)] += x_ref[pl.ds(i, w)]  # addupdate
                q_ref[pl.ds(i * n, n)] = p_ref[...]
                odd = (i % 2) == 1
                b_ref[pl.ds(i * w, w)] = x_ref[pl.ds(odd.astype(jnp.int32) if cast else odd, w)]
                return carry

            lax.fori_loop(0, k, body, None)

        shapes = [(k * w,), (n,), (k * n,), (k * w,)]
        call = pl.pallas_call(
            kernel, interpret=True, out_shape=tuple(jax.ShapeDtypeStruct(s, jnp.float32) for s in shapes)
        )
        return [np.asarray(a) for a in call(starts, jnp.arange(n, dtype=jnp.float32) + 1)]

    plain, cast = run(False), run(True)
    for a, b in zip(plain, cast):
        np.testing.assert_array_equal(a, b)
    # the comparison has teeth: truncation toward zero and clamping are visible in the output
    firsts = plain[0].reshape(k, w)[:, 0] - 1
    assert firsts[list(starts).index(np.float32(3.7))] == 3
    assert firsts[list(starts).index(np.float32(-0.5))] == 0
    assert firsts[list(starts).index(np.float32(100.5))] == n - w


# =========================================================================== R6: scalar prefetch (PF105)
# The golden pairs and refusals are tests/fixtures/codemods/scalar_prefetch/ (run by
# tests/test_codemod_pairs.py); these are the checks only R6 has.

SEED = H.REPO / "tests" / "fixtures" / "gpu_interpret_policy" / "seed_gather.py"
PREFETCH = FIX / "scalar_prefetch"


def _tpu(**kw) -> Config:
    from pallas_fix.core.model import Backend

    return Config(backend=Backend.TPU, **kw)


def test_scalar_prefetch_is_unsafe_and_waits_for_verification():
    before = PREFETCH / "map_gather_before.py"
    src = before.read_text()
    (finding,) = [f for f in analyze_source(src, str(before)).findings if f.code == "PF105"]
    assert finding.fixable and finding.fix_id == "scalar-prefetch" and finding.fix_safety is FixSafety.UNSAFE
    assert fix_source(src, str(before)).source == src  # not without --unsafe-fixes or a verification
    assert fix_source(src, str(before), unsafe=True).source == (PREFETCH / "map_gather_after.py").read_text()


@pytest.mark.parametrize("name, lift", [
    ("loop_gather", "lifted the loop over `k`"),
    ("paged_sum", "lifted the reduction over `j`"),
    ("paged_sum_in_place", "lifted the reduction over `j`"),
    ("paged_attention", "lifted the reduction over `p`"),
])
def test_scalar_prefetch_lifts_the_loop_and_moves_the_table_in_one_plan(name, lift):
    """In the loop form the PF105 finding carries the whole fix (R1 or R2, then R6), so R6 alone
    (the LibCST command, an editor's quick fix) writes the text the rounds of every planner write."""
    before = PREFETCH / f"{name}_before.py"
    src = before.read_text()
    findings = [f for f in analyze_source(src, str(before)).findings if f.code == "PF105"]
    assert findings and all(f.fix_id == "scalar-prefetch" and lift in f.plan.description for f in findings)
    alone = fix_source(src, str(before), codemods={"scalar-prefetch"}, unsafe=True)
    assert alone.rounds == len(findings) and alone.source == (PREFETCH / f"{name}_after.py").read_text()


def test_scalar_prefetch_refuses_the_seed_as_a_mosaic_gpu_kernel():
    """Without --backend tpu the seed is what it says it is, a Mosaic GPU kernel: its start fix
    applies, and the data-dependent start is refused because Mosaic GPU has no scalar prefetch."""
    fixed = fix_source(SEED.read_text(), str(SEED), unsafe=True)
    assert "idx_ref[k]" in fixed.source and "PrefetchScalarGridSpec" not in fixed.source
    (left,) = [f for f in fixed.remaining if f.code == "PF105"]
    assert "Mosaic GPU has no scalar prefetch" in left.refusal and "--backend tpu" in left.refusal


def test_scalar_prefetch_keeps_a_module_that_runs_gpu_interpret_mode_running_there():
    """The seed runs `interpret=plgpu.InterpretGPUParams()`, which has no scalar prefetch: with
    --backend tpu only the start fix applies, and the refusal names `--target compiled`."""
    fixed = fix_source(SEED.read_text(), str(SEED), _tpu(), unsafe=True)
    assert "PrefetchScalarGridSpec" not in fixed.source
    (left,) = [f for f in fixed.remaining if f.code == "PF105"]
    assert "scalar prefetch" in left.refusal and "GPU interpret mode cannot run" in left.refusal, left.refusal
    assert "--target compiled" in left.refusal


def _seed_for_tpu() -> str:
    """The seed (one-element-slice start, Mosaic GPU spelling) through --backend tpu --target
    compiled with unsafe fixes: PF107's scalar start, R1's grid axis, then R6."""
    fixed = fix_source(SEED.read_text(), str(SEED), _tpu(target="compiled"), unsafe=True)
    assert fixed.error is None, fixed.error
    return fixed.source


def test_scalar_prefetch_turns_the_seed_into_a_scalar_prefetch_kernel():
    src = _seed_for_tpu()
    assert "pltpu.PrefetchScalarGridSpec(" in src and "num_scalar_prefetch=1" in src
    assert "lambda k, idx_ref: (idx_ref[k], 0)" in src
    assert "pl.ds(" not in src and "fori_loop" not in src
    assert "plgpu.CompilerParams" not in src  # empty Mosaic GPU settings go; scalar prefetch is TPU's
    assert "def gather_kernel(idx_ref, x_ref, o_ref):" in src and ")(idx, x)" in src


@pytest.mark.interp
def test_scalar_prefetch_seed_has_no_dynamic_slice_and_gathers_in_tpu_interpret_mode(tmp_path):
    from kernel_loading import load_module

    import jax.numpy as jnp

    src = _seed_for_tpu().replace("interpret=plgpu.InterpretGPUParams()", "interpret=pltpu.InterpretParams()")
    assert "interpret=pltpu.InterpretParams()" in src
    path = tmp_path / "seed_gather_tpu.py"
    path.write_text(src)
    (report,) = H.trace_reports(path)
    assert report.pallas_calls == 1 and report.dynamic_slices() == []
    x = jnp.arange(64 * 128, dtype=jnp.float32).reshape(64, 128)
    idx = jnp.array([3, 1, 0, 6], jnp.int32)  # the wrapper reduces it modulo 8 blocks: 3, 1, 0, 6
    out = load_module(path).gather(x, idx)
    expected = np.concatenate([np.asarray(x)[b * 8:(b + 1) * 8] * 2.0 for b in (3, 1, 0, 6)])
    np.testing.assert_array_equal(np.asarray(out), expected)


@pytest.mark.interp
def test_scalar_prefetch_interpreters_run_prefetch_grids_but_index_maps_want_signed_tables():
    """What R6 relies on, measured: the HLO interpreter and TPU interpret mode both run a
    PrefetchScalarGridSpec whose index_map reads the table; a block index past the end is clamped
    by the HLO interpreter (as the original's pl.ds window is) and an IndexError in TPU interpret
    mode; an index_map must return signed integers, so a uint32 table fails at trace time in both
    (verification rejects such a rewrite before it is written)."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    bs = 8

    def kernel(idx_ref, x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2.0

    def gather(x, idx, interpret):
        spec = pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1, grid=(idx.shape[0],),
            in_specs=[pl.BlockSpec((bs, x.shape[1]), lambda i, idx_ref: (idx_ref[i], 0))],
            out_specs=pl.BlockSpec((bs, x.shape[1]), lambda i, idx_ref: (i, 0)),
        )
        out_shape = jax.ShapeDtypeStruct((idx.shape[0] * bs, x.shape[1]), x.dtype)
        return pl.pallas_call(kernel, out_shape=out_shape, grid_spec=spec, interpret=interpret)(idx, x)

    x = jnp.arange(64 * 128, dtype=jnp.float32).reshape(64, 128)
    blocks = np.asarray(x).reshape(8, bs, 128) * 2.0
    for interpret in (True, pltpu.InterpretParams()):
        out = np.asarray(gather(x, jnp.array([3, 1, 0, 7], jnp.int32), interpret))
        np.testing.assert_array_equal(out, blocks[[3, 1, 0, 7]].reshape(-1, 128))
        with pytest.raises(ValueError, match="must return integer scalars"):
            gather(x, jnp.array([3, 1, 0, 7], jnp.uint32), interpret)
    clamped = np.asarray(gather(x, jnp.array([9, 0, 0, 0], jnp.int32), True))
    np.testing.assert_array_equal(clamped[:bs], blocks[7])
    with pytest.raises(Exception, match="Out-of-bounds block index"):
        jax.block_until_ready(gather(x, jnp.array([9, 0, 0, 0], jnp.int32), pltpu.InterpretParams()))
