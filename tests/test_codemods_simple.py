"""The expression-level codemods: traced constant → Python int (R4, PF104) and non-integer start →
integer scalar (PF107).

Fixtures live in tests/fixtures/codemods/:
- `<codemod>_<case>_before.py` / `_after.py`: golden pairs (`_unsafe_` cases need unsafe fixes);
- `refuse_<codemod>*.py`: files the codemod must leave unchanged; a line ending in
  `# refuse: <words>` carries a finding whose refusal contains <words>.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from kernel_loading import abstract_args, load_module
from pallas_fix.core.config import Config
from pallas_fix.engine import analyze_source, fix_source
from pallas_fix.core.model import FixSafety
from pallas_fix.verify.example_sources import collect_examples

FIX = Path(__file__).parent / "fixtures" / "codemods"
CODEMODS = {
    # fixture prefix: (codemod name, rule code, module, LibCST codemod class)
    "traced_constant": ("traced-constant", "PF104", "traced_constant", "TracedConstantToInt"),
    "scalar_start": ("scalar-start", "PF107", "scalar_start", "ScalarStart"),
}
GPU_ERROR = "Dynamic indexing not supported in GPU interpret mode"
HLO_ONE_ELEMENT_ERROR = "start_indices arguments to dynamic_slice must be scalars"


def _codemod_of(path: Path) -> tuple[str, str, str, str]:
    stem = path.name.removeprefix("refuse_")
    for prefix, info in CODEMODS.items():
        if stem.startswith(prefix):
            return info
    raise AssertionError(f"{path.name} names no codemod")


def _pairs() -> list[tuple[Path, Path]]:
    out = []
    for before in sorted(FIX.glob("*_before.py")):
        if before.name.startswith(tuple(CODEMODS)):
            out.append((before, before.with_name(before.name.replace("_before.py", "_after.py"))))
    return out


PAIRS = _pairs()
PAIR_IDS = [b.name.removesuffix("_before.py") for b, _ in PAIRS]
REFUSALS = sorted(p for p in FIX.glob("refuse_*.py") if p.name.removeprefix("refuse_").startswith(tuple(CODEMODS)))


def _unsafe(path: Path) -> bool:
    return "_unsafe" in path.name


def _fix(path: Path, source: str | None = None, *, unsafe: bool | None = None):
    name = _codemod_of(path)[0]
    src = path.read_text() if source is None else source
    return fix_source(src, str(path), Config(), codemods={name}, unsafe=_unsafe(path) if unsafe is None else unsafe)


def _one_element(before: Path) -> bool:
    return "def reference(" in before.read_text()


def test_fixture_sets_are_complete():
    counts = {prefix: sum(1 for b, _ in PAIRS if b.name.startswith(prefix) and not _unsafe(b)) for prefix in CODEMODS}
    assert all(n >= 4 for n in counts.values()), counts
    assert all(after.exists() for _, after in PAIRS)
    assert {_codemod_of(p)[0] for p in REFUSALS} == {info[0] for info in CODEMODS.values()}


# =========================================================================== golden rewrites


@pytest.mark.parametrize("before, after", PAIRS, ids=PAIR_IDS)
def test_rewrite_matches_golden(before, after):
    result = _fix(before)
    assert result.error is None
    assert result.source != before.read_text(), "the fixture exercises nothing"
    assert result.source == after.read_text()


@pytest.mark.parametrize("before, after", PAIRS, ids=PAIR_IDS)
def test_every_reported_start_gets_a_fix_and_none_remains(before, after):
    name, code, _, _ = _codemod_of(before)
    findings = [f for f in analyze_source(before.read_text(), str(before)).findings if f.code == code]
    assert findings
    for f in findings:
        assert f.fixable and f.fix_id == name, (f.span.line, f.refusal)
        assert f.fix_safety is (FixSafety.UNSAFE if _unsafe(before) else FixSafety.SAFE)
    left = [f for f in analyze_source(after.read_text(), str(after)).findings if f.code == code]
    assert left == []


@pytest.mark.parametrize("before, after", PAIRS, ids=PAIR_IDS)
def test_applying_again_changes_nothing(before, after):
    again = _fix(after, after.read_text(), unsafe=True)
    assert again.error is None
    assert again.source == after.read_text()
    assert again.applied == []


def test_unsafe_casts_are_not_applied_by_default():
    before = FIX / "scalar_start_unsafe_before.py"
    src = before.read_text()
    assert _fix(before, unsafe=False).source == src
    (finding,) = [f for f in analyze_source(src, str(before)).findings if f.code == "PF107"]
    assert finding.fix_safety is FixSafety.UNSAFE
    plan = next(p for p in analyze_source(src, str(before)).plans if p.codemod == "scalar-start")
    assert "strided window" in plan.description


# =========================================================================== refusals


def _markers(source: str) -> dict[int, str]:
    out = {}
    for n, text in enumerate(source.splitlines(), 1):
        m = re.search(r"#\s*refuse:\s*(.+?)\s*$", text)
        if m:
            out[n] = m.group(1)
    return out


@pytest.mark.parametrize("path", REFUSALS, ids=[p.name for p in REFUSALS])
def test_refusals_leave_the_file_unchanged_and_say_why(path):
    name, code, _, _ = _codemod_of(path)
    src = path.read_text()
    markers = _markers(src)
    assert markers
    for unsafe in (False, True):
        result = _fix(path, unsafe=unsafe)
        assert result.error is None
        assert result.source == src
    findings = {f.span.line: f for f in analyze_source(src, str(path)).findings if f.code == code}
    assert set(findings) == set(markers), "every finding of the code is a marked refusal"
    for line, words in markers.items():
        f = findings[line]
        assert not f.fixable
        assert f.refusal and words in f.refusal, (line, f.refusal)


def test_narrow_dtype_refusal_names_the_wrapped_value():
    path = FIX / "refuse_traced_constant.py"
    (f,) = [f for f in analyze_source(path.read_text(), str(path)).findings if "jnp.int8" in (f.refusal or "")]
    assert "200" in f.refusal and "[-128, 127]" in f.refusal


# =========================================================================== LibCST runner


@pytest.mark.parametrize("prefix", sorted(CODEMODS))
def test_libcst_runner_matches_the_cli(prefix, tmp_path):
    """`python -m libcst.tool codemod -x pallas_fix.codemods.<module>.<Class>` writes the same text
    as `pallas-fix --apply --no-verify` (restricted to the codemod's rule: other codemods are not
    this test's subject)."""
    name, code, module, cls = CODEMODS[prefix]
    pairs = [(b, a) for b, a in PAIRS if b.name.startswith(prefix)]
    via_libcst, via_cli = tmp_path / "libcst", tmp_path / "cli"
    via_libcst.mkdir()
    via_cli.mkdir()
    for before, _ in pairs:
        shutil.copy(before, via_libcst / before.name)
        shutil.copy(before, via_cli / before.name)
    refusal = next(p for p in REFUSALS if _codemod_of(p)[0] == name)
    shutil.copy(refusal, via_libcst / refusal.name)
    safe = [str(via_libcst / b.name) for b, _ in pairs if not _unsafe(b)] + [str(via_libcst / refusal.name)]
    run = subprocess.run(
        [sys.executable, "-m", "libcst.tool", "codemod", "-x", f"pallas_fix.frontends.libcst_commands.{cls}",
         "--no-format", "-j", "1", *safe],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    cli = [str(via_cli / b.name) for b, _ in pairs if not _unsafe(b)]
    run = subprocess.run(
        [sys.executable, "-m", "pallas_fix", "--apply", "--no-verify", "--select", code, *cli],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )
    assert run.returncode in (0, 1), run.stderr[-2000:]
    for before, after in pairs:
        if _unsafe(before):
            continue
        assert (via_libcst / before.name).read_text() == (via_cli / before.name).read_text() == after.read_text()
    assert (via_libcst / refusal.name).read_text() == refusal.read_text()


# =========================================================================== jaxpr oracle


def _trace(path: Path):
    from pallas_fix.verify.oracle import trace_report

    src = path.read_text()
    (example,) = collect_examples(path, src)
    args, kwargs = abstract_args(example)
    return trace_report(getattr(load_module(path), example.entry), *args, **kwargs)


_INT_SCALAR = re.compile(r"u?int(8|16|32|64)\[\]")


@pytest.mark.parametrize("before, after", PAIRS, ids=PAIR_IDS)
def test_oracle_sees_no_dynamic_slice_of_the_fixed_kind(before, after):
    _, code, _, _ = _codemod_of(before)
    old, new = _trace(before), _trace(after)
    # static detection and the jaxpr agree on what stays dynamic after the rewrite
    remaining = {f.span.line for f in analyze_source(after.read_text(), str(after)).findings}
    assert new.lines(str(after)) == remaining
    if code == "PF104":
        # a traced constant is an int32 Var in the jaxpr: the fixed slices are gone
        assert len(new.dynamic_slices()) < len(old.dynamic_slices())
    else:
        bad = lambda rep: [a for a in rep.dynamic_slices() if a.dynamic_start and not _INT_SCALAR.fullmatch(a.start_aval or "")]
        assert bad(old), "the original has a non-integer-scalar start"
        assert bad(new) == []


# =========================================================================== interpreters


@pytest.mark.interp
@pytest.mark.parametrize(
    "before, after",
    [p for p in PAIRS if not _unsafe(p[0]) and not _one_element(p[0])],
    ids=[i for p, i in zip(PAIRS, PAIR_IDS) if not _unsafe(p[0]) and not _one_element(p[0])],
)
def test_rewrite_verified_in_the_interpreters(before, after):
    from pallas_fix.verify import verify_sources

    src = before.read_text()
    examples = collect_examples(before, src)
    gpu = _codemod_of(before)[1] == "PF107"
    verdicts = verify_sources(src, after.read_text(), examples, path=str(before), gpu_interpret=gpu, timeout_s=300)
    assert [v.status for v in verdicts] == ["verified"], [v.message for v in verdicts]
    if gpu:
        assert "gpu-interpret" in verdicts[0].interpreters


_GPU_HARNESS = textwrap.dedent(
    """
    import json, sys, tempfile
    import numpy as np
    job = json.loads(sys.stdin.read())
    from pallas_fix.verify import worker as W
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
    [p for p in PAIRS if p[0].name.startswith("scalar_start") and not _unsafe(p[0])],
    ids=[i for p, i in zip(PAIRS, PAIR_IDS) if p[0].name.startswith("scalar_start") and not _unsafe(p[0])],
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
