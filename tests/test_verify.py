"""Tests for pallas_fix.verify: example grammar and sources, comparison, the interpreter runs.

Interpreter-running tests are marked ``interp`` (each starts one worker process, ~2-4 s).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from pallas_fix.verify import (
    ArgSpec,
    Example,
    ExampleSyntaxError,
    Verdict,
    collect_examples,
    format_verdict,
    parse_example,
    verify_sources,
)
from pallas_fix.verify.judge.compare import compare_leaf, compare_leaves, tolerance_for
from pallas_fix.core.directives import extract_directives
from pallas_fix.core.examples import example_from_json, example_to_json
from pallas_fix.verify.examples.annotations import infer_examples
from pallas_fix.verify.examples.sources import examples_from_directives, examples_from_pyproject
from pallas_fix.verify.examples.module_constants import module_constants
from pallas_fix.verify.runner import JSON_KEYS

FIX = Path(__file__).parent / "fixtures" / "verify"
HAS_ORACLE = importlib.util.find_spec("pallas_fix.verify.judge.oracle") is not None


def _src(name: str) -> str:
    return (FIX / name).read_text()


def _verify(before: str, after: str, **kw) -> list[Verdict]:
    src = _src(before)
    examples = collect_examples(FIX / before, src)
    assert examples, f"{before} has no example directive"
    return verify_sources(src, _src(after), examples, path=str(FIX / before), **kw)


# =========================================================================== grammar


@pytest.mark.parametrize(
    "text, entry, args, kwargs",
    [
        (
            "matmul(f32[256, 512], f32[512, 256], block_k=128, causal=True)",
            "matmul",
            [ArgSpec("f32", (256, 512)), ArgSpec("f32", (512, 256))],
            {"block_k": 128, "causal": True},
        ),
        ("f(f32[])", "f", [ArgSpec("f32", ())], {}),
        (
            "f(bf16[4,], f16[2], f64[1], i8[3], i16[3], i32[3], i64[3], u8[3], u32[3], bool[2, 2])",
            "f",
            [ArgSpec("bf16", (4,)), ArgSpec("f16", (2,)), ArgSpec("f64", (1,)), ArgSpec("i8", (3,)),
             ArgSpec("i16", (3,)), ArgSpec("i32", (3,)), ArgSpec("i64", (3,)), ArgSpec("u8", (3,)),
             ArgSpec("u32", (3,)), ArgSpec("bool", (2, 2))],
            {},
        ),
        ("f(float32[8], bfloat16[2])", "f", [ArgSpec("f32", (8,)), ArgSpec("bf16", (2,))], {}),
        (
            "f(f32[8], 16, 2.5, -3, -1e-3, None, 'a', \"b\", (1, 2), (3,), (), [4, 5], (7))",
            "f",
            [ArgSpec("f32", (8,)), 16, 2.5, -3, -1e-3, None, "a", "b", (1, 2), (3,), (), [4, 5], 7],
            {},
        ),
        ("f(x=(f32[2], i32[3]), mode='causal', scale=0.125, flag=False)", "f", [],
         {"x": (ArgSpec("f32", (2,)), ArgSpec("i32", (3,))), "mode": "causal", "scale": 0.125, "flag": False}),
        ("  ops.kernels.mm( f32[ 2 ,3 ] , )  ", "ops.kernels.mm", [ArgSpec("f32", (2, 3))], {}),
        ("f()", "f", [], {}),
        ("f(0x10, 1_000)", "f", [16, 1000], {}),
    ],
)
def test_parse_valid(text, entry, args, kwargs):
    ex = parse_example(text)
    assert isinstance(ex, Example)
    assert ex.entry == entry
    assert ex.args == args
    assert ex.kwargs == kwargs
    assert ex.text == text.strip()
    # canonical form re-parses to the same thing; JSON transport round-trips (tuples stay tuples)
    again = parse_example(ex.canonical())
    assert (again.args, again.kwargs) == (ex.args, ex.kwargs)
    back = example_from_json(json.loads(json.dumps(example_to_json(ex))))
    assert (back.entry, back.args, back.kwargs, back.text) == (ex.entry, ex.args, ex.kwargs, ex.text)


def test_parse_resolves_module_constants():
    ex = parse_example("matmul(f32[M, K], f32[K, N], bk=BK, mode=MODE)",
                       constants={"M": 256, "K": 512, "N": 128, "BK": 64, "MODE": "fast"})
    assert ex.args == [ArgSpec("f32", (256, 512)), ArgSpec("f32", (512, 128))]
    assert ex.kwargs == {"bk": 64, "mode": "fast"}


@pytest.mark.parametrize(
    "text, column, fragment",
    [
        ("matmul(f32[256 512])", 16, "expected ',' or ']'"),
        ("matmul(f33[4])", 8, "unknown dtype 'f33'"),
        ("matmul(f32)", 11, "expected '[' after dtype 'f32'"),
        ("f(x=1, 2)", 8, "positional argument after keyword"),
        ("f(1,", 5, "expected ')'"),
        ("f(f32[-1])", 7, "non-negative"),
        ("f(f32[4]) extra", 11, "after the closing ')'"),
        ("f(x=1, x=2)", 8, "given twice"),
        ("f(1 2)", 5, "expected ',' or ')'"),
        ("f(@)", 3, "unexpected character '@'"),
        ("f('abc)", 3, "unterminated string"),
        ("(f32[2])", 1, "expected the entry point name"),
        ("f(f32[M])", 7, "unknown dimension name 'M'"),
        ("f(blocks)", 3, "unknown name 'blocks'"),
        ("f(f32[2.5])", 7, "expected an integer dimension"),
    ],
)
def test_parse_errors_name_column_and_show_caret(text, column, fragment):
    with pytest.raises(ExampleSyntaxError) as ei:
        parse_example(text)
    err = ei.value
    assert err.column == column
    msg = str(err)
    assert f"column {column}" in msg
    assert fragment in msg
    lines = msg.splitlines()
    # the example is shown, with a caret under the offending column
    shown, caret = lines[-2], lines[-1]
    assert shown.strip() == text.strip()
    assert caret.index("^") - caret.index(caret.strip()[0]) == 0
    assert caret.index("^") == shown.index(text.strip()) + column - 1


def test_error_is_a_value_error():
    with pytest.raises(ValueError):
        parse_example("nope")


# =========================================================================== directives & sources

DIRECTIVE_SRC = '''\
"""Docstring mentioning # pallas-fix: example fake(f32[1]) is not a directive."""
import jax
M, K = 256, 512
N = K // 2
BK: int = 128
# pallas-fix: example matmul(f32[M, K], f32[K, N], block_k=BK)

def matmul(x, y, block_k=128):  # pallas-fix: example matmul(f32[8, 8], f32[8, 8])
    s = "# pallas-fix: example fake(f32[2])"
    return x @ y
    #   pallas-fix:   example   matmul(bf16[2, 4], bf16[4, 2], block_k=2)
'''


def test_directives_anywhere_in_comments_only():
    ds = extract_directives(DIRECTIVE_SRC)
    assert [(d.kind, d.line) for d in ds] == [("example", 6), ("example", 8), ("example", 11)]
    exs = examples_from_directives(DIRECTIVE_SRC, path="k.py")
    assert [e.text for e in exs] == [
        "matmul(f32[M, K], f32[K, N], block_k=BK)",
        "matmul(f32[8, 8], f32[8, 8])",
        "matmul(bf16[2, 4], bf16[4, 2], block_k=2)",
    ]
    assert exs[0].args == [ArgSpec("f32", (256, 512)), ArgSpec("f32", (512, 256))]
    assert exs[0].kwargs == {"block_k": 128}
    assert exs[0].origin == "k.py:6"


def test_directive_error_points_into_the_source_line():
    src = "x = 1\n#  pallas-fix: example matmul(f32[4 4])\n"
    with pytest.raises(ExampleSyntaxError) as ei:
        examples_from_directives(src, path="kern.py")
    err = ei.value
    line = "#  pallas-fix: example matmul(f32[4 4])"
    assert err.column == line.index("4 4") + 3  # 1-based column of the second 4
    assert "kern.py:2" in str(err)
    assert str(err).splitlines()[-2].strip() == line
    assert str(err).splitlines()[-1].index("^") - 4 == line.index("4 4") + 2


def test_module_constants():
    c = module_constants(DIRECTIVE_SRC)
    assert c == {"M": 256, "K": 512, "N": 256, "BK": 128}
    c = module_constants("A = 2\nB = A ** 3 - 1\nC = (A, 'x')\nD = foo()\nA = bar()\n")
    assert c == {"B": 7, "C": (2, "x")}


def test_pyproject_examples(tmp_path):
    (tmp_path / "pkg" / "kernels").mkdir(parents=True)
    k = tmp_path / "pkg" / "kernels" / "matmul.py"
    k.write_text("BM = 64\n")
    (tmp_path / "src" / "other").mkdir(parents=True)
    o = tmp_path / "src" / "other" / "attn.py"
    o.write_text("")
    (tmp_path / "pyproject.toml").write_text(
        """
[project]
name = "x"

[tool.pallas-fix.examples]
"pkg/kernels/matmul.py" = ["matmul(f32[256, 512], f32[512, 256])", "matmul(f32[BM, 8], f32[8, 8], bk=4)"]
"pkg/*/mat*.py" = "matmul(bf16[8, 8], bf16[8, 8])"
"matmul.py" = ["matmul(f16[2, 2], f16[2, 2])"]
"other.attn" = ["flash(f32[1, 128, 64])"]
"nomatch/*.py" = ["zzz(f32[1])"]
"""
    )
    exs = examples_from_pyproject(k, constants={"BM": 64})
    assert [e.canonical() for e in exs] == [
        "matmul(f32[256, 512], f32[512, 256])",
        "matmul(f32[64, 8], f32[8, 8], bk=4)",
        "matmul(bf16[8, 8], bf16[8, 8])",
        "matmul(f16[2, 2], f16[2, 2])",
    ]
    assert all("pyproject.toml" in e.origin for e in exs)
    assert [e.entry for e in examples_from_pyproject(o)] == ["flash"]  # module path, src/ dropped
    # collect_examples uses pyproject when the file has no directives; constants from the file
    assert [e.canonical() for e in collect_examples(k)][1] == "matmul(f32[64, 8], f32[8, 8], bk=4)"


def test_pyproject_bad_example_raises(tmp_path):
    f = tmp_path / "k.py"
    f.write_text("")
    (tmp_path / "pyproject.toml").write_text('[tool.pallas-fix.examples]\n"k.py" = ["k(f32[2,,])"]\n')
    with pytest.raises(ExampleSyntaxError, match="column 9"):
        examples_from_pyproject(f)


ANNOTATED = '''\
from jaxtyping import Array, Float, Int
import jaxtyping as jt
M, K = 256, 512

def matmul(x: Float[Array, "M K"], y: Float[Array, "K 128"], bk: int = 128):
    ...

def scale(x: jt.BFloat16[Array, "8 16"], s: Float[Array, ""], n: Int[Array, "4"]):
    ...

def symbolic(x: Float[Array, "batch 512"]):
    ...

def _private(x: Float[Array, "4"]):
    ...

def plain(x, y):
    ...
'''


def test_infer_from_annotations():
    exs = infer_examples(ANNOTATED, path="a.py")
    assert [e.canonical() for e in exs] == [
        "matmul(f32[256, 512], f32[512, 128])",
        "scale(bf16[8, 16], f32[], i32[4])",
    ]
    assert exs[0].origin.startswith("inferred from annotations, a.py:5")
    hinted = ANNOTATED + "# pallas-fix: entry scale\n"
    assert [e.entry for e in infer_examples(hinted)] == ["scale"]


def test_collect_priority(tmp_path):
    f = tmp_path / "k.py"
    src = ANNOTATED + "# pallas-fix: example matmul(f32[2, 2], f32[2, 2])\n"
    f.write_text(src)
    (tmp_path / "pyproject.toml").write_text('[tool.pallas-fix.examples]\n"k.py" = "matmul(f32[4, 4], f32[4, 4])"\n')
    cli = collect_examples(f, cli_examples=["matmul(f32[M, 1], f32[1, 1])"])
    assert [(e.canonical(), e.origin) for e in cli] == [("matmul(f32[256, 1], f32[1, 1])", "--example")]
    assert [e.canonical() for e in collect_examples(f)] == ["matmul(f32[2, 2], f32[2, 2])"]
    f.write_text(ANNOTATED)
    assert [e.canonical() for e in collect_examples(f)] == ["matmul(f32[4, 4], f32[4, 4])"]
    assert [e.entry for e in collect_examples(f, pyproject=False)] == ["matmul", "scale"]
    f.write_text("def f(x):\n    return x\n")
    assert collect_examples(f, pyproject=False) == []


# =========================================================================== comparison


def test_tolerances():
    import ml_dtypes

    assert tolerance_for(np.float32) == (1e-5, 1e-5)
    assert tolerance_for(ml_dtypes.bfloat16)[0] >= 1e-2
    assert tolerance_for(np.float16)[0] >= 1e-2
    assert tolerance_for(np.int32) is None and tolerance_for(np.bool_) is None


def test_compare_rules():
    a = np.linspace(-3, 3, 60, dtype=np.float32).reshape(6, 10)
    assert compare_leaf(a, a + np.float32(1e-6)).ok
    r = compare_leaf(a, a * np.float32(1.001), "[0]")
    assert not r.ok and "[0]" in r.reason and "outside tolerance" in r.reason
    assert r.abs_err == pytest.approx(0.003, rel=1e-2) and r.rel_err == pytest.approx(1e-3, rel=1e-2)
    b = a.copy()
    b[2, 3] = np.nan
    r = compare_leaf(a, b)
    assert not r.ok and "NaN positions differ" in r.reason and "(2, 3)" in r.reason
    assert compare_leaf(b, b.copy()).ok  # NaN in the same place is fine
    i = np.arange(10, dtype=np.int32)
    j = i.copy()
    j[7] += 1
    r = compare_leaf(i, j)
    assert not r.ok and "exact" in r.reason and r.abs_err == 1.0
    assert not compare_leaf(np.array([True, False]), np.array([True, True])).ok
    assert not compare_leaf(a, a.astype(np.float64)).ok  # dtype differs
    assert not compare_leaf(a, a[:3]).ok  # shape differs
    assert not compare_leaf(np.array([np.inf]), np.array([-np.inf])).ok
    res = compare_leaves([("[0]", a)], [("[0]", a), ("[1]", a)])
    assert not res[0].ok and "structure" in res[0].reason


def test_tolerance_is_per_element_not_scaled_by_the_largest_value():
    import ml_dtypes

    bf16 = ml_dtypes.bfloat16
    rng = np.random.default_rng(0)
    ref = rng.uniform(-1.0, 1.0, 256).astype(bf16)
    ref[0] = 4.0  # one large element used to widen the bound for every element
    got = ref.copy()
    got[7] = bf16(float(ref[7]) + 0.078)
    # the old bound, atol * max(1, max|ref|) + rtol * |ref|, allowed 0.08 + 0.02 |ref| here
    r = compare_leaf(ref, got)
    assert not r.ok and "index (7,)" in r.reason and "bfloat16" in r.reason
    got[7] = bf16(float(ref[7]) + 0.0078)  # one bf16 ulp at ~1: rounding, not a bug
    assert compare_leaf(ref, got).ok


def test_summation_order_noise_passes_at_cancelling_elements():
    # f32 dot products of large inputs summed in two orders: elements that cancel to ~0 carry
    # rounding the size of the summands; atol scales with the leaf's typical magnitude for them.
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((64, 512)) * 8).astype(np.float32)
    y = (rng.standard_normal((512, 64)) * 8).astype(np.float32)
    forward = x @ y
    blocked = sum(x[:, k:k + 64] @ y[k:k + 64, :] for k in range(448, -1, -64)).astype(np.float32)
    assert compare_leaf(forward, blocked).ok
    assert not compare_leaf(forward, blocked * np.float32(1.0001)).ok


# =========================================================================== verdicts


def test_verdict_json_shape_and_format():
    v = Verdict(entry="matmul", status="verified", max_abs_err=0.0, max_rel_err=0.0, seeds=[0, 1, 2],
                interpreters=["interpret", "tpu-interpret"], dynamic_slices_before=3,
                dynamic_slices_after=0, seconds=1.5, message="ok", details={"x": 1},
                example="matmul(f32[128, 256], f32[256, 128])", origin="--example")
    j = v.to_json()
    assert tuple(j) == JSON_KEYS
    assert set(j) == {"entry", "status", "max_abs_err", "max_rel_err", "seeds", "interpreters",
                      "dynamic_slices_before", "dynamic_slices_after", "seconds", "message", "example", "origin",
                      "speed", "footprint", "findings"}
    assert j["findings"] == []
    assert (j["example"], j["origin"]) == ("matmul(f32[128, 256], f32[256, 128])", "--example")
    json.dumps(j)
    assert format_verdict(v) == ("verified matmul: 3 dynamic slices -> 0, max abs err 0.0 (interpret, tpu-interpret)"
                                 " — on matmul(f32[128, 256], f32[256, 128]), from --example")
    bad = Verdict(entry="matmul", status="mismatch", message="interpret mismatch on seed 0: ...",
                  interpreters=["interpret"])
    assert format_verdict(bad).startswith("mismatch matmul: interpret mismatch on seed 0")


def test_no_examples_is_unverified():
    (v,) = verify_sources("x = 1", "x = 1", [], path="k.py")
    assert v.status == "unverified" and "not verified" in v.message and "k.py" in v.message
    assert format_verdict(v).startswith("unverified")
    assert tuple(v.to_json()) == JSON_KEYS


# =========================================================================== interpreter runs


def _check_json(v: Verdict) -> None:
    j = v.to_json()
    assert tuple(j) == JSON_KEYS
    json.loads(json.dumps(j, allow_nan=False))


@pytest.mark.interp
def test_elementwise_rewrite_verified():
    (v,) = _verify("elementwise_before.py", "elementwise_after.py")
    assert v.status == "verified", v.message
    assert v.interpreters[:2] == ["interpret", "tpu-interpret"]
    # 8 row blocks marked "parallel" -> one multi-core pass with a core per block
    assert v.interpreters[2] == "tpu-interpret-8cores"
    assert v.seeds == [0, 1, 2]
    assert v.max_abs_err == 0.0
    if HAS_ORACLE:
        assert (v.dynamic_slices_before, v.dynamic_slices_after) == (3, 0)
        assert format_verdict(v).startswith("verified scaled_tanh: 3 dynamic slices -> 0, max abs err 0.0 (interpret, ")
    _check_json(v)


@pytest.mark.interp
def test_an_example_whose_call_returns_nothing_verifies_nothing():
    # A script's `main()` (or a recorded call of one) runs both kernels and returns None: nothing
    # compares them, so even a wrong rewrite (clipped) must not come out "verified".
    demo = "\n\ndef demo(x, y):\n    scaled_tanh(x, y)\n"
    before, after = _src("elementwise_before.py") + demo, _src("elementwise_after_clipped.py") + demo
    example = parse_example("demo(f32[256, 128], f32[256, 128])", origin="--example")
    (v,) = verify_sources(before, after, [example], path="k.py", seeds=(0,), tpu_interpret=False)
    assert v.status == "unverified", v.message
    assert v.message.startswith("the example `demo(f32[256, 128], f32[256, 128])` (--example) returns no array")


@pytest.mark.interp
def test_matmul_reduction_rewrite_verified():
    (v,) = _verify("matmul_before.py", "matmul_after.py")
    assert v.status == "verified", v.message
    assert v.interpreters == ["interpret", "tpu-interpret", "tpu-interpret-4cores"]
    assert v.max_abs_err is not None and v.max_abs_err < 1e-3
    if HAS_ORACLE:
        assert (v.dynamic_slices_before, v.dynamic_slices_after) == (2, 0)
    _check_json(v)


@pytest.mark.interp
def test_off_by_one_index_map_fails():
    (v,) = _verify("elementwise_before.py", "elementwise_after_offbyone.py")
    assert v.status == "mismatch", v.message
    # HLO interpret clamps the out-of-bounds block silently -> numbers differ;
    # TPU interpret mode raises on the out-of-bounds block.
    assert v.message.startswith("interpret mismatch on seed 0: output:")
    assert "max abs err" in v.message
    assert v.details["outcomes"]["tpu-interpret"].startswith("error")
    assert "Out-of-bounds block index" in v.message
    _check_json(v)


@pytest.mark.interp
def test_reduction_axis_marked_parallel_fails():
    (v,) = _verify("matmul_before.py", "matmul_after_parallel_k.py")
    assert v.status in ("error", "mismatch"), v.message
    outcomes = v.details["outcomes"]
    assert outcomes["interpret"] == "ok"  # the HLO interpreter ignores dimension semantics
    # single core: parallel coordinates are visited in a random order -> init/finalize misplaced
    assert outcomes["tpu-interpret"].startswith("mismatch")
    # one core per parallel grid point: the writes of the shared output block race
    assert outcomes["tpu-interpret-16cores"].startswith("race")
    assert v.status == "error" and "data race" in v.message and '"arbitrary"' in v.message
    _check_json(v)


@pytest.mark.interp
def test_missing_init_fails():
    (v,) = _verify("matmul_before.py", "matmul_after_no_init.py")
    assert v.status == "mismatch", v.message
    assert "NaN positions differ" in v.message
    # every interpreter fills uninitialised scratch with NaN in jax 0.12
    assert all(o.startswith("mismatch") for o in v.details["outcomes"].values())
    _check_json(v)


@pytest.mark.interp
def test_bf16_accumulator_fails_on_tolerance():
    (v,) = _verify("matmul_before.py", "matmul_after_bf16_acc.py")
    assert v.status == "mismatch", v.message
    assert "outside tolerance" in v.message
    # f32 tolerance is ~1e-5 x max|ref|; a bf16 accumulator over K=512 is off by ~1e-2 relative
    assert v.max_abs_err is not None and v.max_abs_err > 1e-2
    assert v.max_rel_err is not None and 1e-4 < v.max_rel_err < 0.1
    _check_json(v)


@pytest.mark.interp
def test_pytree_outputs_ints_static_positional_and_decorator_form():
    (v,) = _verify("multi_out_before.py", "multi_out_after.py")
    assert v.status == "verified", v.message
    assert v.interpreters == ["interpret", "tpu-interpret"]  # no parallel axis -> no multi-core pass
    if HAS_ORACLE:
        assert v.dynamic_slices_before > 0 and v.dynamic_slices_after == 0


@pytest.mark.interp
def test_broken_pytree_int_output_detected():
    broken = _src("multi_out_after.py").replace("* 3 + 1", "* 3 + 2")
    src = _src("multi_out_before.py")
    (v,) = verify_sources(src, broken, collect_examples(FIX / "multi_out_before.py", src), seeds=(5,))
    assert v.status == "mismatch" and "[1]" in v.message and "exact comparison for int32" in v.message
    assert v.seeds == [5] and "seed 5" in v.message


@pytest.mark.interp
def test_stdout_noise_and_missing_entry():
    vs = _verify("noisy.py", "noisy.py")
    assert [v.status for v in vs] == ["verified", "error"]
    assert "not_there" in vs[1].message and "not found" in vs[1].message


@pytest.mark.interp
def test_mosaic_gpu_kernel_skips_tpu_interpret_and_runs_gpu_interpret():
    (v,) = _verify("unroll_before.py", "unroll_after.py", gpu_interpret=True)
    assert v.status == "verified", v.message
    assert v.interpreters == ["interpret", "gpu-interpret"]
    assert "tpu-interpret skipped: Mosaic GPU kernel" in v.message
    if HAS_ORACLE:
        assert (v.dynamic_slices_before, v.dynamic_slices_after) == (2, 0)


@pytest.mark.interp
def test_gpu_interpret_rejects_gridded_blockspecs():
    (v,) = _verify("elementwise_before.py", "elementwise_after.py", gpu_interpret=True, tpu_interpret=False)
    assert v.status == "error"
    assert v.interpreters == ["interpret", "gpu-interpret"]
    assert "has_trivial_window" in v.message  # the bare assert, made readable


def test_inputs_vary_in_scale_by_seed_and_are_deterministic():
    from pallas_fix.verify.worker.calls import Call

    call = Call(Example("f", [ArgSpec("f32", (4096,)), ArgSpec("i32", (4096,)), ArgSpec("u8", (64,))], {}, "f(...)"))
    per_seed = {seed: call.inputs(seed) for seed in (0, 1, 2)}
    floats = {seed: float(np.abs(v[0]).max()) for seed, v in per_seed.items()}
    ints = {seed: int(np.abs(v[1]).max()) for seed, v in per_seed.items()}
    assert floats[0] < 6 < floats[1] and floats[2] > 20  # N(0, 1), x8, heavy-tailed
    assert ints == {0: 4, 1: 32, 2: 256}
    assert per_seed[2][1].min() < 0 and per_seed[2][2].min() >= 0  # signed / unsigned
    again = call.inputs(1)
    assert all(np.array_equal(a, b) for a, b in zip(again, per_seed[1]))


@pytest.mark.interp
def test_index_operands_stay_inside_what_they_index():
    from pallas_fix.verify.worker.calls import Call

    src = _src("gather_before.py")
    (ex,) = collect_examples(FIX / "gather_before.py", src)
    namespace: dict = {}
    exec(compile(src, str(FIX / "gather_before.py"), "exec"), namespace)
    call = Call(ex, reference=namespace["gather_rows"])
    assert call.index_bounds() == [None, 63]  # ids index the 64 rows of the table, one row each
    for seed in (0, 1, 2):
        ids = call.inputs(seed)[1]
        assert ids.min() >= 0 and ids.max() <= 63
    assert call.inputs(2)[1].max() > 4


def test_ragged_sizes_and_substitution():
    from pallas_fix.verify.worker.ragged import _ragged_size, _substitute

    assert _ragged_size(256, 64) == 253 and _ragged_size(300, 64) is None  # already ragged
    assert _ragged_size(6, 3) == 5 and _ragged_size(64, 1) is None
    assert _ragged_size(320, None) == 317 and _ragged_size(300, None) is None  # mask bounds
    ex = Example("f", [ArgSpec("f32", (256, 128)), ArgSpec("f32", (256, 64))], {"n": 256, "bs": 64, "flag": True},
                 "f(...)", origin="k.py:2")
    variant = _substitute(ex, {256: 253, 64: 61}, divisors={64})
    assert variant.canonical() == "f(f32[253, 128], f32[253, 61], n=253, bs=64, flag=True)"
    assert variant.origin == "ragged variant of k.py:2"
    assert _substitute(ex, {1000: 997}, divisors=set()) is None


@pytest.mark.interp
def test_inputs_past_six_catch_a_clipping_rewrite():
    (v,) = _verify("elementwise_before.py", "elementwise_after_clipped.py")
    # N(0, 1) inputs (the only ones before) never reach the clip; seed 1 draws them x8
    assert v.status == "mismatch" and "seed 1" in v.message, v.message


@pytest.mark.interp
def test_index_values_past_four_catch_a_capped_gather():
    (v,) = _verify("gather_before.py", "gather_after_small_ids.py")
    # ids drawn from [-4, 4] (before) never exceed the cap; ids drawn over the table's rows do
    assert v.status == "mismatch", v.message
    (same,) = _verify("gather_before.py", "gather_before.py")
    assert same.status == "verified", same.message


@pytest.mark.interp
def test_ragged_variant_runs_and_says_which_shapes():
    (v,) = _verify("ragged_before.py", "ragged_after.py")
    assert v.status == "verified", v.message
    assert "also on the ragged shapes `double_rows(f32[253, 128])`" in v.message
    assert v.details["ragged"]["ran"] == ["`double_rows(f32[253, 128])`"]


@pytest.mark.interp
def test_ragged_variant_catches_a_rewrite_that_only_divides():
    (v,) = _verify("ragged_before.py", "ragged_after_floor_grid.py")
    # f32[256, 128] divides into blocks of 64: the floor-division grid is only wrong on f32[253, 128]
    assert v.status == "mismatch", v.message
    assert v.message.startswith("on `double_rows(f32[253, 128])` (a ragged variant")
    assert "the example as given verified" in v.message


@pytest.mark.interp
def test_ragged_variant_the_original_rejects_is_dropped():
    src = _src("ragged_before.py").replace("    n = x_ref.shape[0]\n", "    n = x_ref.shape[0]\n    assert n % BS == 0\n")
    (ex,) = collect_examples(FIX / "ragged_before.py", src)
    (v,) = verify_sources(src, src, [ex], path=str(FIX / "ragged_before.py"))
    assert v.status == "verified", v.message
    assert "ragged variant dropped: `double_rows(f32[253, 128])` (the original does not run on it" in v.message


def test_pad_widths_read_in_every_numpy_form():
    from pallas_fix.verify.worker.ragged import _static_widths

    assert _static_widths(((0, 0), (0, 56)), 2) == ((0, 0), (0, 56))
    assert _static_widths((1, 2), 2) == ((1, 2), (1, 2))
    assert _static_widths(3, 2) == ((3, 3), (3, 3))
    assert _static_widths([(4,)], 1) == ((4, 4),)
    assert _static_widths(((0, 5),), 2) == ((0, 5), (0, 5))  # numpy broadcasts one pair
    assert _static_widths(((0, 0), (0, 1)), 3) is None  # not a width per dim
    assert _static_widths(((0, object()), (0, 0)), 2) is None  # a traced width: not recorded


@pytest.mark.interp
def test_padding_variant_catches_a_rewrite_right_only_where_the_pad_is_a_no_op():
    # rms_norm pads its width to a multiple of 128: on f32[64, 256] it pads nothing, and the stale
    # rewrite (an output block the padded width wide) agrees there; on f32[64, 253] it does not
    (v,) = _verify("padded_rms_before.py", "padded_rms_after_stale_width.py")
    assert v.status == "mismatch", v.message
    assert v.message.startswith("on `rms_norm(f32[64, 253])` (a padding variant"), v.message
    assert "the example as given verified" in v.message
    (same,) = _verify("padded_rms_before.py", "padded_rms_before.py")
    assert same.status == "verified", same.message
    assert "also on the ragged shapes `rms_norm(f32[64, 253])`" in same.message  # the rows are not padded: left alone


@pytest.mark.interp
def test_padding_variant_of_a_synthesised_example(tmp_path, monkeypatch):
    monkeypatch.setenv("PALLAS_FIX_CACHE_DIR", str(tmp_path))
    src = _src("padded_rms_before.py").replace("# pallas-fix: example rms_norm(f32[64, 256])\n", "")
    assert "pallas-fix: example" not in src
    examples = collect_examples(FIX / "padded_rms_before.py", src, synthesise=True, pyproject=False, recorded=False)
    (v,) = verify_sources(src, _src("padded_rms_after_stale_width.py"), examples, path=str(FIX / "padded_rms_before.py"))
    # the synthesised width (256) is a multiple of 128; its padding variant is not
    assert v.status == "mismatch", v.message
    assert "(a padding variant" in v.message and "253" in v.message, v.message


@pytest.mark.interp
def test_rewrite_that_does_not_import_is_an_error():
    src = _src("elementwise_before.py")
    exs = collect_examples(FIX / "elementwise_before.py", src)
    (v,) = verify_sources(src, src + "\nraise RuntimeError('boom')\n", exs)
    assert v.status == "error" and "importing the rewritten source failed" in v.message and "boom" in v.message


def _dead(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


@pytest.mark.interp
def test_timeout_kills_the_process_group(tmp_path, monkeypatch):
    pidfile = tmp_path / "pids"
    monkeypatch.setenv("PALLAS_FIX_TEST_PIDFILE", str(pidfile))
    src = _src("sleepy.py")
    t0 = time.perf_counter()
    quick, slow = verify_sources(src, src, collect_examples(FIX / "sleepy.py", src), timeout_s=6)
    elapsed = time.perf_counter() - t0
    assert elapsed < 6 + 8
    assert quick.status == "verified", quick.message  # finished before the limit: kept
    assert slow.status == "timeout" and "timeout_s=6" in slow.message
    _check_json(slow)
    pids = [int(p) for p in pidfile.read_text().split()]
    deadline = time.time() + 5
    while time.time() < deadline and not all(_dead(p) for p in pids):
        time.sleep(0.1)
    assert all(_dead(p) for p in pids), pids  # worker and its grandchild


PATCH_PROBE = r'''
import functools, json, sys
import jax, jax.numpy as jnp
from pallas_fix.verify.worker import main as worker
from jax.experimental.pallas import tpu as pltpu
worker.install_patches()
src = """
import functools
import jax
import jax.experimental.pallas as pl
from jax.experimental.pallas import pallas_call
from jax.experimental.pallas import pallas_call as pc_alias
from jax._src.pallas import pallas_call as ppc_mod

def k(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1.0

shape = jax.ShapeDtypeStruct((8, 128), jax.numpy.float32)
AT_IMPORT = pl.pallas_call(k, out_shape=shape, interpret=False)   # built at import time

@functools.partial(pallas_call, out_shape=shape)                  # decorator form
def deco(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2.0

def entries():
    return {"pl": lambda x: pl.pallas_call(k, out_shape=shape)(x),
            "from_import": lambda x: pallas_call(k, out_shape=shape)(x),
            "alias": lambda x: pc_alias(k, out_shape=shape, interpret=False)(x),
            "private": lambda x: ppc_mod.pallas_call(k, out_shape=shape)(x),
            "at_import": AT_IMPORT, "decorator": deco}
"""
import tempfile
mod = worker.load_module("original", src, "<kernel>", tempfile.mkdtemp())
x = jnp.ones((8, 128), jnp.float32)
def interps(j):
    for e in j.eqns:
        if e.primitive.name == "pallas_call":
            yield e.params["interpret"]
        for p in e.params.values():
            for sub in worker._sub_jaxprs(p):
                yield from interps(sub)

out = {}
for name, fn in mod.entries().items():
    seen = []
    for value in (True, pltpu.InterpretParams(detect_races=True)):
        with worker.forced_interpreter(value):
            jaxpr = jax.make_jaxpr(fn)(x)
            fn(x)  # would raise "Only interpret mode is supported on CPU backend" unpatched
        seen.append([type(i).__name__ for i in interps(jaxpr)])
    out[name] = seen
print(json.dumps(out))
'''


@pytest.mark.interp
def test_patch_reaches_every_spelling_of_pallas_call():
    import subprocess

    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    r = subprocess.run([sys.executable, "-c", PATCH_PROBE], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    seen = json.loads(r.stdout.strip().splitlines()[-1])
    assert set(seen) == {"pl", "from_import", "alias", "private", "at_import", "decorator"}
    for name, kinds in seen.items():
        assert kinds == [["bool"], ["InterpretParams"]], (name, kinds)
