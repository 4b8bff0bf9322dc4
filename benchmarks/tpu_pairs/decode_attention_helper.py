"""Decode attention for TPU with its K/V loop in a helper: one program per batch*head, a few query
rows against the whole K/V of that head, and the online softmax over K/V tiles written in a
private helper the kernel calls once (as Pallas-Unbound's flash decoding does). The lift inlines
the helper and puts the K/V tiles on an "arbitrary" grid axis."""
# pallas-fix: example decode_attention(f32[2, 8, 128], f32[2, 1024, 128], f32[2, 1024, 128], block_kv=256)
import functools
import math

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _kv_loop(q, k_ref, v_ref, block_kv):
    """The online softmax of `q` over the head's K/V rows, `block_kv` rows a step."""
    rows, head_dim = q.shape

    def kv_step(j, carry):
        o, m, l = carry
        kv = pl.multiple_of(j * block_kv, block_kv)
        k = k_ref[0, pl.ds(kv, block_kv), :]
        v = v_ref[0, pl.ds(kv, block_kv), :]
        s = lax.dot_general(q, k, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
        m_next = jnp.maximum(m, jnp.max(s, axis=1, keepdims=True))
        alpha = jnp.exp(m - m_next)
        p = jnp.exp(s - m_next)
        l_next = alpha * l + jnp.sum(p, axis=1, keepdims=True)
        o_next = alpha * o + jnp.dot(p.astype(v.dtype), v, preferred_element_type=jnp.float32)
        return o_next, m_next, l_next

    o = jnp.zeros((rows, head_dim), jnp.float32)
    m = jnp.full((rows, 1), -jnp.inf, jnp.float32)
    l = jnp.zeros((rows, 1), jnp.float32)
    o, m, l = lax.fori_loop(0, k_ref.shape[1] // block_kv, kv_step, (o, m, l))
    return o / l


def _decode_kernel(q_ref, k_ref, v_ref, o_ref, *, sm_scale, block_kv):
    q = (q_ref[0].astype(jnp.float32) * sm_scale).astype(q_ref.dtype)
    out = _kv_loop(q, k_ref, v_ref, block_kv)
    o_ref[0] = out.astype(o_ref.dtype)


@functools.partial(jax.jit, static_argnames=("block_kv",))
def decode_attention(q, k, v, *, block_kv=512):
    batch_heads, rows, head_dim = q.shape
    kv_len = k.shape[1]
    assert kv_len % block_kv == 0
    kernel = functools.partial(_decode_kernel, sm_scale=1.0 / math.sqrt(head_dim), block_kv=block_kv)
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
        grid=(batch_heads,),
        in_specs=[
            pl.BlockSpec((1, rows, head_dim), lambda b: (b, 0, 0)),
            pl.BlockSpec((1, kv_len, head_dim), lambda b: (b, 0, 0)),
            pl.BlockSpec((1, kv_len, head_dim), lambda b: (b, 0, 0)),
        ],
        out_specs=pl.BlockSpec((1, rows, head_dim), lambda b: (b, 0, 0)),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
    )(q, k, v)


# --- benchmark hooks (benchmarks/bench_tpu.py) -------------------------------------------------
ENTRY = "decode_attention"
CASES = [("prod", "float32"), ("prod", "bfloat16"), ("vmem", "float32"), ("vmem", "bfloat16"), ("long", "float32"), ("long", "bfloat16")]
_SHAPES = {  # (batch*heads, query rows, kv_len, head_dim, block_kv)
    "small": {"float32": (2, 8, 1024, 128, 256), "bfloat16": (2, 16, 1024, 128, 256)},
    "prod": {"float32": (32, 8, 2048, 128, 512), "bfloat16": (32, 16, 4096, 128, 512)},
    "long": {"float32": (32, 8, 8192, 128, 512), "bfloat16": (32, 16, 16384, 128, 512)},  # 16 and 32 K/V windows: 2 and 4 strips
    "vmem": {"float32": (4, 8, 65536, 128, 512), "bfloat16": (4, 16, 131072, 128, 512)},  # K and V 32 MiB each per head
}


def make_inputs(size, dtype, key):
    bh, rows, kv_len, d, bkv = _SHAPES[size][jnp.dtype(dtype).name]
    kq, kk, kv = jax.random.split(key, 3)
    q = jax.random.normal(kq, (bh, rows, d), dtype)
    k = jax.random.normal(kk, (bh, kv_len, d), dtype)
    v = jax.random.normal(kv, (bh, kv_len, d), dtype)
    return (q, k, v), {"block_kv": bkv}


def xla(q, k, v, **_):
    s = jnp.einsum("bqd,bkd->bqk", q, k, preferred_element_type=jnp.float32) / math.sqrt(q.shape[-1])
    p = jax.nn.softmax(s, axis=-1)
    return jnp.einsum("bqk,bkd->bqd", p.astype(v.dtype), v, preferred_element_type=jnp.float32).astype(q.dtype)
