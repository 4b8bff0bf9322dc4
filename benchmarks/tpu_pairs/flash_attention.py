"""Flash-attention forward for TPU: the grid walks (batch*heads, q blocks); K and V stay whole per
batch*head and the online softmax runs as an in-kernel loop over key blocks."""
# pallas-fix: example attention(f32[2, 256, 128], f32[2, 256, 128], f32[2, 256, 128], block_q=128, block_k=128)
import functools
import math

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _attention_kernel(q_ref, k_ref, v_ref, o_ref, *, sm_scale, block_k):
    _, block_q, head_dim = q_ref.shape
    q = q_ref[0]

    def kv_step(j, carry):
        o, m, l = carry
        kv = pl.multiple_of(j * block_k, block_k)
        k = k_ref[0, pl.ds(kv, block_k), :]
        v = v_ref[0, pl.ds(kv, block_k), :]
        s = lax.dot_general(q, k, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32) * sm_scale
        m_next = jnp.maximum(m, jnp.max(s, axis=1, keepdims=True))
        # Rescale what was accumulated under the old running max.
        alpha = jnp.exp(m - m_next)
        p = jnp.exp(s - m_next)
        l_next = alpha * l + jnp.sum(p, axis=1, keepdims=True)
        o_next = alpha * o + jnp.dot(p.astype(v.dtype), v, preferred_element_type=jnp.float32)
        return o_next, m_next, l_next

    o = jnp.zeros((block_q, head_dim), jnp.float32)
    m = jnp.full((block_q, 1), -jnp.inf, jnp.float32)
    l = jnp.zeros((block_q, 1), jnp.float32)
    o, m, l = lax.fori_loop(0, k_ref.shape[1] // block_k, kv_step, (o, m, l))
    o_ref[0] = (o / l).astype(o_ref.dtype)


@functools.partial(jax.jit, static_argnames=("block_q", "block_k"))
def attention(q, k, v, *, block_q=256, block_k=512):
    batch_heads, q_len, head_dim = q.shape
    kv_len = k.shape[1]
    assert q_len % block_q == 0 and kv_len % block_k == 0
    kernel = functools.partial(_attention_kernel, sm_scale=1.0 / math.sqrt(head_dim), block_k=block_k)
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
        grid=(batch_heads, q_len // block_q),
        in_specs=[
            pl.BlockSpec((1, block_q, head_dim), lambda b, i: (b, i, 0)),
            pl.BlockSpec((1, kv_len, head_dim), lambda b, i: (b, 0, 0)),
            pl.BlockSpec((1, kv_len, head_dim), lambda b, i: (b, 0, 0)),
        ],
        out_specs=pl.BlockSpec((1, block_q, head_dim), lambda b, i: (b, i, 0)),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel")),
    )(q, k, v)


# --- benchmark hooks (benchmarks/bench_tpu.py) -------------------------------------------------
ENTRY = "attention"
CAUSAL = False
CASES = [("prod", "float32"), ("prod", "bfloat16"), ("vmem", "float32"), ("long", "float32"), ("long", "bfloat16")]
_SHAPES = {  # (batch*heads, seq, head_dim, block_q, block_k)
    "small": {"float32": (2, 256, 128, 128, 128), "bfloat16": (2, 256, 128, 128, 128)},
    "prod": {"float32": (4, 2048, 128, 256, 512), "bfloat16": (8, 2048, 128, 256, 512)},
    "long": {"float32": (4, 8192, 128, 256, 512), "bfloat16": (8, 8192, 128, 256, 512)},  # 16 K/V windows: 2 strips
    "vmem": {"float32": (2, 16384, 128, 256, 512)},  # K and V 8 MiB each per batch*head, double-buffered
}


def make_inputs(size, dtype, key):
    bh, seq, d, bq, bk = _SHAPES[size][jnp.dtype(dtype).name]
    kq, kk, kv = jax.random.split(key, 3)
    q, k, v = (jax.random.normal(kx, (bh, seq, d), dtype) for kx in (kq, kk, kv))
    return (q, k, v), {"block_q": bq, "block_k": bk}


def xla(q, k, v, **_):
    s = jnp.einsum("bqd,bkd->bqk", q, k, preferred_element_type=jnp.float32) / math.sqrt(q.shape[-1])
    if CAUSAL:
        s = jnp.where(jnp.tril(jnp.ones(s.shape[-2:], bool)), s, -jnp.inf)
    p = jax.nn.softmax(s, axis=-1)
    return jnp.einsum("bqk,bkd->bqd", p.astype(v.dtype), v, preferred_element_type=jnp.float32).astype(q.dtype)


def hand(q, k, v, *, block_q, block_k):
    from jax.experimental.pallas.ops.tpu import flash_attention as fa

    sizes = fa.BlockSizes(block_q=block_q, block_k_major=block_k, block_k=block_k, block_b=1)
    out = fa.flash_attention(q[None], k[None], v[None], causal=CAUSAL, sm_scale=1.0 / math.sqrt(q.shape[-1]), block_sizes=sizes)
    return out[0]
