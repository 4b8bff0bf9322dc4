"""Variant of pallas-fix's rewrite of ``tpu_pairs/flash_attention.py``: hypothesis "body".

The rewrite's call (3-D grid, its specs and semantics) with the kernel body of JAX's
``ops/tpu/flash_attention.py`` (``_flash_attention_kernel_single_batch``, non-causal, no bias or
segment ids): m / l lane-broadcast ``(block_q, 128)``, the accumulator normalised every step
(``acc *= l_corr / l_next``; ``acc += p @ v / l_next``, with JAX's guard against ``l == 0``) and
stored as is at the last step. Together with ``flash_lanes.py`` and ``flash_call4.py`` this tells
whether the gap to JAX's kernel is in the body or in the call. Its rounding differs from the
rewrite's (the division moves), so it agrees with it to a tolerance, not exactly.
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
    return jnp.tile(x, (1, n // LANES)) if n >= LANES else x[:, :n]


def _attention_kernel(q_ref, k_ref, v_ref, o_ref, acc_ref, m_ref, l_ref, *, sm_scale):
    _, block_q, head_dim = q_ref.shape
    block_k = k_ref.shape[1]

    @pl.when(pl.program_id(2) == 0)
    def _init():
        m_ref[...] = jnp.full((block_q, LANES), -jnp.inf, jnp.float32)
        l_ref[...] = jnp.zeros((block_q, LANES), jnp.float32)
        acc_ref[...] = jnp.zeros((block_q, head_dim), jnp.float32)

    m_prev = m_ref[...]
    l_prev = l_ref[...]
    q = q_ref[0]
    k = k_ref[0, :, :]
    s = lax.dot_general(q, k, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
    s *= sm_scale
    m_curr = jnp.max(s, axis=1)[:, None]
    m_next = jnp.maximum(m_prev, m_curr)
    p = jnp.exp(s - _wide(m_next, block_k))
    alpha = jnp.exp(m_prev - m_next)
    l_corr = alpha * l_prev
    l_next = jnp.sum(p, axis=1)[:, None] + l_corr
    l_ref[...] = l_next
    m_ref[...] = m_next
    l_next_inv_safe = jnp.where(l_next == 0.0, 1.0, 1.0 / l_next)
    acc_ref[...] *= _wide(l_corr * l_next_inv_safe, head_dim)
    v = v_ref[0, :, :]
    o_curr = jnp.dot(p.astype(v.dtype), v, preferred_element_type=jnp.float32)
    acc_ref[...] += o_curr * _wide(l_next_inv_safe, head_dim)

    @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
    def _store():
        o_ref[0] = acc_ref[...].astype(o_ref.dtype)


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
