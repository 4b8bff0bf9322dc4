"""On-chip bytes per grid step (pallas_fix.verify.judge.footprint): the counting rules on hand-made
layouts, the layout read off a traced pallas_call, the verdict line, and one verified K-loop
matmul pair."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pallas_fix.verify import collect_examples, format_verdict, verify_sources
from pallas_fix.verify.judge.footprint import (
    MOSAIC_GPU_SMEM_DEFAULT,
    TPU_SCOPED_VMEM_DEFAULT,
    CallLayout,
    Operand,
    block_copies,
    entry_bytes,
    footprint_record,
    format_bytes,
    step_bytes,
)
from pallas_fix.verify.judge.footprint_findings import footprint_findings, format_finding
from pallas_fix.verify.runner import JSON_KEYS, Verdict

FIX = Path(__file__).parent / "fixtures" / "verify"
F32 = 32


def _f32(*shape, **kw) -> Operand:
    return Operand(tuple(shape), F32, **kw)


def _calls(*layouts: CallLayout) -> list[dict]:
    """What pallas_call_infos records for each call."""
    return [{"on_chip": step_bytes(layout).to_json()} for layout in layouts]


# =========================================================================== TPU rules


def test_tpu_blocks_are_double_buffered():
    # matmul_before.py at f32[128, 512] @ f32[512, 128], bm = bn = 64: K whole in each block
    layout = CallLayout("tpu", grid=(2, 2), blocks=(_f32(64, 512), _f32(512, 64), _f32(64, 64)))
    assert step_bytes(layout).total == 2 * (64 * 512 + 512 * 64 + 64 * 64) * 4 == 557056
    # matmul_after.py: bk = 128 on a third grid axis, plus an f32 VMEM accumulator (once)
    after = CallLayout("tpu", grid=(2, 2, 4), blocks=(_f32(64, 128), _f32(128, 64), _f32(64, 64)),
                       scratch=(_f32(64, 64, memory_space="vmem"),))
    sb = step_bytes(after)
    assert (sb.total, sb.by_space) == (180224, {"vmem": 180224})
    assert (sb.limit_space, sb.limit_bytes, sb.limit_source) == ("vmem", 16 * 1024 * 1024, "default")


def test_tpu_grid_free_call_holds_each_array_once():
    # elementwise_before.py: no grid, three f32[256, 128] operands
    layout = CallLayout("generic", blocks=(_f32(256, 128, trivial_window=True),) * 3)
    assert step_bytes(layout).total == 3 * 256 * 128 * 4 == 393216


def test_tpu_trivial_window_in_vmem_is_single_buffered_but_not_in_smem():
    # jax/_src/pallas/mosaic/lowering.py forces Buffered(1) only for VMEM trivial windows
    whole = _f32(16, 128, trivial_window=True)
    smem_whole = _f32(16, 128, trivial_window=True, memory_space="smem")
    layout = CallLayout("tpu", grid=(4,), blocks=(whole, smem_whole))
    assert block_copies(layout, whole) == 1 and block_copies(layout, smem_whole) == 2
    assert step_bytes(layout).by_space == {"vmem": 8192, "smem": 16384}


def test_tpu_pipeline_mode_buffer_count():
    # jax's tests/pallas/tpu_pallas_test.py test_two_input_vadd: block * 4 * (2 + x + y)
    block = 1024
    for x, y in [(2, 2), (2, 1), (1, 1)]:
        layout = CallLayout("tpu", grid=(128,), blocks=(
            _f32(block, buffer_count=x), _f32(block, buffer_count=y), _f32(block)))
        assert step_bytes(layout).total == block * 4 * (2 + x + y)


def test_tpu_any_hbm_and_semaphores_stay_off_chip():
    layout = CallLayout("tpu", grid=(8,), blocks=(
        _f32(1024, 1024, memory_space="any"), _f32(1024, 1024, memory_space="hbm"), _f32(8, 128)),
        scratch=(_f32(2, 8, 128, memory_space="vmem"), Operand((2,), 32, "semaphore_mem")))
    assert step_bytes(layout).by_space == {"vmem": 2 * 8 * 128 * 4 + 2 * 8 * 128 * 4}


def test_tpu_scalar_prefetch_sits_whole_in_smem():
    layout = CallLayout("tpu", grid=(4,), blocks=(_f32(8, 128), _f32(8, 128)),
                        index=(Operand((4,), 32, "default"), Operand((3, 5), 8)))
    assert step_bytes(layout).by_space == {"vmem": 2 * 2 * 4096, "smem": 16 + 15}
    assert step_bytes(layout).total == 16384 + 31


def test_sub_byte_and_narrow_dtypes():
    layout = CallLayout("tpu", grid=(2,), blocks=(Operand((8, 129), 4), Operand((8, 128), 16)))
    assert step_bytes(layout).total == 2 * ((8 * 129 * 4 + 7) // 8) + 2 * 8 * 128 * 2


def test_tpu_vmem_limit_bytes_replaces_the_default():
    sb = step_bytes(CallLayout("tpu", grid=(2,), blocks=(_f32(8, 128),), vmem_limit_bytes=4096))
    assert (sb.limit_bytes, sb.limit_source) == (4096, "vmem_limit_bytes")
    assert step_bytes(CallLayout("generic", blocks=(_f32(8, 128),))).limit_bytes == TPU_SCOPED_VMEM_DEFAULT


# =========================================================================== GPU rules


def test_mosaic_gpu_blocks_times_concurrent_steps():
    blocks = (_f32(128, 64), _f32(64, 128), _f32(128, 128, memory_space="gmem"))
    one = 2 * 128 * 64 * 4
    assert step_bytes(CallLayout("mosaic_gpu", grid=(4, 8), blocks=blocks)).total == one
    assert step_bytes(CallLayout("mosaic_gpu", grid=(4, 8), blocks=blocks, max_concurrent_steps=3,
                                 sequential_steps=8)).total == 3 * one
    # emit_pipeline shrinks max_concurrent_steps to the number of sequential steps
    assert step_bytes(CallLayout("mosaic_gpu", grid=(4, 2), blocks=blocks, max_concurrent_steps=3,
                                 sequential_steps=2)).total == 2 * one
    sb = step_bytes(CallLayout("mosaic_gpu", blocks=blocks, scratch=(_f32(128, 128, memory_space="smem"),
                                                                      _f32(128, 128, memory_space="regs"))))
    assert sb.by_space == {"smem": one + 128 * 128 * 4}
    assert (sb.limit_space, sb.limit_bytes) == ("smem", MOSAIC_GPU_SMEM_DEFAULT) == ("smem", 232448)


def test_triton_blocks_count_once_without_a_limit():
    sb = step_bytes(CallLayout("triton", grid=(4,), blocks=(_f32(64, 64), _f32(64, 64))))
    assert (sb.total, sb.limit_bytes) == (2 * 64 * 64 * 4, None)


# =========================================================================== entry, units, notes


def test_entry_is_the_largest_call():
    small = CallLayout("tpu", grid=(2,), blocks=(_f32(8, 128),))
    big = CallLayout("tpu", grid=(2,), blocks=(_f32(64, 128),))
    assert entry_bytes(_calls(small, big)) == 2 * 64 * 128 * 4
    assert entry_bytes([{"on_chip": None}, {"backend": "tpu"}]) is None
    assert footprint_record(_calls(big), _calls(small)) == {"before_bytes": 65536, "after_bytes": 8192}
    assert footprint_record(_calls(big), []) is None


@pytest.mark.parametrize("n, text", [
    (0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (1536, "1.5 KiB"), (10 * 1024, "10 KiB"),
    (288 * 1024, "288 KiB"), (8 * 1024 ** 2, "8.0 MiB"), (40 * 1024 ** 2, "40 MiB"),
    (1024 ** 2 - 1, "1024 KiB"), (3 * 1024 ** 3, "3.0 GiB"),
])
def test_format_bytes(n, text):
    assert format_bytes(n) == text


def _kernel(name: str, layout: CallLayout, line: int = 0) -> dict:
    return {"kernel": name, "on_chip": step_bytes(layout).to_json(), "source": {"file": "k.py", "line": line}}


WHOLE_48 = CallLayout("generic", blocks=(_f32(4096, 1024, trivial_window=True),) * 3)  # 48 MiB
BLOCKS_12 = CallLayout("generic", grid=(8,), blocks=(_f32(512, 1024),) * 3)  # 12 MiB


def test_pf301_says_when_the_rewrite_brings_a_kernel_under_the_limit():
    [f] = footprint_findings([_kernel("tanh_kernel", WHOLE_48, 30)], [_kernel("tanh_kernel", BLOCKS_12, 31)],
                             "f(f32[4096, 1024])")
    assert (f["code"], f["severity"], f["side"], f["kernel"], f["line"]) == ("PF301", "warning", "original", "tanh_kernel", 30)
    assert (f["before_bytes"], f["after_bytes"], f["limit_bytes"], f["brought_under"]) == (
        48 * 1024 ** 2, 12 * 1024 ** 2, TPU_SCOPED_VMEM_DEFAULT, True)
    assert f["message"].startswith("kernel `tanh_kernel` holds 48 MiB of VMEM per grid step on f(f32[4096, 1024]),"
                                   " over TPU's default scoped VMEM limit of 16 MiB (v4, v5e, v5p; 32 MiB on v6e, v7x")
    assert "jax 0.12 jax/_src/pallas/mosaic/core.py" in f["message"]
    assert f["message"].endswith("; the rewrite brings it under: 12 MiB per step")
    assert format_finding(f).startswith("PF301 warning (original, k.py:30): kernel `tanh_kernel` holds 48 MiB")
    assert footprint_findings(_calls(BLOCKS_12), _calls(BLOCKS_12), "f") == []


def test_pf301_for_a_kernel_the_rewrite_leaves_over_and_for_a_rewrite_that_goes_over():
    still = CallLayout("generic", grid=(2,), blocks=(_f32(2048, 1024),) * 3)  # 2 x 3 x 8 MiB
    [f] = footprint_findings(_calls(WHOLE_48), _calls(still), "f")
    assert not f["brought_under"] and f["after_bytes"] == 48 * 1024 ** 2
    assert "; the rewrite does not bring it under: 48 MiB per step (smaller blocks would" in f["message"]
    [worse] = footprint_findings(_calls(BLOCKS_12), _calls(WHOLE_48), "f")
    assert (worse["side"], worse["before_bytes"], worse["after_bytes"]) == ("rewrite", 12 * 1024 ** 2, 48 * 1024 ** 2)
    assert worse["message"].startswith("the rewrite of a kernel holds 48 MiB of VMEM per grid step on f, over")
    assert worse["message"].endswith("; the original holds 12 MiB, within it")


def test_pf301_pairs_kernels_by_name_and_counts_each_call():
    small = CallLayout("generic", blocks=(_f32(8, 128, trivial_window=True),))
    before = [_kernel("a", small), _kernel("b", WHOLE_48)]
    after = [_kernel("b", BLOCKS_12), _kernel("c", small), _kernel("a", small)]
    [f] = footprint_findings(before, after, "f")
    assert (f["kernel"], f["after_bytes"], f["brought_under"]) == ("b", 12 * 1024 ** 2, True)
    # unnamed calls pair by position only when both sides make as many
    [g] = footprint_findings(_calls(small, WHOLE_48), _calls(BLOCKS_12), "f")
    assert g["after_bytes"] is None and g["message"].endswith("the rewrite's footprint was not counted")


def test_pf301_with_an_explicit_vmem_limit_and_on_mosaic_gpu():
    tight = CallLayout("tpu", grid=(2,), blocks=(_f32(8, 128),), vmem_limit_bytes=4096)
    [f] = footprint_findings(_calls(tight), _calls(tight), "f")
    assert f["message"] == ("a kernel holds 8.0 KiB of VMEM per grid step on f, over the 4.0 KiB its"
                            " pltpu.CompilerParams(vmem_limit_bytes=...) allows; the rewrite does not bring it under:"
                            " 8.0 KiB per step (smaller blocks would, or a larger pltpu.CompilerParams(vmem_limit_bytes=...))")
    gpu_before = CallLayout("mosaic_gpu", blocks=(_f32(256, 256), _f32(256, 256)))  # 512 KiB
    gpu_after = CallLayout("mosaic_gpu", grid=(4, 4), blocks=(_f32(64, 64), _f32(64, 64)))
    [g] = footprint_findings(_calls(gpu_before), _calls(gpu_after), "f")
    assert g["message"].startswith("a kernel holds 512 KiB of SMEM per grid step on f, over Mosaic GPU's shared"
                                   " memory limit of 227 KiB per block")
    assert g["message"].endswith("the rewrite brings it under: 32 KiB per step")


def test_verdict_line_and_json_carry_the_footprint_and_its_findings():
    before, after = _calls(WHOLE_48), _calls(BLOCKS_12)
    v = Verdict(entry="scaled_tanh", status="verified", max_abs_err=0.0, interpreters=["interpret"],
                dynamic_slices_before=3, dynamic_slices_after=0,
                footprint=footprint_record(before, after), findings=footprint_findings(before, after, "f"))
    line, finding = format_verdict(v).split("\n")
    assert line == ("verified scaled_tanh: 3 dynamic slices -> 0, max abs err 0.0 (interpret),"
                    " on-chip per step: 48 MiB → 12 MiB")
    assert finding.startswith("  PF301 warning (original): a kernel holds 48 MiB of VMEM per grid step on f, over")
    j = v.to_json()
    assert tuple(j) == JSON_KEYS and JSON_KEYS[-2:] == ("footprint", "findings")
    assert j["footprint"] == {"before_bytes": 3 * 16 * 1024 ** 2, "after_bytes": 3 * 2 * 2 * 1024 ** 2}
    assert [f["code"] for f in j["findings"]] == ["PF301"]
    json.dumps(j)
    # from the worker's record; none counted -> no footprint on the line
    w = Verdict.from_worker({"entry": "f", "status": "verified", "footprint": {"before_bytes": 8 * 1024 ** 2,
                                                                             "after_bytes": 288 * 1024}})
    assert format_verdict(w) == ("verified f: dynamic slices not counted, max abs err n/a,"
                                 " on-chip per step: 8.0 MiB → 288 KiB")
    assert ", on-chip" not in format_verdict(Verdict(entry="f", status="verified"))


# =========================================================================== layouts read off a trace


def test_a_named_pallas_call_still_names_its_kernel():
    """`pallas_call(..., name="attn_fwd")` puts its name where the kernel's was in the trace's
    debug info; the survey reads the kernel's name off its `def` line, which tells which kernel
    an example reached (an unsafe fix of a named call is otherwise never verified)."""
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    from pallas_fix.verify.worker.kernel_survey import pallas_call_infos, trace

    def double_rows_kernel(x_ref, o_ref):
        o_ref[...] = 2 * x_ref[...]

    def f(x):
        return pl.pallas_call(double_rows_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              name="renamed_call")(x)

    (info,) = pallas_call_infos(trace(f, [jax.ShapeDtypeStruct((8, 128), jnp.float32)]))
    assert info["kernel"] == "double_rows_kernel"


def test_layout_of_a_traced_scalar_prefetch_call():
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    from pallas_fix.verify.worker.kernel_survey import pallas_call_infos, trace

    def kernel(table_ref, x_ref, w_ref, h_ref, o_ref, acc_ref, sem):
        o_ref[...] = x_ref[...] + w_ref[...] + acc_ref[...]

    def f(table, x, w, h):
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((32, 128), jnp.float32),
            grid_spec=pltpu.PrefetchScalarGridSpec(
                num_scalar_prefetch=1, grid=(4,),
                in_specs=[pl.BlockSpec((8, 128), lambda i, t: (t[i], 0)),
                          pl.BlockSpec((8, 128), lambda i, t: (0, 0)),  # whole array, index 0
                          pl.BlockSpec(memory_space=pl.ANY)],
                out_specs=pl.BlockSpec((8, 128), lambda i, t: (i, 0), pipeline_mode=pl.Buffered(1)),
                scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32), pltpu.SemaphoreType.DMA(())]),
        )(table, x, w, h)

    structs = [jax.ShapeDtypeStruct((4,), jnp.int32), jax.ShapeDtypeStruct((32, 128), jnp.float32),
               jax.ShapeDtypeStruct((8, 128), jnp.float32), jax.ShapeDtypeStruct((1024, 1024), jnp.float32)]
    (info,) = pallas_call_infos(trace(f, structs))
    block = 8 * 128 * 4
    # x: double-buffered; w: whole, once; h: ANY, none; out: Buffered(1); scratch: once; sem: none
    assert info["on_chip"]["by_space"] == {"vmem": 2 * block + block + block + block, "smem": 16}
    assert info["on_chip"]["bytes"] == 5 * block + 16
    assert info["num_scalar_prefetch"] == 1


# =========================================================================== a verified pair


@pytest.mark.interp
def test_k_loop_matmul_footprint():
    src = (FIX / "matmul_before.py").read_text()
    examples = collect_examples(FIX / "matmul_before.py", src)
    (v,) = verify_sources(src, (FIX / "matmul_after.py").read_text(), examples, path=str(FIX / "matmul_before.py"))
    assert v.status == "verified", v.message
    # f32[128, 512] @ f32[512, 128], bm = bn = 64, bk = 128 (tpu CompilerParams):
    # before: 2 x (64x512 + 512x64 + 64x64) x 4 B; after: 2 x (64x128 + 128x64 + 64x64) x 4 B + acc 64x64x4
    assert v.footprint == {"before_bytes": 557056, "after_bytes": 180224}
    assert v.footprint["after_bytes"] < v.footprint["before_bytes"]
    assert "), on-chip per step: 544 KiB → 176 KiB — on matmul(" in format_verdict(v)
    assert "over" not in v.message
    assert v.to_json()["footprint"] == v.footprint


# =========================================================================== PF301 on traced kernels

# A kernel walking row blocks of whole arrays: at f32[4096, 2048] it holds 32 MiB in + 32 MiB
# out; its rewrite's 1024-row blocks (8 MiB, double-buffered, in and out) still hold 32 MiB.
STAYS_OVER = '''\
# pallas-fix: example scale_rows(f32[4096, 2048])
import jax
from jax import lax
from jax.experimental import pallas as pl


def kernel(x_ref, o_ref):
    def body(i, c):
        o_ref[pl.ds(i * 1024, 1024), :] = x_ref[pl.ds(i * 1024, 1024), :] * 2.0
        return c

    lax.fori_loop(0, x_ref.shape[0] // 1024, body, 0)


def scale_rows(x):
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
    )(x)
'''


def _traced_findings(before: str, after: str, tmp_path) -> list[dict]:
    """PF301 of two module texts at the first one's example, traced (nothing runs)."""
    from pallas_fix.verify.worker.calls import Call
    from pallas_fix.verify.worker.kernel_survey import pallas_call_infos, trace
    from pallas_fix.verify.worker.user_modules import load_module, resolve_entry

    (ex,) = collect_examples(tmp_path / "k.py", before, pyproject=False, recorded=False)
    infos = []
    for kind, text in (("original", before), ("rewritten", after)):
        call = Call(ex)
        fn = resolve_entry(load_module(kind, text, "k.py", str(tmp_path)), ex.entry)
        infos.append(pallas_call_infos(trace(call.bind(fn), call.shape_structs())))
    return footprint_findings(*infos, ex.text)


def _proposed(source: str) -> str:
    from pallas_fix.engine import fix_source

    fixed = fix_source(source, "k.py", unsafe=True)
    assert fixed.changed and not fixed.error, fixed.error
    return fixed.source


@pytest.mark.interp
def test_pf301_examples_are_reported_on_their_marked_lines(tmp_path):
    from pallas_fix.rules.registry import RULES
    from pallas_fix.rules.rule import expected_lines

    rule = RULES["PF301"]
    assert rule.stage == "verification" and rule.severity == "warning"
    for example in rule.invalid:
        found = _traced_findings(example, example, tmp_path)
        assert [(f["code"], f["line"]) for f in found] == [("PF301", n) for n in expected_lines(example, "PF301")]
    for example in rule.valid:
        assert _traced_findings(example, example, tmp_path) == []
    # the VALID example is what pallas-fix proposes for the INVALID one
    [f] = _traced_findings(rule.invalid[0], _proposed(rule.invalid[0]), tmp_path)
    assert f["brought_under"] and (f["before_bytes"], f["after_bytes"]) == (32 * 1024 ** 2, 8 * 1024 ** 2)


@pytest.mark.interp
def test_pf301_for_a_kernel_whose_rewrite_stays_over_the_limit(tmp_path):
    [f] = _traced_findings(STAYS_OVER, _proposed(STAYS_OVER), tmp_path)
    assert (f["side"], f["brought_under"]) == ("original", False)
    assert (f["before_bytes"], f["after_bytes"]) == (64 * 1024 ** 2, 32 * 1024 ** 2)
    assert "the rewrite does not bring it under: 32 MiB per step" in f["message"]


@pytest.mark.interp
def test_verify_reports_pf301_and_that_the_rewrite_brings_the_kernel_under(tmp_path):
    from pallas_fix.rules.registry import RULES

    source = RULES["PF301"].invalid[0]
    examples = collect_examples(tmp_path / "k.py", source, pyproject=False, recorded=False)
    (v,) = verify_sources(source, _proposed(source), examples, path="k.py", seeds=(0,))
    assert v.status == "verified", v.message
    [f] = v.findings
    assert (f["code"], f["line"], f["brought_under"]) == ("PF301", 16, True)
    text = format_verdict(v)
    assert "on-chip per step: 32 MiB → 8.0 MiB" in text
    assert "\n  PF301 warning (original, k.py:16): kernel `kernel` holds 32 MiB of VMEM per grid step" in text
    assert text.endswith("the rewrite brings it under: 8.0 MiB per step")
    assert v.to_json()["findings"] == v.findings
