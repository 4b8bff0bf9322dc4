"""Block gather (an embedding-style lookup of row blocks): step i copies the block of `x` that
entry i of an index table in SMEM names. Every block of `x` stays resident (whole-array spec)
because the window depends on the table."""
# pallas-fix: example gather_blocks(f32[256, 128], i32[8] in [0, 16), bs=16)
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def gather_blocks_kernel(x_ref, idx_ref, o_ref, *, bs):
    src = idx_ref[pl.program_id(0)]
    o_ref[...] = x_ref[pl.ds(pl.multiple_of(src * bs, bs), bs), :] * 2.0


@functools.partial(jax.jit, static_argnames=("bs",))
def gather_blocks(x, idx, *, bs=64):
    assert x.shape[0] % bs == 0
    return pl.pallas_call(
        functools.partial(gather_blocks_kernel, bs=bs),
        out_shape=jax.ShapeDtypeStruct((idx.shape[0] * bs, x.shape[1]), x.dtype),
        grid=(idx.shape[0],),
        in_specs=[
            pl.BlockSpec(x.shape, lambda i: (0, 0)),
            pl.BlockSpec(memory_space=pltpu.SMEM),
        ],
        out_specs=pl.BlockSpec((bs, x.shape[1]), lambda i: (i, 0)),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
    )(x, idx)


# --- benchmark hooks (benchmarks/bench_tpu.py) -------------------------------------------------
ENTRY = "gather_blocks"
CASES = [("prod", "float32"), ("prod", "bfloat16"), ("vmem", "float32")]
_SHAPES = {  # (table rows, cols, gathered blocks, bs)
    "small": {"float32": (256, 128, 8, 16), "bfloat16": (256, 128, 8, 16)},
    "prod": {"float32": (4096, 512, 256, 64), "bfloat16": (4096, 1024, 256, 64)},
    "vmem": {"float32": (32768, 1024, 256, 64)},  # a 128 MiB table
}


def make_inputs(size, dtype, key):
    rows, cols, n, bs = _SHAPES[size][jnp.dtype(dtype).name]
    kx, ki = jax.random.split(key)
    x = jax.random.normal(kx, (rows, cols), dtype)
    idx = jax.random.randint(ki, (n,), 0, rows // bs, jnp.int32)
    return (x, idx), {"bs": bs}


def xla(x, idx, *, bs):
    blocks = x.reshape(x.shape[0] // bs, bs, x.shape[1])
    return (jnp.take(blocks, idx, axis=0) * 2).reshape(-1, x.shape[1]).astype(x.dtype)
