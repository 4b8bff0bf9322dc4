"""RMSNorm over row blocks without a grid: x, the weight and the result sit whole in VMEM and a
`pl.loop` normalises one block of rows per iteration."""
# pallas-fix: example rms_norm(f32[64, 256], f32[1, 256], block_rows=16)
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def rms_norm_kernel(x_ref, w_ref, o_ref, *, block_rows, eps):
    @pl.loop(0, x_ref.shape[0] // block_rows)
    def _(r):
        rows = pl.ds(pl.multiple_of(r * block_rows, block_rows), block_rows)
        x = x_ref[rows, :].astype(jnp.float32)
        scale = jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps)
        o_ref[rows, :] = (x * scale * w_ref[...].astype(jnp.float32)).astype(o_ref.dtype)


@functools.partial(jax.jit, static_argnames=("block_rows",))
def rms_norm(x, w, *, block_rows=256):
    assert x.shape[0] % block_rows == 0
    return pl.pallas_call(
        functools.partial(rms_norm_kernel, block_rows=block_rows, eps=1e-6),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
    )(x, w)


# --- benchmark hooks (benchmarks/bench_tpu.py) -------------------------------------------------
ENTRY = "rms_norm"
CASES = [("prod", "float32"), ("prod", "bfloat16"), ("vmem", "bfloat16")]
_SHAPES = {  # (rows, hidden, block_rows)
    "small": {"float32": (64, 256, 16), "bfloat16": (64, 256, 16)},
    "prod": {"float32": (1024, 1024, 256), "bfloat16": (2048, 1024, 256)},
    "vmem": {"bfloat16": (8192, 4096, 256)},  # 64 MiB each side
}


def make_inputs(size, dtype, key):
    rows, hidden, block_rows = _SHAPES[size][jnp.dtype(dtype).name]
    kx, kw = jax.random.split(key)
    return (jax.random.normal(kx, (rows, hidden), dtype), jax.random.normal(kw, (1, hidden), dtype)), {"block_rows": block_rows}


def xla(x, w, **_):
    x32 = x.astype(jnp.float32)
    scale = jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + 1e-6)
    return (x32 * scale * w.astype(jnp.float32)).astype(x.dtype)
