"""Verification judges a rewrite in each interpreter by what the original does there.

TPU interpret mode raises on an out-of-bounds read that the HLO interpreter clamps. A kernel whose
traced start runs past the end (the last of five 16-row tiles of 72 rows) fails there before and
after any rewrite: that interpreter cannot compare them, and the rewrite is judged by the others.
A rewrite that fails where the original ran, or fails differently, is still an error.
"""

from __future__ import annotations

import pytest

from pallas_fix.core.example_parser import parse_example
from pallas_fix.verify.runner import verify_sources

pytestmark = pytest.mark.interp

ORIGINAL = '''
import jax
from jax import lax
from jax.experimental import pallas as pl

TILE = 16


def silu_kernel(x_ref, o_ref):
    def tile(t, carry):
        rows = pl.ds(t * TILE, TILE)
        v = x_ref[rows, :]
        o_ref[rows, :] = v * jax.nn.sigmoid(v)
        return carry

    lax.fori_loop(0, 5, tile, None)


def silu_rows(x):
    return pl.pallas_call(silu_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
'''

# The same program unrolled by hand, its starts kept traced: clamped in the HLO interpreter.
SAME_READS = ORIGINAL.replace(
    "    def tile(t, carry):\n        rows = pl.ds(t * TILE, TILE)",
    "    for t in range(5):\n        rows = pl.ds(jax.numpy.asarray(t) * TILE, TILE)",
).replace("        return carry\n\n    lax.fori_loop(0, 5, tile, None)\n", "")

# First a write past the end (clamped in the HLO interpreter to rows 56-72, which the last tile
# overwrites): TPU interpret mode raises on that write, where the original raised on a read.
WRITES_PAST_THE_END = SAME_READS.replace(
    "    for t in range(5):",
    "    o_ref[pl.ds(jax.numpy.asarray(60), TILE), :] = x_ref[pl.ds(0, TILE), :]\n    for t in range(5):",
)

# 64 rows (every tile in bounds), and a rewrite with one extra read past the end, weighted by 0:
# the HLO interpreter clamps it (same outputs), TPU interpret mode raises where the original ran.
IN_BOUNDS = ORIGINAL.replace("0, 5, tile", "0, 4, tile")
TPU_ONLY_BREAK = IN_BOUNDS.replace(
    "    lax.fori_loop(0, 4, tile, None)",
    "    lax.fori_loop(0, 4, tile, None)\n"
    "    o_ref[pl.ds(0, TILE), :] += 0.0 * x_ref[pl.ds(jax.numpy.asarray(60), TILE), :]",
)

def _verdicts(original: str, rewrite: str, example: str):
    return verify_sources(original, rewrite, [parse_example(example)], path="silu.py", timeout_s=240)


def test_an_interpreter_where_the_original_fails_the_same_way_does_not_blame_the_rewrite():
    (v,) = _verdicts(ORIGINAL, SAME_READS, "silu_rows(f32[72, 128])")
    assert v.status == "verified", v.message
    assert "tpu-interpret could not compare: the original fails there the same way" in v.message
    assert "Out-of-bounds read" in v.message


def test_a_rewrite_that_fails_where_the_original_ran_is_an_error():
    (v,) = _verdicts(IN_BOUNDS, TPU_ONLY_BREAK, "silu_rows(f32[64, 128])")
    assert v.status == "error", v.message
    assert "tpu-interpret raised" in v.message and "the original fails there" not in v.message


def test_a_rewrite_that_fails_differently_from_the_original_is_an_error():
    (v,) = _verdicts(ORIGINAL, WRITES_PAST_THE_END, "silu_rows(f32[72, 128])")
    assert v.status == "error", v.message
    assert "the original fails there differently" in v.message
