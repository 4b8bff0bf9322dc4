"""A lift must not leave a TPU user slower without saying so, nor give a kernel blocks the chip
rejects (issue 27): the step-count model (pallas_fix/verify/judge/lift_cost.py, core/speed.py)
and `--apply`'s policy (pallas_fix/frontends/kernel_rewrites.py), Mosaic's block tiling rule
(statically: rewrite/proofs/tpu_tiling.py; at verification: verify/judge/tiling.py), PF302, and the
"parallel" semantics of a new axis that is the whole grid of a TPU call.

Fixtures: tests/fixtures/intent/. The unit tests script the verifier's verdicts; the interp tests
run the real CLI.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pallas_fix.core.config import Config, ConfigError, load_config
from pallas_fix.core.examples import parse_example
from pallas_fix.core.model import Backend
from pallas_fix.engine import analyze_source, fix_source
from pallas_fix.frontends.cli.app import main
from pallas_fix.frontends.kernel_rewrites import rewrite_by_kernel
from pallas_fix.frontends.lsp.incremental.units import offers_of
from pallas_fix.frontends.lsp.snapshot import FixInfo, quick_fix_title
from pallas_fix.frontends.service import Options, config_for
from pallas_fix.verify.judge.footprint import CallLayout, Operand, step_bytes
from pallas_fix.verify.judge.lift_cost import held_lift, lift_costs, trade_note
from pallas_fix.verify.judge.tiling import bad_dims, created_violations
from pallas_fix.verify.runner import Verdict, format_verdict, verify_sources

FIX = Path(__file__).parent / "fixtures" / "intent"
MATMUL = FIX / "kloop_matmul_gridded.py"
MAP = FIX / "map_loop_no_grid.py"
RESCUE = FIX / "rescue_wide_rows.py"
TILING = FIX / "tiling_lane_block.py"
UNALIGNED = FIX / "unaligned_rows.py"
KiB, MiB = 1024, 1024 * 1024


def _f32(*shape, **kw) -> Operand:
    return Operand(tuple(shape), 32, **kw)


def _call(layout: CallLayout, kernel: str = "matmul_kernel", backend: str = "tpu") -> dict:
    """What kernel_survey records of one traced call, for a hand-made layout."""
    steps = 1
    for d in layout.grid:
        steps *= d
    return {"kernel": kernel, "backend": backend, "on_chip": step_bytes(layout).to_json(), "steps": steps,
            "windowed": sum(1 for b in layout.blocks if not b.trivial_window),
            "scratch_bytes": sum(s.nbytes for s in layout.scratch)}


# kloop_matmul_gridded.py at f32[256, 512] @ f32[512, 256], 128 blocks: (i, j) panels, then K on a third axis.
MATMUL_BEFORE = CallLayout("tpu", grid=(2, 2), blocks=(_f32(128, 512), _f32(512, 128), _f32(128, 128)))
MATMUL_AFTER = CallLayout("tpu", grid=(2, 2, 4), blocks=(_f32(128, 128), _f32(128, 128), _f32(128, 128)),
                          scratch=(_f32(128, 128, memory_space="vmem"),))


def _matmul_records() -> list[dict]:
    return lift_costs([_call(MATMUL_BEFORE)], [_call(MATMUL_AFTER)])


# =========================================================================== the step-count model


def test_a_lift_of_a_pipelined_kernel_that_fits_only_trades_speed_for_memory():
    (r,) = _matmul_records()
    assert (r["steps_before"], r["steps_after"], r["pipelined_before"], r["fits_before"], r["adds_scratch"]) == (4, 16, True, True, True)
    assert (r["before_bytes"], r["after_bytes"]) == (2 * (2 * 128 * 512 + 128 * 128) * 4, 2 * 3 * 128 * 128 * 4 + 128 * 128 * 4)
    assert r["trades_speed_for_memory"] and held_lift([r]) is r
    note = trade_note(r, "matmul(f32[256, 512], f32[512, 256])")
    assert "fits on chip at matmul(f32[256, 512], f32[512, 256])" in note
    assert "already pipelined over 4 grid steps; the rewrite takes 16 steps (x4)" in note
    assert "scratch state" in note and "step-count model expects it slower" in note
    assert "on-chip per step 1.1 MiB -> 448 KiB (limit 16 MiB)" in note


def test_no_pipelining_a_rescue_or_a_gpu_kernel_is_not_held():
    whole = CallLayout("tpu", blocks=(_f32(256, 256, trivial_window=True),) * 2)  # no grid
    rows = CallLayout("tpu", grid=(4,), blocks=(_f32(64, 256),) * 2)
    (map_loop,) = lift_costs([_call(whole, "k")], [_call(rows, "k")])
    assert not map_loop["pipelined_before"] and not map_loop["trades_speed_for_memory"]
    wide = CallLayout("tpu", grid=(2,), blocks=(_f32(32, 65536),) * 2)  # 32 MiB per step
    narrow = CallLayout("tpu", grid=(2, 8), blocks=(_f32(32, 8192),) * 2)
    (rescue,) = lift_costs([_call(wide, "k")], [_call(narrow, "k")])
    assert rescue["pipelined_before"] and rescue["fits_before"] is False and not rescue["trades_speed_for_memory"]
    # one example where the original does not fit is enough to apply the lift
    assert held_lift([_matmul_records()[0], rescue]) is None and held_lift([]) is None
    gpu = lift_costs([_call(MATMUL_BEFORE, backend="triton")], [_call(MATMUL_AFTER, backend="triton")])
    assert not gpu[0]["trades_speed_for_memory"]
    assert lift_costs([_call(MATMUL_BEFORE)], [_call(MATMUL_BEFORE)]) == []  # steps unchanged: no lift


def test_the_verdict_says_so_on_a_line_of_its_own():
    v = Verdict(entry="matmul", status="verified", max_abs_err=0.0, speed=_matmul_records())
    line, trade = format_verdict(v).split("\n")
    assert trade.startswith("  kernel `matmul_kernel`: trades speed for memory on TPU")
    assert v.to_json()["speed"] == v.speed
    assert Verdict.from_worker({"entry": "m", "status": "verified", "speed": v.speed}).speed == v.speed


# =========================================================================== --apply's policy


def _scripted(records: list[dict], example: str = "matmul(f32[256, 512], f32[512, 256], bm=128, bn=128, bk=128)"):
    def verify(old, new, kernel):
        return [Verdict(entry="matmul", status="verified", example=example, speed=records,
                        details={"pallas_calls": [{"kernel": kernel}]})]
    return verify


def test_apply_holds_a_memory_only_lift_and_writes_it_with_the_option():
    src = MATMUL.read_text()
    held = rewrite_by_kernel(src, str(MATMUL), Config(), _scripted(_matmul_records()), allow_unsafe=False)
    (k,) = held.kernels
    assert k.status == "refused" and held.source == src
    assert "lifted the reduction over `k`" in k.reason and "trades speed for memory on TPU" in k.reason
    assert "1.1 MiB -> 448 KiB" in k.reason and "--lift-for-memory" in k.reason
    chosen = rewrite_by_kernel(src, str(MATMUL), Config(lift_for_memory=True), _scripted(_matmul_records()), allow_unsafe=False)
    (k,) = chosen.kernels
    assert k.status == "verified" and "pl.program_id(2)" in chosen.source
    assert len(k.applied) == 1 and "; trades speed for memory on TPU" in k.applied[0] and "1.1 MiB -> 448 KiB" in k.applied[0]


def test_apply_writes_a_rescue_and_a_lift_no_example_measured_as_before():
    src = MATMUL.read_text()
    rescue = dict(_matmul_records()[0], fits_before=False, trades_speed_for_memory=False)
    out = rewrite_by_kernel(src, str(MATMUL), Config(), _scripted([rescue]), allow_unsafe=False)
    assert [k.status for k in out.kernels] == ["verified"] and "trades" not in out.kernels[0].applied[0]
    # verified, but no step count was measured: the source's note
    out = rewrite_by_kernel(src, str(MATMUL), Config(), _scripted([]), allow_unsafe=False)
    assert out.kernels[0].status == "verified" and "speed at your sizes unknown" in out.kernels[0].applied[0]


def test_without_an_example_the_message_says_the_speed_is_unknown():
    out = rewrite_by_kernel(MATMUL.read_text(), str(MATMUL), Config(), None, allow_unsafe=True)
    (k,) = out.kernels
    assert k.status == "not verified" and "pl.program_id(2)" in out.source  # today's behaviour
    # the K loop is strip-mined now (rewrite.reduction.strip): the note says by how much the steps grow
    assert ("may trade speed for memory on TPU where the windows per step do not cover the loop: the call is already"
            " pipelined over 2 grid axes and the lift multiplies its grid steps by the loop's trip count over the"
            " windows each step walks (each step walking `windows_per_step` of its windows") in k.applied[0]
    assert "each step reading and writing its scratch state" in k.applied[0]
    assert "speed at your sizes unknown without an example call" in k.applied[0]
    # a call without a grid: nothing to say
    (m,) = rewrite_by_kernel(MAP.read_text(), str(MAP), Config(), None, allow_unsafe=False).kernels
    assert m.status == "not verified" and "speed" not in m.applied[0]


def test_lift_for_memory_is_a_setting_and_an_option(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.pallas-fix]\nlift-for-memory = true\n")
    (tmp_path / "k.py").write_text("x = 1\n")
    assert load_config(tmp_path / "k.py").lift_for_memory is True
    assert config_for(str(tmp_path / "k.py"), Options(lift_for_memory=False)).lift_for_memory is False
    (tmp_path / "pyproject.toml").write_text('[tool.pallas-fix]\nlift-for-memory = "yes"\n')
    with pytest.raises(ConfigError, match="lift-for-memory must be true or false"):
        load_config(tmp_path / "k.py")
    assert Config().lift_for_memory is False


def test_the_quick_fix_carries_the_same_note():
    analysis = analyze_source(MATMUL.read_text(), str(MATMUL))
    offers = offers_of(analysis, analysis.findings, allow_unsafe=True)
    codemod, safety, guards, note = next(iter(offers.values()))
    assert codemod == "lift-reduction" and "may trade speed for memory on TPU" in note
    f = analysis.findings[0]
    assert quick_fix_title(f, FixInfo(codemod, safety, guards, note)) == f"Fix PF102: lift-reduction (unsafe) ({note})"
    plain = analyze_source(MAP.read_text(), str(MAP))
    assert all(o[3] == "" for o in offers_of(plain, plain.findings, allow_unsafe=True).values())


# =========================================================================== Mosaic's tiling rule


def _block(block, array, bits=32, **kw) -> dict:
    return {"origin": "args[0]", "block": list(block), "array": list(array), "bits": bits, **kw}


def test_the_tiling_rule_per_dtype_rank_and_memory_space():
    assert bad_dims(_block((8, 128), (64, 256))) == {}
    assert bad_dims(_block((64, 256), (64, 256))) == {}  # the whole array
    assert set(bad_dims(_block((4, 64), (64, 256)))) == {"rows", "lanes"}
    assert set(bad_dims(_block((8, 128), (64, 256), bits=16))) == {"rows"}  # bf16 packs 16 rows
    assert bad_dims(_block((16, 128), (64, 256), bits=16)) == {}
    assert set(bad_dims(_block((8, 128), (64, 256), bits=8))) == {"rows"}
    assert bad_dims(_block((1, 128), (64, 256), space="smem", trivial=True)) == {}
    assert set(bad_dims(_block((1, 128), (64, 256)))) == {"rows"}  # a squeezed dim counts as 1
    assert bad_dims(_block((2048,), (8192,))) == {} and set(bad_dims(_block((96,), (8192,)))) == {"block"}


def test_a_violation_the_original_already_has_is_not_the_rewrites():
    before = [{"blocks": [_block((512, 64), (512, 128))]}]
    after = [{"backend": "tpu", "kernel": "k", "blocks": [_block((128, 64), (512, 128)), _block((4, 512), (128, 512), bits=16)]}]
    (only,) = created_violations(before, after)
    assert "kernel `k` operand `args[0]` blocks of (4, 512) of a (128, 512) 16-bit array" in only
    assert "neither a multiple of 16" in only and "use blocks of a multiple of 16 rows" in only
    assert created_violations(before, [dict(after[0], backend="triton")]) == []


def test_a_block_known_from_the_source_to_break_the_rule_is_refused_statically():
    findings = analyze_source(TILING.read_text(), str(TILING)).findings
    assert findings and not any(f.fixable for f in findings)
    reason = findings[0].refusal
    assert "on TPU, Mosaic would reject the block this rewrite gives `x_ref`: its last dim would be `bk` = 64" in reason
    assert "on the example `rowsum(f32[64, 256], bk=64)`" in reason and "a multiple of 128 columns" in reason
    # the same kernel compiled for a GPU has no such rule
    gpu = TILING.read_text().replace("compiler_params=pltpu.CompilerParams(dimension_semantics=(\"parallel\",)),\n", "")
    gpu = gpu.replace("import tpu as pltpu", "import mosaic_gpu as plgpu")
    assert any(f.fixable for f in analyze_source(gpu, "gpu.py", Config(backend=Backend.MOSAIC_GPU)).findings)


@pytest.mark.interp
def test_a_block_only_the_example_shows_breaks_the_rule_is_refused_at_verification():
    src = "\n".join(l for l in TILING.read_text().splitlines() if "pallas-fix: example" not in l) + "\n"
    # the one-window lift: strip-mined (the default on a pipelined call), the 4 windows of this
    # example make one block of the whole 256 columns, which the rule allows
    fixed = fix_source(src, "tiling.py", Config(lift_for_memory=True), unsafe=True)
    assert fixed.changed, "without an example the sizes are not known from the source"
    (v,) = verify_sources(src, fixed.source, [parse_example("rowsum(f32[64, 256], bk=64)")], path="tiling.py")
    assert v.status == "refused", v.message
    assert "operand `args[0]` blocks of (32, 64) of a (64, 256) 32-bit array" in v.message
    assert "use blocks of a multiple of 128 columns" in v.message and v.interpreters == []


# =========================================================================== PF302


def test_a_window_mosaic_cannot_prove_aligned_is_pf302_in_the_original():
    findings = [f for f in analyze_source(UNALIGNED.read_text(), str(UNALIGNED)).findings if f.code == "PF302"]
    assert {f.kernel for f in findings} == {"rows4_kernel"} and {f.span.line for f in findings} == {13}
    msg = findings[0].message
    assert "`pl.multiple_of(i * 4, 4)`, which Mosaic cannot prove a multiple of 8 rows (only of 4)" in msg
    assert "E2003" in msg and "Use windows of 8 rows" in msg
    # not a TPU kernel: nothing to say
    generic = UNALIGNED.read_text().replace("params = pltpu.CompilerParams()", "params = None")
    generic = generic.replace("from jax.experimental.pallas import tpu as pltpu\n", "")
    assert not [f for f in analyze_source(generic, "g.py").findings if f.code == "PF302"]


# =========================================================================== "parallel"


def _with_call_args(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1
    return text.replace(old, new)


def test_a_new_axis_that_is_the_whole_grid_of_a_tpu_call_is_parallel():
    src = MAP.read_text()
    out = fix_source(src, "m.py").source
    assert 'compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),' in out
    # compiler params without semantics get them
    with_limit = _with_call_args(src, "out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),\n",
                                 "out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),\n"
                                 "        compiler_params=pltpu.CompilerParams(vmem_limit_bytes=32 * 1024 * 1024),\n")
    out = " ".join(fix_source(with_limit, "m.py").source.split())
    assert 'pltpu.CompilerParams( vmem_limit_bytes=32 * 1024 * 1024, dimension_semantics=("parallel",), )' in out
    # an unknown backend (no pltpu): left as it was
    generic = src.replace("from jax.experimental.pallas import tpu as pltpu  # noqa: F401  (a TPU kernel: the import names the backend)\n", "")
    assert "compiler_params" not in fix_source(generic, "m.py").source
    # after existing axes whose semantics are undeclared ("arbitrary"): "parallel" would not be a prefix
    rows = RESCUE.read_text().replace('        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),\n', "")
    assert "dimension_semantics" not in fix_source(rows, "r.py").source


# =========================================================================== the CLI, verified for real


def _run(capsys, *args) -> tuple[int, str]:
    try:
        main([str(a) for a in args])
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, capsys.readouterr().err


@pytest.mark.interp
def test_cli_holds_the_gridded_matmul_and_writes_it_on_request(capsys, tmp_path):
    path = tmp_path / MATMUL.name
    shutil.copy(MATMUL, path)
    code, err = _run(capsys, "--apply", "--no-color", path)
    assert code == 1 and path.read_text() == MATMUL.read_text(), err
    assert "not written" in err and "trades speed for memory on TPU" in err
    assert "on-chip per step 8.1 MiB -> 2.2 MiB (limit 16 MiB)" in err and "--lift-for-memory" in err
    assert "the rewrite takes 16 steps (x4), each step walking `windows_per_step` of its windows" in err
    code, err = _run(capsys, "--apply", "--no-color", "--lift-for-memory", path)
    assert code == 0, err
    assert "fixed" in err and "trades speed for memory on TPU" in err and "pl.program_id(2)" in path.read_text()


@pytest.mark.interp
def test_cli_writes_a_map_loop_and_a_rescue_by_default(capsys, tmp_path):
    for fixture in (MAP, RESCUE):
        shutil.copy(fixture, tmp_path / fixture.name)
    code, err = _run(capsys, "--apply", "--no-color", tmp_path / MAP.name, tmp_path / RESCUE.name)
    assert code == 0, err
    assert "trades speed" not in err and "not written" not in err
    assert "PF301 warning (original" in err and "the rewrite brings it under: 4.0 MiB per step" in err
    assert 'dimension_semantics=("parallel",)' in (tmp_path / MAP.name).read_text()
    assert "pl.ds(" not in (tmp_path / RESCUE.name).read_text()


@pytest.mark.interp
def test_cli_refuses_a_rewrite_with_4_row_blocks_and_says_the_original_will_not_compile_either(capsys, tmp_path):
    path = tmp_path / UNALIGNED.name
    shutil.copy(UNALIGNED, path)
    code, err = _run(capsys, "--apply", "--no-color", "--kernel", "rows4_kernel", "--example", "run(f32[64, 128])", path)
    assert path.read_text() == UNALIGNED.read_text(), err
    assert "not written" in err and "blocks of (4, 128) of a (64, 128) 32-bit array" in err
    assert "use blocks of a multiple of 8 rows" in err
    assert "the original will not compile on TPU either (PF302, line 13" in err


@pytest.mark.interp
def test_a_notebook_whose_lift_only_trades_speed_for_memory_is_held_too(capsys, tmp_path):
    import json

    nb = {"cells": [{"cell_type": "code", "execution_count": None, "id": "k", "metadata": {}, "outputs": [],
                     "source": MATMUL.read_text().splitlines(True)}],
          "metadata": {"language_info": {"name": "python"}}, "nbformat": 4, "nbformat_minor": 5}
    path = tmp_path / "matmul.ipynb"
    text = json.dumps(nb, indent=1) + "\n"
    path.write_text(text)
    # A notebook's rewrite is proposed (then verified) as a whole: its unsafe R2 needs --unsafe-fixes.
    code, err = _run(capsys, "--apply", "--unsafe-fixes", "--no-color", path)
    assert code == 1 and path.read_text() == text, err
    assert "not written" in err and "trades speed for memory on TPU" in err and "--lift-for-memory" in err
    code, err = _run(capsys, "--apply", "--unsafe-fixes", "--no-color", "--lift-for-memory", path)
    assert code == 0 and "pl.program_id(2)" in path.read_text(), err
