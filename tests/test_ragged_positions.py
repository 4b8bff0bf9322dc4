"""A ragged `pl.cdiv` grid in a kernel that reads its position (issues 26, 28;
rewrite.proofs.ragged_blocks): on Triton, which masks a BlockSpec's partial last block itself,
the program-id windows lift as an unsafe fix. Where every window is a masked `pltriton` load or
store the interpreters pad a window past the end as hardware leaves it and compare at ragged
sizes too; a plain `x_ref[rows]` they clamp, so such a lift is judged only where the block
divides (FixPlan.divided_only: an example with a partial block is not compared, and says so). A
compiled TPU kernel does not clamp a window past the end either (benchmarks/tpu_experiments/
oob_windows.py), so there the lift is the same unsafe fix, judged where the block divides; on
Mosaic GPU or an unknown backend it is refused. Fixtures: tests/fixtures/codemods/program_id_blocks/
pid_ragged_position_triton_*, pid_ragged_position_unmasked_triton_*, pid_ragged_position_tpu_*
(pairs, run by test_codemod_pairs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pallas_fix.core.config import Config
from pallas_fix.core.examples import parse_example
from pallas_fix.engine import analyze_source, fix_source
from pallas_fix.verify.judge.partial_blocks import partial_blocks
from pallas_fix.verify.runner import verify_sources

FIXTURES = Path(__file__).parent / "fixtures"
MASKED = FIXTURES / "codemods" / "program_id_blocks" / "pid_ragged_position_triton_before.py"
PAIR = FIXTURES / "codemods" / "program_id_blocks" / "pid_ragged_position_unmasked_triton_before.py"
AFTER = PAIR.with_name("pid_ragged_position_unmasked_triton_after.py")
TPU = FIXTURES / "codemods" / "program_id_blocks" / "pid_ragged_position_tpu_before.py"
LOOP = FIXTURES / "codemods" / "lift_loop" / "stepped_loop_reads_position_triton_before.py"
MOE = FIXTURES / "real" / "easydel__moe_matmul.py"
RAGGED = "add_row_index(f32[100, 64])"  # 32 does not divide 100


def _findings(path: Path, source: str | None = None):
    return analyze_source(source or path.read_text(), str(path), Config()).findings


def test_a_triton_kernel_that_reads_its_position_lifts_as_an_unsafe_fix_compared_only_where_it_divides():
    findings = [f for f in _findings(PAIR) if f.code == "PF103"]
    assert findings and all(f.refusal is None for f in findings), [f.refusal for f in findings]
    plans = [f.plan for f in findings]
    assert all(p.safety.value == "unsafe" and p.divided_only for p in plans), plans
    text = plans[0].description
    for words in ("reads its position", "Triton masks every load and store of a BlockSpec's partial last block",
                  "pointer arithmetic", "unmasked window is clamped back inside the array", "only at sizes where `BLOCK_M` divides"):
        assert words in text, text


def test_masked_windows_lift_as_an_unsafe_fix_the_interpreters_compare_at_every_size():
    plans = [f.plan for f in _findings(MASKED) if f.code == "PF103"]
    assert plans and all(p is not None and p.safety.value == "unsafe" and not p.divided_only for p in plans), plans
    assert "the interpreters pad a masked access past the end" in plans[0].description, plans[0].description


def test_a_triton_stepped_loop_that_reads_its_index_lifts_the_same_way():
    """lift-loop (R1): a new `pl.cdiv` axis of the loop's tiles; masked tiles are compared at every
    size, plain ones only where the tile divides."""
    plans = [f.plan for f in _findings(LOOP) if f.code == "PF101"]
    assert plans and all(p is not None and p.safety.value == "unsafe" and not p.divided_only for p in plans), plans
    assert "reads its position" in plans[0].description and "pad a masked access" in plans[0].description
    plain = LOOP.read_text().replace(
        "x = pltriton.load(x_ref.at[pl.ds(row, TR), :], mask=mask, other=0.0)", "x = x_ref[pl.ds(row, TR), :]").replace(
        "pltriton.store(o_ref.at[pl.ds(row, TR), :], x + rows[:, None].astype(x.dtype), mask=mask)",
        "o_ref[pl.ds(row, TR), :] = x + rows[:, None].astype(x.dtype)")
    assert plain != LOOP.read_text()
    plans = [f.plan for f in _findings(LOOP, plain) if f.code == "PF101"]
    assert plans and all(p is not None and p.divided_only for p in plans), plans


def test_the_same_kernel_on_a_tpu_lifts_compared_only_where_it_divides():
    """Compiled, a TPU keeps a window past the end at the rows its start names (measured on a
    v5e): the lift is exact wherever the original is defined. TPU kernels mask with jnp.where
    after a plain read, which the interpreters clamp: judged only where the block divides."""
    plans = [f.plan for f in _findings(TPU) if f.code == "PF103"]
    assert plans and all(p is not None and p.safety.value == "unsafe" and p.divided_only for p in plans), plans
    assert "on a TPU the rewrite is the same program wherever the original is defined" in plans[0].description


def test_mosaic_gpu_keeps_the_refusal_naming_the_backend():
    src = TPU.read_text().replace("from jax.experimental.pallas import tpu as pltpu", "from jax.experimental.pallas import mosaic_gpu as plgpu")
    src = src.replace('compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",))', "compiler_params=plgpu.CompilerParams()")
    src = src.replace("add_row_index(f32[128, 128])", "add_row_index(f32[100, 128])")
    refusals = [f.refusal for f in _findings(TPU, src) if f.code == "PF103"]
    assert refusals and all(r and "reads its position" in r and "on Mosaic GPU" in r for r in refusals), refusals


def test_a_backend_not_known_to_mask_a_partial_block_gets_a_check_or_a_refusal():
    """Neither Triton nor TPU: no partial-block lift; the check `m % BLOCK_M` makes the lift exact where the
    example passes it, and where the example is ragged the refusal names the backend."""
    src = PAIR.read_text().replace("        compiler_params=pltriton.CompilerParams(num_warps=4),\n", "")
    src = src.replace("from jax.experimental.pallas import triton as pltriton\n", "")
    plans = [f.plan for f in _findings(PAIR, src) if f.code == "PF103"]
    assert plans and all(p is not None and p.guards and not p.divided_only for p in plans), plans
    ragged = src.replace("add_row_index(f32[128, 64])", RAGGED)
    refusals = [f.refusal for f in _findings(PAIR, ragged) if f.code == "PF103"]
    assert refusals and all(r and "on an unknown backend" in r and "reads its position" in r for r in refusals), refusals


def test_the_lift_keeps_the_full_size_where_the_kernel_reads_it():
    after = fix_source(MASKED.read_text(), str(MASKED), unsafe=True).source
    assert "(rows < x_rows)" in after and "x_rows=x.shape[0]" in after and "x_ref.shape[0]" not in after


def test_moe_matmul_lifts_rows_and_columns_and_keeps_its_k_loop():
    """The real corpus's PhiMoE matmul (Triton): both program-id dims of the output lift (the
    second after the first), `a` and `b` get row and column blocks, the K loop stays (a Triton
    grid axis cannot carry a reduction), and every shape read keeps meaning the full size."""
    fixed = fix_source(MOE.read_text(), str(MOE), unsafe=True)
    assert len(fixed.applied) == 4 and not any(p.divided_only for _, p in fixed.history), fixed.applied
    assert {f.code for f in fixed.remaining} == {"PF102"}, [(f.code, f.refusal) for f in fixed.remaining]
    assert "pl.BlockSpec((blocksize_m, blocksize_n), lambda i, j: (i, j))" in fixed.source
    assert "a_ref.shape[0]" not in fixed.source and "o_ref.shape" not in fixed.source
    assert "a_rows=A.shape[0]" in fixed.source and "o_cols=n" in fixed.source


def test_partial_blocks_are_those_that_do_not_divide_their_array():
    infos = [{"kernel": "k", "blocks": [{"block": [32, 64], "array": [100, 64]}, {"block": [32, 64], "array": [128, 64]},
                                        {"block": [100, 64], "array": [100, 64]}]}]
    assert partial_blocks(infos) == ["block (32, 64) of a (100, 64) array in `k`"]
    assert partial_blocks([{"blocks": [{"block": [1, 64], "array": [7, 64]}]}]) == []


@pytest.mark.interp
def test_on_a_ragged_example_the_interpreters_disagree_so_it_is_not_compared():
    """What divided_only guards against: at 100 rows the interpreters clamp the original's last
    window (rows 68..99 named as 96..127), while the rewrite's last block is partial; compared, the
    two differ. With the flag the example is not compared and says why."""
    before, after = PAIR.read_text(), AFTER.read_text()
    ex = [parse_example(RAGGED)]
    compared = verify_sources(before, after, ex, path=str(PAIR), timeout_s=300)
    assert compared[0].status == "mismatch", compared[0].message
    skipped = verify_sources(before, after, ex, path=str(PAIR), timeout_s=300, divided_only=True)
    assert skipped[0].status == "unverified", skipped[0].message
    assert "not compared on" in skipped[0].message and "(32, 64) of a (100, 64) array" in skipped[0].message


@pytest.mark.interp
def test_on_a_dividing_example_the_ragged_variants_are_dropped_not_failed():
    before, after = PAIR.read_text(), AFTER.read_text()
    v = verify_sources(before, after, [parse_example("add_row_index(f32[128, 64])")], path=str(PAIR), timeout_s=300,
                       divided_only=True)[0]
    assert v.status == "verified", v.message
    assert "dropped" in v.message and "a partial block the interpreters cannot judge under this lift" in v.message


@pytest.mark.interp
def test_masked_windows_are_compared_on_a_ragged_example():
    """The interpreters pad a masked load or store past the end: at 100 rows original and rewrite agree."""
    after = fix_source(MASKED.read_text(), str(MASKED), unsafe=True).source
    v = verify_sources(MASKED.read_text(), after, [parse_example(RAGGED)], path=str(MASKED), timeout_s=300)[0]
    assert v.status == "verified", v.message


@pytest.mark.interp
def test_the_lifted_loop_is_compared_on_its_ragged_variants():
    after = LOOP.with_name("stepped_loop_reads_position_triton_after.py").read_text()
    v = verify_sources(LOOP.read_text(), after, [parse_example("add_row_index(f32[64, 32])")], path=str(LOOP), timeout_s=300)[0]
    assert v.status == "verified" and "also on the ragged shapes" in v.message, v.message


@pytest.mark.interp
def test_apply_writes_the_unmasked_lift_once_verified_where_its_block_divides(capsys, tmp_path):
    """`--apply` with no --unsafe-fixes: verified on the file's dividing example, its ragged
    variants (which would differ: see above) dropped, the golden rewrite written."""
    from pallas_fix.frontends.cli.app import main

    path = tmp_path / PAIR.name
    path.write_text(PAIR.read_text())
    try:
        main(["--apply", str(path)])
    except SystemExit:
        pass
    err = capsys.readouterr().err
    assert path.read_text() == AFTER.read_text(), err
    assert "verified add_row_index" in err, err


@pytest.mark.interp
def test_verify_subcommand_does_not_compare_a_ragged_example(capsys):
    from pallas_fix.frontends.cli.app import main

    try:
        main(["verify", str(PAIR), "--example", RAGGED])
    except SystemExit:
        pass
    out = capsys.readouterr().out
    assert "unverified" in out and "not compared on" in out, out


@pytest.mark.interp
def test_a_synthesised_example_picks_sizes_the_block_divides(capsys, tmp_path):
    """No example in the file: the synthesised one is a multiple of the block (288 rows of 48),
    verified there; its boundary variant (72 rows: a partial block) is left uncompared, not failed."""
    from pallas_fix.frontends.cli.app import main

    src = PAIR.read_text().replace("# pallas-fix: example add_row_index(f32[128, 64])\n", "").replace(
        "BLOCK_M = 32", "BLOCK_M = 48")
    path = tmp_path / PAIR.name
    path.write_text(src)
    try:
        main(["--apply", str(path)])
    except SystemExit:
        pass
    err = capsys.readouterr().err
    assert "verified add_row_index" in err and "f32[288, 288]" in err, err
    assert "BlockSpec((BLOCK_M, x.shape[1])" in path.read_text(), err


_TPU_LANES = '''
import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

# pallas-fix: example add_col_index(f32[8, 512])

BLOCK_N = 128


def add_col_index_kernel(x_ref, o_ref):
    pid = pl.program_id(0)
    cols = pid * BLOCK_N + lax.broadcasted_iota(jnp.int32, (x_ref.shape[0], BLOCK_N), 1)
    window = pl.ds(pid * BLOCK_N, BLOCK_N)
    x = x_ref[:, window]
    o_ref[:, window] = jnp.where(cols < x_ref.shape[1], x + cols.astype(x.dtype), 0.0)


def add_col_index(x):
    _, n = x.shape
    return pl.pallas_call(
        add_col_index_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(pl.cdiv(n, BLOCK_N),),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
    )(x)
'''


def test_a_tpu_window_along_the_lanes_keeps_no_partial_block_lift():
    """The chip was measured keeping a window past the end along rows; along the lane dim, where
    VMEM tiles lie side by side, it was not, so no unsafe partial-block lift is offered there (a
    check makes it exact where the example divides; a ragged example is refused, saying why)."""
    plans = [f.plan for f in _findings(TPU, _TPU_LANES) if f.code == "PF103"]
    assert plans and all(p is not None and p.guards and not p.divided_only for p in plans), plans
    ragged = _TPU_LANES.replace("add_col_index(f32[8, 512])", "add_col_index(f32[8, 500])")
    refusals = [f.refusal for f in _findings(TPU, ragged) if f.code == "PF103"]
    assert refusals and all(r and "along the lane dim" in r and "reads its position" in r for r in refusals), refusals
