"""Three TPU-style Pallas kernels that walk their tiles by hand.

Each one slices its refs with a dynamic `pl.ds(...)` start, which keeps the whole operand
resident in on-chip memory and hides the tiling from the Pallas pipeline. pallas-fix finds the
slices, says where each start comes from, and proposes moving the tiling into the grid and the
BlockSpec index_maps:

* `silu`: a `lax.fori_loop` over row blocks of an elementwise op (iterations independent);
* `scale_rows`: rows picked by `pl.program_id` on refs whose block is the whole array;
* `matmul`: a K reduction carried through a `lax.fori_loop` inside a tiled matmul.

The example directives below are the calls `pallas-fix --apply` verifies a rewrite with: the
original and the rewritten module both run through the Pallas interpreter on random inputs of
these shapes and must agree.
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

# pallas-fix: example silu(f32[512, 256])
# pallas-fix: example scale_rows(f32[256, 128], f32[1, 128])
# pallas-fix: example matmul(f32[256, 512], f32[512, 256], block_m=128, block_n=128, block_k=128)

ROW_BLOCK = 128


def silu_kernel(x_ref, o_ref):
    def body(i, carry):
        x = x_ref[pl.ds(i * ROW_BLOCK, ROW_BLOCK), :]
        o_ref[pl.ds(i * ROW_BLOCK, ROW_BLOCK), :] = x * jax.nn.sigmoid(x)
        return carry

    lax.fori_loop(0, x_ref.shape[0] // ROW_BLOCK, body, None)


@jax.jit
def silu(x):
    return pl.pallas_call(
        silu_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
    )(x)


def scale_rows_kernel(x_ref, scale_ref, o_ref):
    rows = pl.ds(pl.program_id(0) * ROW_BLOCK, ROW_BLOCK)
    o_ref[rows, :] = x_ref[rows, :] * scale_ref[...]


@jax.jit
def scale_rows(x, scale):
    return pl.pallas_call(
        scale_rows_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(x.shape[0] // ROW_BLOCK,),
    )(x, scale)


def matmul_kernel(x_ref, y_ref, o_ref, *, block_k):
    # x_ref is a (block_m, K) row panel and y_ref a (K, block_n) column panel.
    block_m, block_n = o_ref.shape

    def body(k, acc):
        x_tile = x_ref[:, pl.ds(k * block_k, block_k)]
        y_tile = y_ref[pl.ds(k * block_k, block_k), :]
        return acc + jnp.dot(x_tile, y_tile, preferred_element_type=jnp.float32)

    acc = lax.fori_loop(0, x_ref.shape[1] // block_k, body, jnp.zeros((block_m, block_n), jnp.float32))
    o_ref[...] = acc.astype(o_ref.dtype)


@functools.partial(jax.jit, static_argnames=["block_m", "block_n", "block_k"])
def matmul(x, y, *, block_m=128, block_n=128, block_k=128):
    m, k = x.shape
    _, n = y.shape
    return pl.pallas_call(
        functools.partial(matmul_kernel, block_k=block_k),
        out_shape=jax.ShapeDtypeStruct((m, n), x.dtype),
        grid=(m // block_m, n // block_n),
        in_specs=[
            pl.BlockSpec((block_m, k), lambda i, j: (i, 0)),
            pl.BlockSpec((k, block_n), lambda i, j: (0, j)),
        ],
        out_specs=pl.BlockSpec((block_m, block_n), lambda i, j: (i, j)),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel")),
    )(x, y)
