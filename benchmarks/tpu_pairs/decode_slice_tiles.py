"""One-query decode attention for TPU over a padded K/V cache, written as Pallas-Unbound's flash
decoding writes it: one program per (batch, head), the head's whole cache in one block, and a loop
over 128-row tiles cut with `pl.Slice(start, size)`, masking the padding by position. The lift
strip-mines: an "arbitrary" grid axis moving blocks of up to 8 tiles, walked inside the step."""
# pallas-fix: example decode(f32[2, 2, 1, 128], f32[2, 2, 1024, 128], f32[2, 2, 1024, 128], seq_len=1000)
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

BLOCK_KV = 128


def _decode_kernel(q_ref, k_ref, v_ref, o_ref, *, seq_len, block_kv):
    q = q_ref[0, 0]  # (1, head_dim)
    head_dim = q.shape[-1]

    def step(j, carry):
        acc, m_prev, l_prev = carry
        k = k_ref[0, 0, pl.Slice(j * block_kv, block_kv), :]
        v = v_ref[0, 0, pl.Slice(j * block_kv, block_kv), :]
        s = jnp.dot(q, k.T, preferred_element_type=jnp.float32)
        # Rows past seq_len are padding: they must not take any weight.
        positions = j * block_kv + jnp.arange(block_kv)
        s = jnp.where(positions[None, :] < seq_len, s, -1e30)
        m_new = jnp.maximum(m_prev, s.max(axis=-1, keepdims=True))
        p = jnp.exp(s - m_new)
        alpha = jnp.exp(m_prev - m_new)
        l_new = alpha * l_prev + p.sum(axis=-1, keepdims=True)
        acc = alpha * acc + jnp.dot(p, v, preferred_element_type=jnp.float32)
        return acc, m_new, l_new

    init = (
        jnp.zeros((1, head_dim), jnp.float32),
        jnp.full((1, 1), -jnp.inf, jnp.float32),
        jnp.zeros((1, 1), jnp.float32),
    )
    acc, _, l = jax.lax.fori_loop(0, k_ref.shape[2] // block_kv, step, init)
    o_ref[0, 0] = (acc / l).astype(o_ref.dtype)


@functools.partial(jax.jit, static_argnames=("seq_len",))
def decode(q, k, v, *, seq_len):
    batch, heads, _, head_dim = q.shape
    padded = k.shape[2]
    return pl.pallas_call(
        functools.partial(_decode_kernel, seq_len=seq_len, block_kv=BLOCK_KV),
        out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
        grid=(batch, heads),
        in_specs=[
            pl.BlockSpec((1, 1, 1, head_dim), lambda b, h: (b, h, 0, 0)),
            pl.BlockSpec((1, 1, padded, head_dim), lambda b, h: (b, h, 0, 0)),
            pl.BlockSpec((1, 1, padded, head_dim), lambda b, h: (b, h, 0, 0)),
        ],
        out_specs=pl.BlockSpec((1, 1, 1, head_dim), lambda b, h: (b, h, 0, 0)),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel")),
    )(q, k, v)


# --- benchmark hooks (benchmarks/bench_tpu.py) -------------------------------------------------
ENTRY = "decode"
CASES = [("prod", "float32"), ("prod", "bfloat16"), ("vmem", "float32"), ("vmem", "bfloat16"), ("long", "float32"), ("long", "bfloat16")]
_SHAPES = {  # (batch, heads, padded kv_len, seq_len, head_dim)
    "small": {"float32": (2, 2, 1024, 1000, 128), "bfloat16": (2, 2, 1024, 1000, 128)},
    "prod": {"float32": (8, 16, 2048, 2000, 128), "bfloat16": (8, 16, 1024, 1000, 128)},  # 16 and 8 tiles
    "long": {"float32": (8, 16, 4096, 4000, 128), "bfloat16": (8, 16, 8192, 8000, 128)},  # 32 and 64 tiles: 4 and 8 strips
    "vmem": {"float32": (2, 2, 65536, 65000, 128), "bfloat16": (2, 2, 131072, 131000, 128)},  # K and V 32 MiB each per head
}


def make_inputs(size, dtype, key):
    b, h, kv_len, seq_len, d = _SHAPES[size][jnp.dtype(dtype).name]
    kq, kk, kv = jax.random.split(key, 3)
    q = jax.random.normal(kq, (b, h, 1, d), dtype)
    k = jax.random.normal(kk, (b, h, kv_len, d), dtype)
    v = jax.random.normal(kv, (b, h, kv_len, d), dtype)
    return (q, k, v), {"seq_len": seq_len}


def xla(q, k, v, *, seq_len):
    s = jnp.einsum("bhqd,bhkd->bhqk", q, k, preferred_element_type=jnp.float32)
    s = jnp.where(jnp.arange(k.shape[2]) < seq_len, s, -1e30)
    p = jax.nn.softmax(s, axis=-1)
    return jnp.einsum("bhqk,bhkd->bhqd", p, v.astype(jnp.float32)).astype(q.dtype)
