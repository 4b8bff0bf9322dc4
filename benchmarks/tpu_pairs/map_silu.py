"""SiLU over row blocks without a grid: the whole array sits in VMEM and an in-kernel loop walks
its row blocks (a map: no iteration reads another's rows)."""
# pallas-fix: example silu_rows(f32[64, 256], block_rows=16)
import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl


def silu_kernel(x_ref, o_ref, *, block_rows):
    def body(i, carry):
        start = pl.multiple_of(i * block_rows, block_rows)
        x = x_ref[pl.ds(start, block_rows), :].astype(jnp.float32)
        o_ref[pl.ds(start, block_rows), :] = (x / (1.0 + jnp.exp(-x))).astype(o_ref.dtype)
        return carry

    lax.fori_loop(0, x_ref.shape[0] // block_rows, body, 0)


@functools.partial(jax.jit, static_argnames=("block_rows",))
def silu_rows(x, *, block_rows=256):
    assert x.shape[0] % block_rows == 0
    return pl.pallas_call(
        functools.partial(silu_kernel, block_rows=block_rows),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
    )(x)


# --- benchmark hooks (benchmarks/bench_tpu.py) -------------------------------------------------
ENTRY = "silu_rows"
CASES = [("prod", "float32"), ("prod", "bfloat16"), ("vmem", "float32"), ("vmem", "bfloat16")]
_SHAPES = {  # (rows, cols, block_rows)
    "small": {"float32": (64, 256, 16), "bfloat16": (64, 256, 16)},
    "prod": {"float32": (1024, 1024, 256), "bfloat16": (2048, 1024, 256)},
    "vmem": {"float32": (8192, 1024, 256), "bfloat16": (8192, 2048, 256)},  # 32 MiB each side
}


def make_inputs(size, dtype, key):
    rows, cols, block_rows = _SHAPES[size][jnp.dtype(dtype).name]
    return (jax.random.normal(key, (rows, cols), dtype),), {"block_rows": block_rows}


def xla(x, **_):
    return jax.nn.silu(x.astype(jnp.float32)).astype(x.dtype)
