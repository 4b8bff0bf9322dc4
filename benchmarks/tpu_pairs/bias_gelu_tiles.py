"""Bias + GELU on 2-D tiles: the grid walks (row tiles, column tiles) of operands given whole
(BlockSpecs of the whole array), and each program takes its tile by program id."""
# pallas-fix: example bias_gelu(f32[64, 256], f32[1, 256], tm=16, tn=128)
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def bias_gelu_kernel(x_ref, b_ref, o_ref, *, tm, tn):
    i = pl.program_id(0)
    j = pl.program_id(1)
    rows = pl.ds(pl.multiple_of(i * tm, tm), tm)
    cols = pl.ds(pl.multiple_of(j * tn, tn), tn)
    h = x_ref[rows, cols].astype(jnp.float32) + b_ref[:, cols].astype(jnp.float32)
    g = 0.5 * h * (1.0 + jnp.tanh(0.7978845608 * (h + 0.044715 * h * h * h)))
    o_ref[rows, cols] = g.astype(o_ref.dtype)


@functools.partial(jax.jit, static_argnames=("tm", "tn"))
def bias_gelu(x, b, *, tm=256, tn=512):
    m, n = x.shape
    assert m % tm == 0 and n % tn == 0
    return pl.pallas_call(
        functools.partial(bias_gelu_kernel, tm=tm, tn=tn),
        out_shape=jax.ShapeDtypeStruct((m, n), x.dtype),
        grid=(m // tm, n // tn),
        in_specs=[pl.BlockSpec(x.shape, lambda i, j: (0, 0)), pl.BlockSpec(b.shape, lambda i, j: (0, 0))],
        out_specs=pl.BlockSpec((m, n), lambda i, j: (0, 0)),
    )(x, b)


# --- benchmark hooks (benchmarks/bench_tpu.py) -------------------------------------------------
ENTRY = "bias_gelu"
CASES = [("prod", "float32"), ("prod", "bfloat16"), ("vmem", "float32")]
_SHAPES = {  # (m, n, tm, tn)
    "small": {"float32": (64, 256, 16, 128), "bfloat16": (64, 256, 16, 128)},
    "prod": {"float32": (1024, 1024, 256, 512), "bfloat16": (2048, 1024, 256, 512)},
    "vmem": {"float32": (4096, 4096, 256, 512)},  # 64 MiB each side
}


def make_inputs(size, dtype, key):
    m, n, tm, tn = _SHAPES[size][jnp.dtype(dtype).name]
    kx, kb = jax.random.split(key)
    return (jax.random.normal(kx, (m, n), dtype), jax.random.normal(kb, (1, n), dtype)), {"tm": tm, "tn": tn}


def xla(x, b, **_):
    return jax.nn.gelu(x.astype(jnp.float32) + b.astype(jnp.float32), approximate=True).astype(x.dtype)
