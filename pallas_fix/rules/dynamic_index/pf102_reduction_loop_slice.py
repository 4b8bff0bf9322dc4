"""A slice driven by the index of a loop that carries a value (a reduction).

What it detects: the K loop of a matmul, the KV loop of an attention kernel, row statistics:
a fori_loop whose body slices refs with its index and returns an updated carry. Also a loop
that carries nothing but accumulates into a ref at a place every iteration shares
(`o_ref[...] += x_ref[:, pl.ds(k * bk, bk)]`): each iteration reads what the one before wrote,
so its iterations are not independent (the engine files it here when lift-reduction takes it).

Why it matters: as PF101, the inputs stay resident and unpipelined. The idiomatic form is a
sequential ("arbitrary") innermost grid axis with the carry in scratch memory, initialised
under `pl.when(k == 0)` and finalised under `pl.when(k == nk - 1)`.

Example:
    acc = lax.fori_loop(0, K // bk, lambda k, acc: acc + jnp.dot(
        x_ref[:, pl.ds(k * bk, bk)], y_ref[pl.ds(k * bk, bk), :]), acc0)

Fix (unsafe on TPU / Mosaic GPU, when every precondition holds; never on Triton, whose grid
axes run in parallel): lift into a sequential grid axis with scratch carries.
"""

from __future__ import annotations

from typing import Optional

from pallas_fix.analysis.loops.windows import Window
from pallas_fix.core.model import IndexUse, Origin
from pallas_fix.rules.dynamic_index.pf101_independent_loop_slice import SQUEEZABLE
from pallas_fix.rules.rule import make_rule, start_text


def check(use: IndexUse, window: Window) -> Optional[str]:
    loop = use.provenance.loop
    if use.provenance.origin is not Origin.LOOP or loop is None or not loop.carries:
        return None
    return message(use)


def message(use: IndexUse) -> str:
    """Also the message of a carry-less loop that accumulates into a ref (engine.check)."""
    if use.kind == "scalar":
        return f"`{use.ref_name}` is indexed by the index of a reduction loop with the scalar index {start_text(use)}; {SQUEEZABLE}"
    return f"`{use.ref_name}` is sliced by the index of a reduction loop with start {start_text(use)}"


INVALID = (
    """\
import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl

BK = 128


def kernel(x_ref, y_ref, o_ref):
    def body(k, acc):
        x = x_ref[:, pl.ds(k * BK, BK)]  # expect: PF102
        y = y_ref[pl.ds(k * BK, BK), :]  # expect: PF102
        return acc + jnp.dot(x, y)

    o_ref[...] = lax.fori_loop(0, 4, body, jnp.zeros(o_ref.shape, jnp.float32))


def matmul(x, y):
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((x.shape[0], y.shape[1]), jnp.float32))(x, y)
""",
    """\
import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl

BK = 128


def kernel(x_ref, o_ref):
    o_ref[...] = jnp.zeros_like(o_ref)

    def body(k, _):
        o_ref[...] += x_ref[:, pl.ds(k * BK, BK)]  # expect: PF102

    lax.fori_loop(0, 4, body, None)


def column_block_sum(x):
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((x.shape[0], BK), x.dtype))(x)
""",
)

VALID = (
    """\
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

BK = 128


def kernel(x_ref, y_ref, o_ref):
    @pl.when(pl.program_id(0) == 0)
    def _():
        o_ref[...] = jnp.zeros_like(o_ref)

    o_ref[...] += jnp.dot(x_ref[...], y_ref[...])


def matmul(x, y):
    m, n = x.shape[0], y.shape[1]
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((m, n), jnp.float32),
        grid=(x.shape[1] // BK,),
        in_specs=[pl.BlockSpec((m, BK), lambda k: (0, k)), pl.BlockSpec((BK, n), lambda k: (k, 0))],
        out_specs=pl.BlockSpec((m, n), lambda k: (0, 0)),
    )(x, y)
""",
)

RULE = make_rule(__doc__, "PF102", "reduction-loop-slice", check, valid=VALID, invalid=INVALID, promises=(SQUEEZABLE,))
