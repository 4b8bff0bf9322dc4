"""Varlen starts (issue 28): `x_ref[pl.ds(cu_seqlens_ref[s] + t * BT, BT)]`, a sequence start read
from a prefix-sum table plus whole chunks in grid indices, becomes a scalar-prefetch gather of
block `cu_seqlens_ref[s] // BT + t` (R6, rewrite.prefetch.windows). That block is right only when
every table entry is a multiple of BT, a fact about data: the fix is unsafe, its message states
the assumption, and plain --apply writes it only after verification on an example. On an example
whose sequences start mid-chunk verification fails and the file stays as it was. Through a chunk map (one program per
packed chunk: `cu_seqlens_ref[chunk_indices_ref[t, 0]] + chunk_indices_ref[t, 1] * BT`) the block
is the composed lookup `cu_seqlens_ref[chunk_indices_ref[t, 0]] // BT + chunk_indices_ref[t, 1]`,
both tables scalar-prefetch operands. The golden pairs (through both interpreters, with the jaxpr
check) are scalar_prefetch/varlen_chunk and varlen_chunk_map; the refusals are
scalar_prefetch/refuse_varlen_* and the parametrized ones here."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pallas_fix.core.config import Config
from pallas_fix.engine import analyze_source, fix_source
from pallas_fix.frontends.cli.app import main

FIXTURES = Path(__file__).parent / "fixtures"
ALIGNED = FIXTURES / "codemods" / "scalar_prefetch" / "varlen_chunk_before.py"
MID_CHUNK = FIXTURES / "verify" / "varlen_start_mid_chunk.py"
CHUNK_MAP = FIXTURES / "codemods" / "scalar_prefetch" / "varlen_chunk_map_before.py"
MAP_START = "bos + local_i_t * BT"
MAP_BLOCK = "cu_seqlens_ref[chunk_indices_ref[t, 0]] // BT"


def _plans(source: str, path: str = "k.py"):
    return [f.plan for f in analyze_source(source, path, Config()).findings if f.code == "PF105"]


def test_the_varlen_gather_is_unsafe_and_states_its_assumption():
    plans = _plans(ALIGNED.read_text(), str(ALIGNED))
    assert plans and all(p is not None and p.safety.value == "unsafe" for p in plans), plans
    for p in plans:
        assert "assumes every `cu_seqlens_ref` entry is a multiple of `BT`" in p.description, p.description
        assert "mid-block would read the wrong rows" in p.description, p.description


def test_unsafe_fixes_are_needed_without_verification():
    src = ALIGNED.read_text()
    assert fix_source(src, str(ALIGNED), unsafe=False).source == src
    assert "cu_seqlens_ref[s] // BT + t, 0" in fix_source(src, str(ALIGNED), unsafe=True).source


@pytest.mark.parametrize(
    "start, block",
    [
        ("bos + (i_t + 1) * BT", "cu_seqlens_ref[s] // BT + t + 1"),
        ("bos + i_t * BT + BT", "cu_seqlens_ref[s] // BT + t + 1"),
        ("bos + 2 * i_t * BT", "cu_seqlens_ref[s] // BT + 2 * t"),
        ("bos", "cu_seqlens_ref[s] // BT"),
    ],
)
def test_the_index_map_reads_the_start_in_blocks_plus_the_grid_terms(start, block):
    src = ALIGNED.read_text().replace("bos + i_t * BT", start)
    out = fix_source(src, "k.py", unsafe=True).source
    assert f"({block}, 0)" in out, out


@pytest.mark.parametrize(
    "start, words",
    [
        ("bos + i_t * BT + 3", "plus an offset that is not whole windows"),  # misaligned even for aligned tables
        ("bos - i_t * BT", "plus an offset that is not whole windows"),  # chunks walked backwards
        ("2 * bos + i_t * BT", "windows of neighbouring entries overlap"),  # the entry scaled: not a row start
    ],
)
def test_other_row_starts_are_refused(start, words):
    src = ALIGNED.read_text().replace("bos + i_t * BT", start)
    assert fix_source(src, "k.py", unsafe=True).source == src
    refusals = [f.refusal for f in analyze_source(src, "k.py", Config()).findings if f.code == "PF105"]
    assert refusals and all(r and words in r for r in refusals), refusals


@pytest.mark.interp
def test_a_table_with_mid_chunk_starts_fails_verification_and_nothing_is_written(capsys, tmp_path):
    path = tmp_path / MID_CHUNK.name
    shutil.copy(MID_CHUNK, path)
    try:
        main(["--apply", str(path)])
    except SystemExit:
        pass
    err = capsys.readouterr().err
    assert "mismatch" in err and "its code is unchanged" in err, err
    assert "assumes every `cu_seqlens_ref` entry is a multiple of `BT`" in err, err
    # The verdict says the example's ranged table, not the rewrite, breaks the assumption.
    assert "draws its integers from a range" in err and "build it in the entry from whole chunks" in err, err
    assert path.read_text() == MID_CHUNK.read_text()


def test_the_chunk_map_gather_moves_both_tables_and_states_its_assumption():
    plans = _plans(CHUNK_MAP.read_text(), str(CHUNK_MAP))
    assert plans and all(p is not None and p.safety.value == "unsafe" for p in plans), plans
    for p in plans:
        assert "moved `chunk_indices` and `cu_seqlens` into scalar prefetch" in p.description, p.description
        assert "assumes every `cu_seqlens_ref` entry is a multiple of `BT`" in p.description, p.description
    src = CHUNK_MAP.read_text()
    assert fix_source(src, str(CHUNK_MAP), unsafe=False).source == src


@pytest.mark.parametrize(
    "start, block",
    [
        ("bos + (local_i_t + 1) * BT", f"{MAP_BLOCK} + chunk_indices_ref[t, 1] + 1"),
        ("bos + 2 * local_i_t * BT", f"{MAP_BLOCK} + 2 * chunk_indices_ref[t, 1]"),
        ("bos + local_i_t * BT + i_t * BT", f"{MAP_BLOCK} + t + chunk_indices_ref[t, 1]"),
        ("bos", MAP_BLOCK),
    ],
)
def test_the_chunk_map_index_map_composes_the_lookup(start, block):
    src = CHUNK_MAP.read_text().replace(f"pl.ds({MAP_START}, BT)", f"pl.ds({start}, BT)")
    out = fix_source(src, "k.py", unsafe=True).source
    assert f"({block}, 0)" in out, out


@pytest.mark.parametrize(
    "start, words",
    [
        ("bos + local_i_t * BT + 3", "plus an offset that is not whole windows"),
        ("bos - local_i_t * BT", "plus an offset that is not whole windows"),
        ("bos + local_i_t", "windows of neighbouring entries overlap"),  # rows, not chunks, from the map
        ("bos + local_i_t * i_t * BT", "is not a table entry times the window size"),  # not affine
        ("bos + eos + local_i_t * BT", "itself one table entry read at grid indices"),  # `cu[i_n + 1]`: not composed
    ],
)
def test_other_chunk_map_starts_are_refused(start, words):
    src = CHUNK_MAP.read_text().replace(f"pl.ds({MAP_START}, BT)", f"pl.ds({start}, BT)")
    assert fix_source(src, "k.py", unsafe=True).source == src
    refusals = [f.refusal for f in analyze_source(src, "k.py", Config()).findings if f.code == "PF105"]
    assert refusals and all(r and words in r for r in refusals), refusals


_LOOP_MAP = """
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

BT = 8


def kernel(x_ref, cu_seqlens_ref, chunk_indices_ref, o_ref):
    def body(k, acc):
        i_n, local_i_t = chunk_indices_ref[k, 0], chunk_indices_ref[k, 1]
        bos = cu_seqlens_ref[i_n]
        return acc + x_ref[pl.ds(bos + local_i_t * BT, BT), :]
    o_ref[...] = jax.lax.fori_loop(0, 4, body, jnp.zeros((BT, 128), jnp.float32))


def run(x, cu_seqlens, chunk_indices):
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((BT, x.shape[1]), x.dtype),
        grid=(1,),
        out_specs=pl.BlockSpec((BT, x.shape[1]), lambda t: (0, 0)),
        compiler_params=pltpu.CompilerParams(),
    )(x, cu_seqlens, chunk_indices)
"""


def test_a_chunk_map_read_in_a_loop_is_refused_saying_to_make_it_a_grid_axis():
    assert fix_source(_LOOP_MAP, "k.py", unsafe=True).source == _LOOP_MAP
    refusals = [f.refusal for f in analyze_source(_LOOP_MAP, "k.py", Config()).findings if f.code == "PF105"]
    assert refusals and all(r and "at the index of a loop in the kernel" in r and "make that loop a grid axis" in r
                            for r in refusals), refusals


def test_a_ragged_tail_is_stated_unless_the_rows_are_a_multiple_of_the_chunk():
    src = CHUNK_MAP.read_text()
    (plan,) = {p.description: p for p in _plans(src)}.values()
    assert "every window ends inside the `x.shape[0]` rows of `x_ref`" in plan.description, plan.description
    assert "pad the rows to a multiple of `BT`" in plan.description, plan.description
    padded = src.replace("    nt = 2 * chunks.shape[0]\n", "    assert x.shape[0] % BT == 0\n    nt = 2 * chunks.shape[0]\n")
    assert padded != src
    (plan,) = {p.description: p for p in _plans(padded)}.values()
    assert "assumes every `cu_seqlens_ref` entry is a multiple of `BT`" in plan.description, plan.description
    assert "every window ends inside" not in plan.description, plan.description


def test_a_start_bound_per_static_variant_is_refused_naming_the_arms():
    src = CHUNK_MAP.read_text().replace(
        "def chunk_cumsum_kernel(x_ref, cu_seqlens_ref, chunk_indices_ref, o_ref):\n",
        "def chunk_cumsum_kernel(x_ref, cu_seqlens_ref, chunk_indices_ref, o_ref, *, IS_VARLEN):\n",
    ).replace("import jax\n", "import functools\n\nimport jax\n", 1).replace(
        "def chunk_cumsum(x, chunks):", "def chunk_cumsum(x, chunks, varlen=True):",
    ).replace("        chunk_cumsum_kernel,\n", "        functools.partial(chunk_cumsum_kernel, IS_VARLEN=varlen),\n").replace(
        "    valid = (",
        "    if IS_VARLEN:\n        start_t = bos + local_i_t * BT\n    else:\n        start_t = i_t * BT\n    valid = (",
    ).replace(f"pl.ds({MAP_START}, BT)", "pl.ds(start_t, BT)")
    assert "if IS_VARLEN:" in src and "pl.ds(start_t, BT)" in src and "IS_VARLEN=varlen" in src
    assert fix_source(src, "k.py", unsafe=True).source == src
    refusals = [f.refusal for f in analyze_source(src, "k.py", Config()).findings if f.code == "PF105"]
    assert refusals and all(
        r and "is `bos + local_i_t * BT` and `i_t * BT`, one per arm of `if IS_VARLEN:`" in r
        and "give each variant its own kernel and pallas_call" in r for r in refusals), refusals


HEADS = FIXTURES / "codemods" / "scalar_prefetch" / "varlen_chunk_map_heads_before.py"


@pytest.mark.parametrize(
    "old, new, words",
    [
        # More heads in the grid than rows in the array, as far as the call shows.
        ("grid=(nt, x.shape[0])", "grid=(nt, 4)", "cannot prove the `4` steps over `x_ref` stay inside its dim 0"),
        # The block's rank changes with the squeezed head dim: a shape read would change meaning.
        ("jnp.arange(BT) < eos", "jnp.arange(x_ref.shape[1]) < eos", "the kernel reads the shape of `x_ref`"),
        # A row among the last two dims: TPU blocks cannot squeeze it.
        ("x_ref[i_h, pl.ds(bos + local_i_t * BT, BT), :]", "x_ref[:, pl.ds(bos + local_i_t * BT, BT), i_h]",
         "or take one row of a leading dim at grid indices"),
        # Chunks along the lanes: Mosaic's tiling rule rejects an 8-wide last block dim.
        ("x_ref[i_h, pl.ds(bos + local_i_t * BT, BT), :]", "x_ref[i_h, :, pl.ds(bos + local_i_t * BT, BT)]",
         "its last dim would be `BT` = 8 on the example"),
    ],
)
def test_a_squeezed_head_dim_is_refused_where_the_block_cannot_take_it(old, new, words):
    src = HEADS.read_text().replace(old, new)
    assert src != HEADS.read_text()
    assert fix_source(src, "k.py", unsafe=True).source == src
    refusals = [f.refusal for f in analyze_source(src, "k.py", Config()).findings if f.code == "PF105"]
    assert refusals and all(r and words in r for r in refusals), refusals
