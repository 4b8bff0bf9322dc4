"""An embedding lookup that writes its output itself: per program, `block_m` table rows gathered by
DMA from HBM into VMEM scratch (the ids in scalar prefetch: a data-chosen gather, which stays),
then one bulk DMA of the scratch into the program's rows of an output left in HBM
(`memory_space=pl.ANY`). pallas-fix gives the output a VMEM BlockSpec of `block_m` rows and
re-bases the bulk DMA onto that block; the pipeline's writeback then overlaps the next step's gather
(issue 28, the form of tests/fixtures/real/tpu_kernels__embedding_lookup*.py)."""
# pallas-fix: example embed_rows(f32[64, 128], i32[32] in [0, 64), block_m=8)
import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def embed_kernel(ids_ref, table_ref, o_ref, rows, sem, *, block_m):
    i = pl.program_id(0)

    def gather(k, carry):
        pltpu.make_async_copy(table_ref.at[pl.ds(ids_ref[i * block_m + k], 1)], rows.at[pl.ds(k, 1)], sem).start()
        return carry

    lax.fori_loop(0, block_m, gather, 0)
    pltpu.make_async_copy(rows, rows, sem).wait()  # one wait for the bytes of all block_m rows
    out = pltpu.make_async_copy(src_ref=rows, dst_ref=o_ref.at[pl.ds(i * block_m, block_m)], sem=sem)
    out.start()
    out.wait()


@functools.partial(jax.jit, static_argnames=("block_m",))
def embed_rows(table, ids, *, block_m=256):
    m = ids.shape[0]
    hidden = table.shape[1]
    if m % block_m:
        raise ValueError("ids must come in whole blocks")
    return pl.pallas_call(
        functools.partial(embed_kernel, block_m=block_m),
        out_shape=jax.ShapeDtypeStruct((m, hidden), table.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1,
            grid=(m // block_m,),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(memory_space=pl.ANY),
            scratch_shapes=[pltpu.VMEM((block_m, hidden), table.dtype), pltpu.SemaphoreType.DMA],
        ),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
    )(ids, table)


# --- benchmark hooks (benchmarks/bench_tpu.py) -------------------------------------------------
ENTRY = "embed_rows"
CASES = [("prod", "float32"), ("prod", "bfloat16")]
_SHAPES = {  # (vocab, hidden, ids, block_m)
    "small": {"float32": (64, 128, 32, 8), "bfloat16": (64, 128, 64, 16)},
    "prod": {"float32": (32768, 1024, 4096, 256), "bfloat16": (32768, 1024, 4096, 256)},
}


def make_inputs(size, dtype, key):
    vocab, hidden, m, block_m = _SHAPES[size][jnp.dtype(dtype).name]
    kt, ki = jax.random.split(key)
    table = jax.random.normal(kt, (vocab, hidden), dtype)
    ids = jax.random.randint(ki, (m,), 0, vocab, jnp.int32)
    return (table, ids), {"block_m": block_m}


def xla(table, ids, **_):
    return jnp.take(table, ids, axis=0)
