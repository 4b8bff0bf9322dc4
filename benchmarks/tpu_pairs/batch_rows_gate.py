"""A gated SiLU over (batch, seq, hidden), one program per batch row with whole-array refs: the
kernel picks its row with `pl.program_id(0)` and a `pl.loop` walks the row's sequence in tiles
(a map: no tile reads another's)."""
# pallas-fix: example gate_rows(f32[2, 64, 256], f32[2, 64, 256], block_t=16)
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def gate_kernel(x_ref, g_ref, o_ref, *, block_t):
    b = pl.program_id(0)

    @pl.loop(0, x_ref.shape[1] // block_t)
    def _(t):
        rows = pl.ds(pl.multiple_of(t * block_t, block_t), block_t)
        g = g_ref[b, rows, :].astype(jnp.float32)
        x = x_ref[b, rows, :].astype(jnp.float32)
        o_ref[b, rows, :] = (x * g / (1.0 + jnp.exp(-g))).astype(o_ref.dtype)


@functools.partial(jax.jit, static_argnames=("block_t",))
def gate_rows(x, g, *, block_t=256):
    assert x.shape[1] % block_t == 0
    return pl.pallas_call(
        functools.partial(gate_kernel, block_t=block_t),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(x.shape[0],),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
    )(x, g)


# --- benchmark hooks (benchmarks/bench_tpu.py) -------------------------------------------------
ENTRY = "gate_rows"
CASES = [("prod", "float32"), ("prod", "bfloat16"), ("vmem", "bfloat16")]
_SHAPES = {  # (batch, seq, hidden, block_t)
    "small": {"float32": (2, 64, 256, 16), "bfloat16": (2, 64, 256, 16)},
    "prod": {"float32": (8, 256, 512, 128), "bfloat16": (8, 512, 512, 256)},
    "vmem": {"bfloat16": (8, 4096, 1024, 256)},  # 64 MiB each array
}


def make_inputs(size, dtype, key):
    batch, seq, hidden, block_t = _SHAPES[size][jnp.dtype(dtype).name]
    kx, kg = jax.random.split(key)
    x = jax.random.normal(kx, (batch, seq, hidden), dtype)
    g = jax.random.normal(kg, (batch, seq, hidden), dtype)
    return (x, g), {"block_t": block_t}


def xla(x, g, **_):
    return (x.astype(jnp.float32) * jax.nn.silu(g.astype(jnp.float32))).astype(x.dtype)
