"""Scalar integer indices driven by a loop index or pl.program_id: which become "scalar" uses
(analysis.accesses), their size-1 windows (analysis.windows.scalar_window), and the codes and
refusals they get."""

from __future__ import annotations

from pallas_fix.analysis.windows import window_of
from pallas_fix.engine import analyze_source

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
    assert all("squeezed (None) block dim" in f.message and not f.fixable for f in result.findings)
    assert all("scalar indices are not lifted" in f.refusal for f in result.findings)


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
    assert _kinds(result) == []
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


def test_scalar_beside_a_window_is_left_to_the_window() -> None:
    result = _uses(
        "def kernel(x_ref, o_ref):\n    i = pl.program_id(0)\n    o_ref[i, pl.ds(i * 128, 128)] = x_ref[i, pl.ds(i * 128, 128)]\n",
        "pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(4,))(x)",
    )
    assert _kinds(result) == [("o_ref", 1, "ds"), ("x_ref", 1, "ds")]
