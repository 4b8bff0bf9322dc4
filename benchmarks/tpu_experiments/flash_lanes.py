"""Variant of pallas-fix's rewrite of ``tpu_pairs/flash_attention.py``: hypothesis "lanes".

The rewrite keeps the running max ``m`` and sum ``l`` in ``(block_q, 1)`` scratch, so each step
loads and stores them lane-masked and broadcasts them across lanes for ``s - m`` and ``alpha * o``.
JAX's ``ops/tpu/flash_attention.py`` keeps them lane-broadcast, ``(block_q, 128)`` with every lane
holding the row's value, and widens them with ``jnp.tile``. This is the rewrite with only that
changed: the same grid, specs, semantics and arithmetic order (its outputs agree with the
rewrite's to rounding: exp and the reductions run on other shapes).
"""
import functools
import math

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

LANES = 128


def _wide(x, n):
    """A lane-broadcast (rows, 128) value widened to (rows, n) columns."""
    return jnp.tile(x, (1, n // LANES)) if n >= LANES else x[:, :n]


def _attention_kernel(q_ref, k_ref, v_ref, o_ref, o_scratch_ref, m_ref, l_ref, *, sm_scale):
    _, block_q, head_dim = q_ref.shape
    block_k = k_ref.shape[1]
    q = q_ref[0]

    @pl.when(pl.program_id(2) == 0)
    def _init():
        o_scratch_ref[...] = jnp.zeros((block_q, head_dim), jnp.float32)
        m_ref[...] = jnp.full((block_q, LANES), -jnp.inf, jnp.float32)
        l_ref[...] = jnp.zeros((block_q, LANES), jnp.float32)

    o = o_scratch_ref[...]
    m = m_ref[...]
    l = l_ref[...]
    k = k_ref[0, :, :]
    v = v_ref[0, :, :]
    s = lax.dot_general(q, k, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32) * sm_scale
    m_next = jnp.maximum(m, jnp.max(s, axis=1, keepdims=True))
    alpha = jnp.exp(m - m_next)
    p = jnp.exp(s - _wide(m_next, block_k))
    l_next = alpha * l + jnp.sum(p, axis=1, keepdims=True)
    o_next = _wide(alpha, head_dim) * o + jnp.dot(p.astype(v.dtype), v, preferred_element_type=jnp.float32)
    o_scratch_ref[...] = o_next
    m_ref[...] = m_next
    l_ref[...] = l_next

    @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
    def _finalize():
        o_ref[0] = (o_scratch_ref[...] / _wide(l_ref[...], head_dim)).astype(o_ref.dtype)


@functools.partial(jax.jit, static_argnames=("block_q", "block_k"))
def attention(q, k, v, *, block_q=256, block_k=512):
    batch_heads, q_len, head_dim = q.shape
    kv_len = k.shape[1]
    assert q_len % block_q == 0 and kv_len % block_k == 0 and block_k % LANES == 0
    kernel = functools.partial(_attention_kernel, sm_scale=1.0 / math.sqrt(head_dim))
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
        grid=(batch_heads, q_len // block_q, kv_len // block_k),
        in_specs=[
            pl.BlockSpec((1, block_q, head_dim), lambda b, i, j: (b, i, 0)),
            pl.BlockSpec((1, block_k, head_dim), lambda b, i, j: (b, j, 0)),
            pl.BlockSpec((1, block_k, head_dim), lambda b, i, j: (b, j, 0)),
        ],
        out_specs=pl.BlockSpec((1, block_q, head_dim), lambda b, i, j: (b, i, 0)),
        scratch_shapes=[
            pltpu.VMEM((block_q, head_dim), jnp.float32),
            pltpu.VMEM((block_q, LANES), jnp.float32),
            pltpu.VMEM((block_q, LANES), jnp.float32),
        ],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary")),
    )(q, k, v)
