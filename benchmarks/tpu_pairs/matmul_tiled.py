"""Tiled matmul on an (M, N) grid: each step holds a (bm, K) and a (K, bn) panel, already
pipelined over (i, j), and the K reduction runs in the kernel."""
# pallas-fix: example matmul_tiled(f32[256, 512], f32[512, 256], bm=128, bn=128, bk=128)
import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def matmul_kernel(x_ref, y_ref, o_ref, *, bk):
    bm, bn = o_ref.shape
    num_k = x_ref.shape[1] // bk

    def body(k, acc):
        kk = pl.multiple_of(k * bk, bk)
        x = x_ref[:, pl.ds(kk, bk)]
        y = y_ref[pl.ds(kk, bk), :]
        return acc + jnp.dot(x, y, preferred_element_type=jnp.float32)

    acc = lax.fori_loop(0, num_k, body, jnp.zeros((bm, bn), jnp.float32))
    o_ref[...] = acc.astype(o_ref.dtype)


@functools.partial(jax.jit, static_argnames=("bm", "bn", "bk"))
def matmul_tiled(x, y, *, bm=256, bn=256, bk=512):
    m, k = x.shape
    _, n = y.shape
    assert m % bm == 0 and n % bn == 0 and k % bk == 0
    return pl.pallas_call(
        functools.partial(matmul_kernel, bk=bk),
        out_shape=jax.ShapeDtypeStruct((m, n), x.dtype),
        grid=(m // bm, n // bn),
        in_specs=[
            pl.BlockSpec((bm, k), lambda i, j: (i, 0)),
            pl.BlockSpec((k, bn), lambda i, j: (0, j)),
        ],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j: (i, j)),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel")),
    )(x, y)


# --- benchmark hooks (benchmarks/bench_tpu.py) -------------------------------------------------
ENTRY = "matmul_tiled"
CASES = [("prod", "float32"), ("prod", "bfloat16"), ("vmem", "float32"), ("vmem", "bfloat16"), ("long", "float32"), ("long", "bfloat16")]
_SHAPES = {  # (m, k, n, bm, bn, bk)
    "small": {"float32": (256, 512, 256, 128, 128, 128), "bfloat16": (256, 512, 256, 128, 128, 128)},
    "prod": {"float32": (1024, 2048, 1024, 256, 256, 512), "bfloat16": (2048, 4096, 2048, 256, 256, 512)},
    # (256, 8192) f32 panels, double-buffered: 32 MiB; (512, 4096) bf16 panels: 16 MiB and the output
    "long": {"float32": (1024, 2048, 1024, 256, 256, 128), "bfloat16": (2048, 4096, 2048, 256, 256, 256)},  # 16 K windows: 2 strips
    "vmem": {"float32": (1024, 8192, 1024, 256, 256, 512), "bfloat16": (2048, 4096, 2048, 512, 512, 512)},
}


def make_inputs(size, dtype, key):
    m, k, n, bm, bn, bk = _SHAPES[size][jnp.dtype(dtype).name]
    kx, ky = jax.random.split(key)
    return (jax.random.normal(kx, (m, k), dtype), jax.random.normal(ky, (k, n), dtype)), {"bm": bm, "bn": bn, "bk": bk}


def xla(x, y, **_):
    return jnp.dot(x, y, preferred_element_type=jnp.float32).astype(x.dtype)


def hand(x, y, *, bm, bn, bk):
    from jax.experimental.pallas.ops.tpu.matmul import matmul

    return matmul(x, y, block_shape=(bm, bn), block_k=bk)
