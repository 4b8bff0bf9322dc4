"""Scalar integer indices driven by a loop index or pl.program_id: which become "scalar" uses
(analysis.accesses), their size-1 windows (analysis.loops.windows.scalar_window), the codes and
refusals they get, and their lift into squeezed (None) block dims (rewrite.kernel.scalar_lift): the
static detector and the jaxpr oracle agree on them before and after each lift (a lifted ref keeps
no dynamic index), and the backend decides whether a squeezed dim among a block's last two dims
is allowed (TPU and unknown backends refuse it, the GPU backends lift it). The golden pairs and
refusals themselves run in test_codemod_pairs.py."""

from __future__ import annotations

from pathlib import Path

import pytest

import pair_harness as H
from pallas_fix.analysis.loops.windows import window_of
from pallas_fix.core.config import Config
from pallas_fix.engine import analyze_source, fix_source

_HEAD = """\
import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

"""


def _uses(body: str, call: str):
    source = _HEAD + body + "\n\ndef run(x, t):\n    return " + call + "\n"
    return analyze_source(source)


def _kinds(result) -> list[tuple[str, int, str]]:
    return sorted((u.ref_name, u.dim, u.kind) for u in result.uses)


def test_program_id_row_is_a_scalar_use_with_its_block_index() -> None:
    result = _uses(
        "def kernel(x_ref, o_ref):\n    row = pl.program_id(0)\n    o_ref[row, :] = x_ref[2 * row + 1, :]\n",
        "pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(8,))(x)",
    )
    assert _kinds(result) == [("o_ref", 0, "scalar"), ("x_ref", 0, "scalar")]
    blocks = {u.ref_name: window_of(u).block for u in result.uses}
    assert (blocks["x_ref"].atoms, blocks["x_ref"].offset) == ({"pid:0": 2}, 1)
    assert (blocks["o_ref"].atoms, blocks["o_ref"].offset) == ({"pid:0": 1}, 0)
    assert {f.code for f in result.findings} == {"PF103"}
    # Refused, so the message does not promise the squeezed dim (issue 25); the refusal says why not.
    assert all("squeezed (None) block dim" not in f.message and not f.fixable for f in result.findings)
    # The backend is unknown, so TPU's rules hold: no squeezed second-to-last dim (rewrite.kernel.scalar_lift).
    assert all("TPU lowering rejects a squeezed (None) block dim" in f.refusal for f in result.findings)


def test_non_affine_scalar_has_no_block() -> None:
    result = _uses(
        "def kernel(x_ref, o_ref):\n    @pl.loop(0, 8)\n    def _(r):\n        o_ref[(r * r) % 8, :] = x_ref[r, :]\n",
        "pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)",
    )
    windows = {u.ref_name: window_of(u) for u in result.uses}
    assert windows["x_ref"].block is not None and windows["o_ref"].block is None
    assert "not an affine function" in windows["o_ref"].reason
    assert {f.code for f in result.findings} == {"PF101"}


def test_reduction_scalar_is_pf102() -> None:
    result = _uses(
        "def kernel(x_ref, o_ref):\n    o_ref[...] = lax.fori_loop(0, 4, lambda k, acc: acc + x_ref[k, :], jnp.zeros(o_ref.shape))\n",
        "pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape[1:], x.dtype))(x)",
    )
    assert [f.code for f in result.findings] == ["PF102"]


def test_tables_scratch_and_prefetch_scalars_are_no_findings() -> None:
    result = _uses(
        "def kernel(t_ref, x_ref, o_ref, buf):\n"
        "    i = pl.program_id(0)\n"
        "    buf[i % 2] = x_ref[t_ref[i], :]\n"
        "    o_ref[...] = buf[i % 2]\n",
        "pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape[1:], x.dtype), grid_spec=pltpu.PrefetchScalarGridSpec("
        "num_scalar_prefetch=1, grid=(4,), in_specs=[pl.BlockSpec(x.shape, lambda i, t: (0, 0))],"
        " out_specs=pl.BlockSpec(x.shape[1:], lambda i, t: (0,)), scratch_shapes=[pltpu.VMEM((2, 128), jnp.float32)]))(t, x)",
    )
    # The prefetch entry `t_ref[i]` and the scratch slot `buf[i % 2]` are no uses; the row of the
    # whole `x_ref` that the entry picks is a data-dependent gather (PF105, with no fix).
    assert _kinds(result) == [("x_ref", 0, "scalar")]
    assert [(f.code, f.fixable) for f in result.findings] == [("PF105", False)]
    smem = _uses(
        "def kernel(t_ref, x_ref, o_ref):\n    o_ref[...] = x_ref[...] * t_ref[pl.program_id(0)]\n",
        "pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(4,),"
        " in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM), pl.BlockSpec(x.shape, lambda i: (0, 0))],"
        " out_specs=pl.BlockSpec(x.shape, lambda i: (0, 0)))(t, x)",
    )
    assert _kinds(smem) == []


def test_table_entry_reads_are_no_uses_but_writes_are() -> None:
    result = _uses(
        "def kernel(x_ref, o_ref):\n    @pl.loop(0, 8)\n    def _(b):\n        o_ref[b] = x_ref[b] * 2.0\n",
        "pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)",
    )
    assert _kinds(result) == [("o_ref", 0, "scalar")]


def test_a_store_through_a_view_is_a_write() -> None:
    """`pltriton.store(o_ref.at[b], v)` writes `o_ref[b]` as `o_ref[b] = v` does (a scalar use);
    `pltriton.load(x_ref.at[b])` reads one entry, as `x_ref[b]` does (none)."""
    head = "from jax.experimental.pallas import triton as pltriton\n"
    result = _uses(
        head + "def kernel(x_ref, o_ref):\n    @pl.loop(0, 8)\n    def _(b):\n"
        "        pltriton.store(o_ref.at[b], pltriton.load(x_ref.at[b]) * 2.0)\n",
        "pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)",
    )
    assert _kinds(result) == [("o_ref", 0, "scalar")]


def test_a_row_picked_by_data_is_a_refused_finding() -> None:
    """`o_ref[page, :] = ...` with `page` a table entry: a scatter of whole rows, PF105 with no fix;
    the entry read itself (`t_ref[b]`) is none, and a row mixing the loop index with data is left
    to the loop (neither origin names it)."""
    result = _uses(
        "def kernel(t_ref, x_ref, o_ref):\n"
        "    @pl.loop(0, 4)\n"
        "    def _(b):\n"
        "        page = t_ref[b]\n"
        "        o_ref[page, :] = x_ref[b + page, :]\n",
        "pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(t, x)",
    )
    assert _kinds(result) == [("o_ref", 0, "scalar")]
    (found,) = result.findings
    assert (found.code, found.fixable) == ("PF105", False)
    assert found.message == "`o_ref` is indexed by the data-dependent scalar `page` (a value loaded from `t_ref[b]`)"
    assert "not a `pl.ds` window" in found.refusal


def test_a_0d_block_read_whole_is_a_scalar() -> None:
    """`pos_ref[...]` of a `pl.BlockSpec((None,), ...)` block is the one scalar it holds, so the
    row it picks is a scalar index (the oracle's "scalar"), not an integer array."""
    result = _uses(
        "def kernel(p_ref, x_ref, o_ref):\n    o_ref[p_ref[...], :] = x_ref[...]\n",
        "pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8, 128), x.dtype), grid=(4,),"
        " in_specs=[pl.BlockSpec((None,), lambda i: (i,)), pl.BlockSpec((None, 128), lambda i: (i, 0))],"
        " out_specs=pl.BlockSpec((8, 128), lambda i: (0, 0)))(t, x)",
    )
    assert _kinds(result) == [("o_ref", 0, "scalar")]
    assert [f.code for f in result.findings] == ["PF105"]


def test_scalar_beside_a_window_is_left_to_the_window() -> None:
    result = _uses(
        "def kernel(x_ref, o_ref):\n    i = pl.program_id(0)\n    o_ref[i, pl.ds(i * 128, 128)] = x_ref[i, pl.ds(i * 128, 128)]\n",
        "pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(4,))(x)",
    )
    assert _kinds(result) == [("o_ref", 1, "ds"), ("x_ref", 1, "ds")]


def test_program_id_row_beside_a_loop_window_is_a_use_of_its_own() -> None:
    """`x_ref[b, pl.ds(j * 128, 128)]` in a loop: the row is a grid axis's block index whatever
    the loop's planner decides (a Triton reduction keeps the loop), so it gets its own use."""
    result = _uses(
        "def kernel(x_ref, o_ref):\n    b = pl.program_id(0)\n\n"
        "    @pl.loop(0, 4)\n    def _(j):\n        o_ref[b, pl.ds(j * 128, 128)] = x_ref[b, pl.ds(j * 128, 128)]\n",
        "pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(4,))(x)",
    )
    assert _kinds(result) == [("o_ref", 0, "scalar"), ("o_ref", 1, "ds"), ("x_ref", 0, "scalar"), ("x_ref", 1, "ds")]


@pytest.mark.parametrize(
    "start",
    ["b * 128", "t_ref[b]"],  # a window the program id drives; one data picks (R6 gathers the row with it)
)
def test_a_row_beside_a_window_a_program_id_or_data_drives_stays_with_it(start) -> None:
    result = _uses(
        "def kernel(t_ref, x_ref, o_ref):\n    b = pl.program_id(0)\n"
        f"    o_ref[b, pl.ds({start}, 128)] = x_ref[b, pl.ds({start}, 128)]\n",
        "pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(4,))(t, x)",
    )
    assert ("x_ref", 0, "scalar") not in _kinds(result)
    assert ("x_ref", 1, "ds") in _kinds(result)


FIXTURES = Path(__file__).parent / "fixtures" / "codemods"
SCALAR_PAIRS = [
    "lift_loop/scalar_batch_slabs",
    "lift_loop/scalar_heads_tpu",
    "lift_loop/scalar_reversed_write_tpu",
    "lift_loop/scalar_row_and_window_mgpu",
    "lift_loop/scalar_rows_softmax_mgpu",
    "lift_reduction/scalar_slab_sum",
    "program_id_blocks/pid_triton_row_rms",
    "program_id_blocks/pid_tpu_heads",
    "program_id_blocks/pid_tpu_kept_channel",
    "program_id_blocks/pid_kept_channel_unknown_backend",
    "program_id_blocks/pid_row_sums_1d_mgpu",
]


def _static_scalar_lines(path: Path) -> set[int]:
    result = analyze_source(path.read_text(encoding="utf-8"), str(path))
    return {u.span.line for u in result.uses if u.kind == "scalar"}


def _oracle_scalar_lines(path: Path) -> set[int]:
    (report,) = H.trace_reports(path)
    return {a.line for a in report.scalars() if a.line is not None}


@pytest.mark.interp
@pytest.mark.parametrize("name", SCALAR_PAIRS)
def test_detector_and_oracle_agree_on_scalar_indices(name):
    before = FIXTURES / f"{name}_before.py"
    after = FIXTURES / f"{name}_after.py"
    assert _static_scalar_lines(before), "the before-file has a scalar index the detector reports"
    assert _static_scalar_lines(before) == _oracle_scalar_lines(before)
    # What the lift squeezed is gone from both; what it kept (a ref left whole) is in both.
    assert _static_scalar_lines(after) == _oracle_scalar_lines(after)
    count = lambda path: len(H.trace_reports(path)[0].scalars())
    assert count(after) < count(before)


_ROWS_KERNEL = '''
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
{imports}

# pallas-fix: example double_rows(f32[{shape}])


def double_kernel(x_ref, o_ref):
    @pl.loop(0, x_ref.shape[0])
    def _(r):
        o_ref[r{rest}] = x_ref[r{rest}] * 2.0


def double_rows(x):
    return pl.pallas_call(
        double_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),{params}
    )(x)
'''

_BACKENDS = {
    "tpu": ("from jax.experimental.pallas import tpu as pltpu", "\n        compiler_params=pltpu.CompilerParams(),"),
    "mosaic_gpu": ("from jax.experimental.pallas import mosaic_gpu as plgpu", "\n        compiler_params=plgpu.CompilerParams(),"),
    "triton": ("from jax.experimental.pallas import triton as pltriton", "\n        compiler_params=pltriton.CompilerParams(),"),
    "unknown": ("", ""),
}


def _rows_source(backend: str, rank: int) -> str:
    imports, params = _BACKENDS[backend]
    shape = "16, 128" if rank == 2 else "4, 16, 128"
    return _ROWS_KERNEL.format(imports=imports, params=params, shape=shape, rest=", :" * (rank - 1))


@pytest.mark.parametrize(
    "backend, rank, lifted",
    [
        ("tpu", 2, False),  # the second-to-last dim: TPU lowering rejects it
        ("unknown", 2, False),  # held to TPU's rules
        ("mosaic_gpu", 2, True),
        ("triton", 2, True),
        ("tpu", 3, True),  # a leading dim of a 3-D array
        ("unknown", 3, True),
    ],
)
def test_backend_decides_where_a_dim_may_squeeze(backend, rank, lifted):
    source = _rows_source(backend, rank)
    # --target compiled: a Mosaic GPU loop kernel is otherwise presumed to run in GPU interpret
    # mode, where no lift is written; the squeeze rules are about compiled kernels.
    result = fix_source(source, "rows.py", Config(target="compiled"), codemods={"lift-loop"})
    if lifted:
        assert "None, x.shape[1]" in result.source, result.source
        assert "o_ref[...] = x_ref[...] * 2.0" in result.source
    else:
        assert result.source == source
        reasons = " ".join(f.refusal or "" for f in result.remaining)
        assert "TPU lowering rejects a squeezed (None) block dim among a block's last two dims" in reasons


_CHANNELS_KERNEL = '''
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
{imports}

# pallas-fix: example scale_channels(f32[2, 8, 128])


def scale_kernel(x_ref, o_ref):
    b = pl.program_id({b_axis})
    c = pl.program_id({c_axis})
    o_ref[b, c, :] = x_ref[b, c, :] * 2.0


def scale_channels(x):
    batch, channels, _ = x.shape
    return pl.pallas_call(
        scale_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid={grid},{params}
    )(x)
'''


@pytest.mark.parametrize(
    "backend, inner, expect",
    [
        ("tpu", "c", "kept"),  # the channel dim stays whole, `c` stays in the kernel
        ("unknown", "c", "kept"),  # held to TPU's rules
        ("triton", "c", "squeezed"),  # GPU backends squeeze any dim
        ("tpu", "b", "refused"),  # kept whole, the block would be copied again on every batch step
        ("unknown", "b", "refused"),  # held to TPU's rules, as every unknown backend
    ],
)
def test_a_scalar_beside_the_lifted_dim_stays_in_a_whole_dim(backend, inner, expect):
    """`x_ref[b, c, :]` with b and c grid indices: dim 1 cannot squeeze on TPU, so the block keeps
    it whole and the kernel keeps `c` (a partial lift), where the block stays put while c runs."""
    imports, params = _BACKENDS[backend]
    b_axis, c_axis, grid = (0, 1, "(batch, channels)") if inner == "c" else (1, 0, "(channels, batch)")
    source = _CHANNELS_KERNEL.format(imports=imports, params=params, b_axis=b_axis, c_axis=c_axis, grid=grid)
    result = fix_source(source, "channels.py", Config(target="compiled"), codemods={"program-id-blocks"})
    kept = "pl.BlockSpec((None, x.shape[1], x.shape[2]), lambda i, j: (i, 0, 0))"
    if expect == "kept":
        assert kept in result.source and "o_ref[c, :] = x_ref[c, :] * 2.0" in result.source, result.source
    elif expect == "squeezed":
        assert "(None, None, x.shape[2])" in result.source and "o_ref[...] = x_ref[...] * 2.0" in result.source, result.source
    else:
        assert result.source == source
        reasons = " ".join(f.refusal or "" for f in result.remaining)
        assert "dim 1 would become a squeezed (None) block dim" in reasons, reasons


@pytest.mark.parametrize("backend", ["tpu", "unknown"])
def test_the_kept_dim_is_named_after_the_partial_lift(backend):
    """What stays after the partial lift (`x_ref[c, :]` of a `(None, C, L)` block) is reported as
    the kept dim, with the forms that would move one row per step on TPU; a ref whose spec moves
    blocks along that dim is not told it spans it."""
    imports, params = _BACKENDS[backend]
    source = _CHANNELS_KERNEL.format(imports=imports, params=params, b_axis=0, c_axis=1, grid="(batch, channels)")
    lifted = fix_source(source, "channels.py", Config(target="compiled"), codemods={"program-id-blocks"}).source
    result = analyze_source(lifted)
    refusals = [f.refusal or "" for f in result.findings]
    assert len(refusals) == 2, refusals
    for refusal in refusals:
        assert "keeps the dim `c` indexes whole in its block, and the kernel keeps `c`" in refusal, refusal
        assert "TPU lowering rejects a squeezed (None) block dim among a block's last two dims (dim 1" in refusal
        assert "block `(None, 1, cols)`" in refusal and "pl.ds(c * bs, bs)" in refusal
    moved = lifted.replace("(None, x.shape[1], x.shape[2]), lambda i, j: (i, 0, 0)",
                           "(None, 8, x.shape[2]), lambda i, j: (i, j // 8, 0)")
    assert moved != lifted
    moved_refusals = {f.refusal.split("`")[1]: f.refusal for f in analyze_source(moved).findings if f.refusal}
    assert "keeps the dim" not in moved_refusals["x_ref"] and "keeps the dim" in moved_refusals["o_ref"], moved_refusals


_BLOCK_SUMS_KERNEL = '''
import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
{imports}

# pallas-fix: example block_sums(f32[64, 128])


def block_sums_kernel(x_ref, o_ref):
    def body(t, carry):
        o_ref[t, :] = jnp.sum(x_ref[pl.ds(t * 16, 16), :], axis=0)
        return carry

    lax.fori_loop(0, x_ref.shape[0] // 16, body, None)


def block_sums(x):
    return pl.pallas_call(
        block_sums_kernel,
        out_shape=jax.ShapeDtypeStruct((x.shape[0] // 16, x.shape[1]), x.dtype),{params}
    )(x)
'''


@pytest.mark.parametrize("backend, expect", [("tpu", "kept"), ("triton", "squeezed"), ("unknown", "refused")])
def test_a_row_written_per_iteration_keeps_the_output_whole_on_tpu(backend, expect):
    """R1 with `o_ref[t, :]` written beside a lifted window: on TPU the row cannot squeeze, so the
    output stays whole and resident on a sequential axis (no "parallel" declared) while each step
    writes its row; a GPU backend squeezes the row; an unknown backend may be Triton, whose grid
    has no sequential axis: refused with why the row cannot squeeze."""
    imports, params = _BACKENDS[backend]
    source = _BLOCK_SUMS_KERNEL.format(imports=imports, params=params)
    result = fix_source(source, "sums.py", Config(target="compiled"), codemods={"lift-loop"})
    if expect == "kept":
        flat = "".join(result.source.split())
        assert "out_specs=pl.BlockSpec((x.shape[0]//16,x.shape[1]),lambdat:(0,0),)" in flat, result.source
        assert "o_ref[t, :] = jnp.sum(x_ref[...], axis=0)" in result.source and "parallel" not in result.source
        assert any("`o_ref` kept whole, each step writing its row" in a for a in result.applied)
    elif expect == "squeezed":
        assert "pl.BlockSpec((None,x.shape[1]),lambdat:(t,0)" in "".join(result.source.split()), result.source
    else:
        assert result.source == source
        reasons = " ".join(f.refusal or "" for f in result.remaining)
        assert "`o_ref` is indexed by the scalar `t` at dim 0, which cannot become a squeezed (None) block dim" in reasons


@pytest.mark.interp
def test_a_verified_scalar_lift_is_not_reported_as_leaving_the_kernel_untouched() -> None:
    # The oracle counts a scalar index apart from dynamic slices; a lift that removes only
    # scalars must not read as "the rewrite left this entry's dynamic slices as they were".
    (pair,) = [p for p in H.codemod_pairs() if p.name == "scalar_rows_softmax_mgpu"]
    (verdict,) = H.verify_codemod_pair(pair)
    before, after = verdict.details["dynamic_scalars"]
    assert verdict.ok and before > after == 0
    assert verdict.dynamic_slices_before == verdict.dynamic_slices_after
    assert not verdict.untouched and "as they were" not in verdict.message
