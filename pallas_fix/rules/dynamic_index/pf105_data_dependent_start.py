"""A slice start loaded from a ref: the window depends on data.

What it detects: `start = idx_ref[b]; x_ref[pl.ds(start, bs)]`, block tables in paged
attention, scalar-prefetch indices used inside the kernel; also a scalar index loaded so into an
input or output that a write or a read keeping dims uses (`o_ref[page, off, :] = v`,
`x_ref[page, :, :]`: a scatter or gather of whole rows, reported with no fix). Reading one entry
of a table (`idx_ref[b]`) is how such an index is loaded, and no finding.

Why it matters: the window cannot be known before the kernel runs, so Pallas cannot pipeline
it from a static index_map; the whole array stays resident in on-chip memory.

Example:
    page = block_table_ref[b, j]
    k = k_ref[pl.ds(page * page_size, page_size), :]   # PF105

Fix (`scalar-prefetch`, R6, unsafe, TPU only): when the start is `table[f(i)] * size` (a table
entry counting blocks, `pl.multiple_of` of that, or the entry itself for a window of 1), `table`
an input the kernel only reads one scalar at a time, and `i` a grid index or the index of a loop
that can become a grid axis, the table moves into scalar prefetch
(`pltpu.PrefetchScalarGridSpec(num_scalar_prefetch=1, ...)`, its argument and kernel parameter
first) and the ref gets a BlockSpec whose index_map reads it (`lambda i, table: (table[i], 0)`).
A table of row starts (`pl.ds(cu_seqlens_ref[s] + t * size, size)`, a varlen sequence start plus
whole windows in grid indices) gathers block `cu_seqlens_ref[s] // size + t`, right only when every
entry is a multiple of size; the fix message says so.
Unsafe because the table is data: the rewrite waits for verification on an example (give the
table a range: `i32[8] in [0, 8)`). Refused on Mosaic GPU and Triton (no scalar prefetch), for a
table the kernel writes, for overlapping or misaligned windows and for outputs (a scatter).
"""

from __future__ import annotations

from pallas_fix.core.model import IndexUse, Origin
from pallas_fix.rules.rule import claims_origin, make_rule, start_text


def message(use: IndexUse) -> str:
    if use.kind == "scalar":
        return f"`{use.ref_name}` is indexed by the data-dependent scalar {start_text(use)} ({use.provenance.description})"
    return f"start {start_text(use)} of `{use.ref_name}` is data-dependent ({use.provenance.description})"


check = claims_origin(Origin.REF_LOAD, message)


INVALID = (
    """\
import jax
from jax.experimental import pallas as pl


def kernel(page_ref, x_ref, o_ref):
    page = page_ref[0]
    o_ref[...] = x_ref[pl.ds(page * 8, 8)]  # expect: PF105


def read_page(pages, x):
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8,), x.dtype))(pages, x)
""",
)

VALID = (
    """\
import jax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def kernel(page_ref, x_ref, o_ref):
    o_ref[...] = x_ref[...]


def read_page(pages, x):
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((8,), x.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1,
            grid=(1,),
            in_specs=[pl.BlockSpec((8,), lambda i, page_ref: (page_ref[0],))],
            out_specs=pl.BlockSpec((8,), lambda i, page_ref: (0,)),
        ),
    )(pages, x)
""",
)

RULE = make_rule(__doc__, "PF105", "data-dependent-start", check, valid=VALID, invalid=INVALID)
