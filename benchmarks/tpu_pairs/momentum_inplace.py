"""An in-place SGD-momentum step, one program per row block with whole-array refs: the kernel cuts
its rows with `pl.program_id(0)` and writes the parameter and the momentum back into the buffers
they came in (`input_output_aliases`), as optimizer kernels do to save the second copy."""
# pallas-fix: example momentum_step(f32[64, 256], f32[64, 256], f32[64, 256], block_rows=16)
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def momentum_kernel(g_ref, p_ref, m_ref, p_out_ref, m_out_ref, *, block_rows, lr, beta):
    i = pl.program_id(0)
    rows = pl.ds(pl.multiple_of(i * block_rows, block_rows), block_rows)
    m = beta * m_ref[rows, :].astype(jnp.float32) + g_ref[rows, :].astype(jnp.float32)
    m_out_ref[rows, :] = m.astype(m_out_ref.dtype)
    p_out_ref[rows, :] = (p_ref[rows, :].astype(jnp.float32) - lr * m).astype(p_out_ref.dtype)


@functools.partial(jax.jit, static_argnames=("block_rows",), donate_argnums=(1, 2))
def momentum_step(g, p, m, *, block_rows=256):
    assert g.shape == p.shape == m.shape and p.shape[0] % block_rows == 0
    return pl.pallas_call(
        functools.partial(momentum_kernel, block_rows=block_rows, lr=1e-3, beta=0.9),
        out_shape=(jax.ShapeDtypeStruct(p.shape, p.dtype), jax.ShapeDtypeStruct(m.shape, m.dtype)),
        grid=(p.shape[0] // block_rows,),
        input_output_aliases={1: 0, 2: 1},
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
    )(g, p, m)


# --- benchmark hooks (benchmarks/bench_tpu.py) -------------------------------------------------
ENTRY = "momentum_step"
CASES = [("prod", "float32"), ("prod", "bfloat16"), ("vmem", "float32"), ("vmem", "bfloat16")]
_SHAPES = {  # (rows, cols, block_rows)
    "small": {"float32": (64, 256, 16), "bfloat16": (64, 256, 16)},
    "prod": {"float32": (512, 1024, 128), "bfloat16": (1024, 1024, 256)},
    "vmem": {"float32": (8192, 1024, 256), "bfloat16": (8192, 2048, 256)},  # 32 MiB each array
}


def make_inputs(size, dtype, key):
    rows, cols, block_rows = _SHAPES[size][jnp.dtype(dtype).name]
    kg, kp, km = jax.random.split(key, 3)
    g = jax.random.normal(kg, (rows, cols), dtype)
    p = jax.random.normal(kp, (rows, cols), dtype)
    m = jax.random.normal(km, (rows, cols), dtype)
    return (g, p, m), {"block_rows": block_rows}


def xla(g, p, m, **_):
    m_new = 0.9 * m.astype(jnp.float32) + g.astype(jnp.float32)
    return (p.astype(jnp.float32) - 1e-3 * m_new).astype(p.dtype), m_new.astype(m.dtype)
