"""Matmul for TPU without a grid: x, y and the result sit whole in VMEM and the K reduction runs as an
in-kernel loop over (M, bk) x (bk, N) panels."""
# pallas-fix: example matmul_kloop(f32[64, 512], f32[512, 128], bk=128)
import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu  # noqa: F401  (names the backend)


def matmul_kernel(x_ref, y_ref, o_ref, *, bk):
    def body(k, acc):
        kk = pl.multiple_of(k * bk, bk)
        x = x_ref[:, pl.ds(kk, bk)]
        y = y_ref[pl.ds(kk, bk), :]
        return acc + jnp.dot(x, y, preferred_element_type=jnp.float32)

    acc = lax.fori_loop(0, x_ref.shape[1] // bk, body, jnp.zeros(o_ref.shape, jnp.float32))
    o_ref[...] = acc.astype(o_ref.dtype)


@functools.partial(jax.jit, static_argnames=("bk",))
def matmul_kloop(x, y, *, bk=256):
    assert x.shape[1] % bk == 0
    return pl.pallas_call(
        functools.partial(matmul_kernel, bk=bk),
        out_shape=jax.ShapeDtypeStruct((x.shape[0], y.shape[1]), x.dtype),
    )(x, y)


# --- benchmark hooks (benchmarks/bench_tpu.py) -------------------------------------------------
ENTRY = "matmul_kloop"
CASES = [("prod", "float32"), ("prod", "bfloat16"), ("vmem", "float32")]
_SHAPES = {  # (m, k, n, bk)
    "small": {"float32": (64, 512, 128, 128), "bfloat16": (64, 512, 128, 128)},
    "prod": {"float32": (512, 2048, 512, 256), "bfloat16": (512, 4096, 512, 512)},
    "vmem": {"float32": (1024, 8192, 1024, 256)},  # x and y 32 MiB each
}


def make_inputs(size, dtype, key):
    m, k, n, bk = _SHAPES[size][jnp.dtype(dtype).name]
    kx, ky = jax.random.split(key)
    return (jax.random.normal(kx, (m, k), dtype), jax.random.normal(ky, (k, n), dtype)), {"bk": bk}


def xla(x, y, **_):
    return jnp.dot(x, y, preferred_element_type=jnp.float32).astype(x.dtype)
