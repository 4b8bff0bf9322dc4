"""An integer-array index into a ref, run in GPU interpret mode: TypeError at run time.

What it detects: `x_ref[idx]` where `idx` is an integer array (`i * 8 + jnp.arange(8)`,
a loaded index vector), in a module that runs in GPU interpret mode or under
`--target gpu-interpret`. Also reported as PF108 when the indices are traced.

Why it matters: GPU interpret mode converts each index to a Python scalar and fails with
"TypeError: Only scalar arrays can be converted to Python scalars" inside an io_callback,
even for a constant `jnp.arange`. Observed on jax 0.10.2, 0.12.0.1 and 0.12.1 (CPU). The HLO
interpreter (`interpret=True`) runs these gathers.

Example:
    o_ref[...] = x_ref[i * 8 + jnp.arange(8)]   # PF204

What to do: for contiguous indices read a window, `x_ref[pl.ds(i * 8, 8)]` (integer scalar
starts run in GPU interpret mode); for a true gather, load the whole ref and index the value
(`x_ref[...][idx]`), or check the kernel with `interpret=True`. No automatic fix of its own:
when the indices are traced and a contiguous range, PF108's contiguous-window fix writes the window.
"""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from pallas_fix.rules.gpu_interpret.kernel_scope import Issue, KernelScope
from pallas_fix.rules.rule import claims_no_index, make_rule


def module_issues(scope: KernelScope) -> Iterator[Issue]:
    for use in scope.analysis.uses:
        if use.kind != "int_array" or not isinstance(use.subscript, cst.Subscript):
            # An atomic's index argument (`atomic_add(o_ref, idx, v)`) fails otherwise in GPU
            # interpret mode (jax 0.12: a ValueError from the swap it becomes), not this TypeError.
            continue
        start = scope.text(use.start) if use.start is not None else "an array"
        message = (
            f"`{use.ref_name}` is indexed with the integer array `{start}`: GPU interpret mode fails at "
            "run time (TypeError: Only scalar arrays can be converted to Python scalars)"
        )
        yield Issue("PF204", use.subscript, message, use.kernel_site)


INVALID = (
    """\
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu


def kernel(x_ref, o_ref):
    o_ref[...] = x_ref[2 * jnp.arange(8)]  # expect: PF204


def even_elements(x):
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((8,), x.dtype),
        interpret=plgpu.InterpretGPUParams(),
    )(x)
""",
)

# Edits that make the INVALID example VALID.
FIX = (
    ("x_ref[2 * jnp.arange(8)]  # expect: PF204", "x_ref[...][2 * jnp.arange(8)]"),
)

RULE = make_rule(__doc__, "PF204", "gpu-interpret-integer-array-index", claims_no_index, invalid=INVALID, fix=FIX)
