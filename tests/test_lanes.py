"""R2's lane-dense softmax statistics (pallas_fix/rewrite/reduction/lanes.py).

The golden pairs in tests/fixtures/codemods/lift_reduction/ (flash_attention*, online_softmax_*,
paged attention under scalar_prefetch/) run original and rewrite through the interpreters and
the jaxpr oracle; this module checks the helper the rewrite adds, exactly, at every width, and
which carries stay `(rows, 1)`."""

from __future__ import annotations

import re
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

from pallas_fix.core.config import Config
from pallas_fix.core.model import Backend
from pallas_fix.engine import fix_source
from pallas_fix.rewrite.reduction.lanes import LANES, LaneLayout

FIXTURES = Path(__file__).parent / "fixtures" / "codemods" / "lift_reduction"
FLASH = (FIXTURES / "flash_attention_before.py").read_text()


def _helper():
    namespace = {"jnp": jnp}
    exec(compile(_helper_source(), "<helper>", "exec"), namespace)
    return namespace["_lanes_like"]


def _helper_source() -> str:
    import libcst as cst

    return cst.Module([LaneLayout(frozenset(), "_lanes_like", "jnp").helper_def()]).code


@pytest.mark.parametrize("n", [1, 5, 32, 127, 128, 130, 256, 384])
@pytest.mark.parametrize("lead", [(), (3,)])
def test_helper_is_the_broadcast_of_the_value_it_stands_for(n, lead):
    """`_lanes_like(x, like)` equals broadcasting the (rows, 1) value to like's last dim, for
    widths under, at, over and between multiples of the lane count, and for a scalar `like`."""
    lanes_like = _helper()
    rng = np.random.default_rng(n)
    value = rng.standard_normal((*lead, 8, 1)).astype(np.float32)
    x = jnp.broadcast_to(value, (*lead, 8, LANES))
    like = jnp.zeros((8, n), jnp.float32)
    got = lanes_like(x, like)
    assert got.shape == (*lead, 8, n)
    np.testing.assert_array_equal(np.asarray(got), np.broadcast_to(value, (*lead, 8, n)))
    np.testing.assert_array_equal(np.asarray(lanes_like(x, 2.0)), value)  # a scalar: the value itself


def _rewrite(source: str, **config) -> str:
    result = fix_source(source, "k.py", Config(**config) if config else None, unsafe=True)
    assert result.error is None and result.changed, [f.refusal for f in result.remaining]
    return result.source


def test_flash_statistics_are_lane_dense_on_tpu():
    out = _rewrite(FLASH)
    assert "pltpu.VMEM((block_q, 128), jnp.float32)" in out
    assert "m_ref[...] = jnp.full((block_q, 128), -jnp.inf, jnp.float32)" in out
    assert "p = jnp.exp(s - _lanes_like(m_next, s))" in out
    assert out.count("def _lanes_like(") == 1


def test_other_backends_keep_the_column_layout():
    out = _rewrite(FLASH, backend=Backend.MOSAIC_GPU)
    assert "_lanes_like" not in out and "(block_q, 1)" in out and "(block_q, 128)" not in out


@pytest.mark.parametrize("edit", [
    # a reduction of the statistic itself: its lanes would be summed
    ("l_next = alpha * l + jnp.sum(p, axis=1, keepdims=True)",
     "l_next = alpha * l + jnp.sum(p, axis=1, keepdims=True) + 0 * jnp.sum(m)"),
    # a dot of it
    ("o_next = alpha * o + jnp.dot(p, v, preferred_element_type=jnp.float32)",
     "o_next = alpha * o + jnp.dot(p, v, preferred_element_type=jnp.float32) + 0 * jnp.dot(m, m.T)[:, :1]"),
    # a subscript
    ("alpha = jnp.exp(m - m_next)", "alpha = jnp.exp(m - m_next[0])"),
    # a value of unknown shape met without a name to widen to
    ("p = jnp.exp(s - m_next)", "p = jnp.exp(s * 1.0 - m_next)"),
    # after the loop, an expression that binds a name of its own (nothing to narrow in place)
    ("o_ref[0] = (o / l).astype(o_ref.dtype)", "o_ref[0] = (o / (w := l)).astype(o_ref.dtype)"),
])
def test_uses_it_cannot_read_keep_the_column_layout(edit):
    before, after = edit
    assert before in FLASH
    out = _rewrite(FLASH.replace(before, after))
    assert "_lanes_like" not in out and re.search(r"VMEM\(\(block_q, 1\)", out)


def test_after_the_loop_a_statistic_stored_whole_is_narrowed():
    source = FLASH.replace("o_ref[0] = (o / l).astype(o_ref.dtype)", "o_ref[0] = (o / l).astype(o_ref.dtype) + 0 * m[0, 0]")
    out = _rewrite(source)
    assert "_lanes_like" in out and "m[..., :1][0, 0]" in out
