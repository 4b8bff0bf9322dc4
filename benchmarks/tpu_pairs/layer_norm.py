"""LayerNorm over row blocks on a grid without BlockSpecs: every operand is whole in VMEM and
program i normalises rows [i * block_rows, (i + 1) * block_rows)."""
# pallas-fix: example layer_norm(f32[64, 256], f32[1, 256], f32[1, 256], block_rows=16)
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def layer_norm_kernel(x_ref, w_ref, b_ref, o_ref, *, block_rows, eps):
    i = pl.program_id(0)
    rows = pl.ds(pl.multiple_of(i * block_rows, block_rows), block_rows)
    x = x_ref[rows, :].astype(jnp.float32)
    mean = jnp.mean(x, axis=-1, keepdims=True)
    centred = x - mean
    var = jnp.mean(centred * centred, axis=-1, keepdims=True)
    y = centred * jax.lax.rsqrt(var + eps) * w_ref[...].astype(jnp.float32) + b_ref[...].astype(jnp.float32)
    o_ref[rows, :] = y.astype(o_ref.dtype)


@functools.partial(jax.jit, static_argnames=("block_rows",))
def layer_norm(x, w, b, *, block_rows=256):
    assert x.shape[0] % block_rows == 0
    return pl.pallas_call(
        functools.partial(layer_norm_kernel, block_rows=block_rows, eps=1e-5),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(x.shape[0] // block_rows,),
    )(x, w, b)


# --- benchmark hooks (benchmarks/bench_tpu.py) -------------------------------------------------
ENTRY = "layer_norm"
CASES = [("prod", "float32"), ("prod", "bfloat16"), ("vmem", "float32")]
_SHAPES = {  # (rows, hidden, block_rows)
    "small": {"float32": (64, 256, 16), "bfloat16": (64, 256, 16)},
    "prod": {"float32": (1024, 1024, 256), "bfloat16": (2048, 1024, 256)},
    "vmem": {"float32": (8192, 1024, 256)},  # 32 MiB each side
}


def make_inputs(size, dtype, key):
    rows, hidden, block_rows = _SHAPES[size][jnp.dtype(dtype).name]
    kx, kw, kb = jax.random.split(key, 3)
    x = jax.random.normal(kx, (rows, hidden), dtype)
    w = jax.random.normal(kw, (1, hidden), dtype)
    b = jax.random.normal(kb, (1, hidden), dtype)
    return (x, w, b), {"block_rows": block_rows}


def xla(x, w, b, **_):
    x32 = x.astype(jnp.float32)
    mean = jnp.mean(x32, axis=-1, keepdims=True)
    var = jnp.mean((x32 - mean) ** 2, axis=-1, keepdims=True)
    return ((x32 - mean) * jax.lax.rsqrt(var + 1e-5) * w.astype(jnp.float32) + b.astype(jnp.float32)).astype(x.dtype)
