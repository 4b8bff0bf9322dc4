"""A row-block projection with a strip-mined body: one program per block of `block_m` rows over
whole-array refs, and a `pl.loop` walks the block in `chunk`-row strips, each a matmul against the
whole (small) weight (a map: no strip reads another's rows)."""
# pallas-fix: example project_rows(f32[64, 128], f32[128, 128], block_m=32, chunk=8)
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def project_kernel(x_ref, w_ref, o_ref, *, block_m, chunk):
    i = pl.program_id(0)
    w = w_ref[...]

    @pl.loop(0, block_m // chunk)
    def _(c):
        rows = pl.ds(pl.multiple_of(i * block_m + c * chunk, chunk), chunk)
        y = jnp.dot(x_ref[rows, :], w, preferred_element_type=jnp.float32)
        o_ref[rows, :] = jnp.maximum(y, 0.0).astype(o_ref.dtype)


@functools.partial(jax.jit, static_argnames=("block_m", "chunk"))
def project_rows(x, w, *, block_m=512, chunk=128):
    assert x.shape[0] % block_m == 0 and block_m % chunk == 0
    return pl.pallas_call(
        functools.partial(project_kernel, block_m=block_m, chunk=chunk),
        out_shape=jax.ShapeDtypeStruct((x.shape[0], w.shape[1]), x.dtype),
        grid=(x.shape[0] // block_m,),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
    )(x, w)


# --- benchmark hooks (benchmarks/bench_tpu.py) -------------------------------------------------
ENTRY = "project_rows"
CASES = [("prod", "float32"), ("prod", "bfloat16"), ("vmem", "bfloat16")]
_SHAPES = {  # (rows, k, n, block_m, chunk)
    "small": {"float32": (64, 128, 128, 32, 8), "bfloat16": (64, 128, 128, 32, 16)},
    "prod": {"float32": (2048, 512, 512, 512, 128), "bfloat16": (4096, 512, 512, 512, 128)},
    "vmem": {"bfloat16": (65536, 512, 512, 1024, 256)},  # 64 MiB for x and for the output
}


def make_inputs(size, dtype, key):
    rows, k, n, block_m, chunk = _SHAPES[size][jnp.dtype(dtype).name]
    kx, kw = jax.random.split(key)
    x = jax.random.normal(kx, (rows, k), dtype)
    w = (jax.random.normal(kw, (k, n), dtype) * (k ** -0.5)).astype(dtype)
    return (x, w), {"block_m": block_m, "chunk": chunk}


def xla(x, w, **_):
    y = jnp.dot(x, w, preferred_element_type=jnp.float32)
    return jnp.maximum(y, 0.0).astype(x.dtype)
