"""A BlockSpec whose window is not the whole array, run in GPU interpret mode: AssertionError.

What it detects: a `pl.BlockSpec(block_shape, index_map)` in `in_specs` / `out_specs` whose
index_map returns anything but literal zeros, or whose block shape pallas-fix cannot prove is
the whole array, in a module that runs in GPU interpret mode or under `--target gpu-interpret`.

Why it matters: GPU interpret mode only accepts whole-array blocks (`has_trivial_window()`:
block shape equal to the array shape, index_map returning the literal 0s). Anything else
fails with a bare `AssertionError` from `mosaic_gpu/interpret/interpret_pallas_call.py`, even
with grid=(1,). Observed on jax 0.10.2, 0.12.0.1 and 0.12.1 (CPU).

Example:
    in_specs=[pl.BlockSpec((16,), lambda i: (i,))]   # PF202

What to do: verify BlockSpec kernels with `interpret=True` or TPU interpret mode. To run in
GPU interpret mode, drop the BlockSpecs (whole-array refs) and walk the blocks in the kernel
(a loop over `pl.ds(i * bs, bs)`); pallas-fix never lifts loops into BlockSpecs under
`--target gpu-interpret`. No automatic fix.
"""

from __future__ import annotations

from typing import Iterator, Optional

import libcst as cst

from pallas_fix.core.model import KernelSite
from pallas_fix.core.names import call_arg
from pallas_fix.rules.gpu_interpret.kernel_scope import Issue, KernelScope
from pallas_fix.rules.rule import claims_no_index, make_rule


def site_issues(scope: KernelScope, site: KernelSite) -> Iterator[Issue]:
    for spec in scope.block_specs(site):
        problem = _window_problem(scope, spec)
        if problem is not None:
            message = (
                f"BlockSpec `{scope.text(spec)}` {problem}; GPU interpret mode only runs whole-array "
                "blocks and fails with a bare AssertionError"
            )
            yield Issue("PF202", spec, message, site)


def _window_problem(scope: KernelScope, spec: cst.Call) -> Optional[str]:
    """Why `spec`'s window may not be the whole array, or None when it is."""
    block = call_arg(spec, 0, "block_shape")
    if block is None or (isinstance(block, cst.Name) and block.value == "None"):
        return None  # no block shape: the whole array
    index_map = call_arg(spec, 1, "index_map")
    outputs = scope.index_map_outputs(index_map, spec) if index_map is not None else []
    if outputs is None:
        return "has an index_map pallas-fix cannot read, so its window may not be the whole array"
    moving = [o for o in outputs if not _is_zero(o)]
    if moving:
        return f"selects block `{scope.text(moving[0])}` of each array"
    if isinstance(block, cst.Attribute) and block.attr.value == "shape":
        return None  # `x.shape`: the whole array
    return (
        f"has block shape `{scope.text(block)}`, which pallas-fix cannot prove is the whole array "
        "(the only window GPU interpret mode accepts)"
    )


def _is_zero(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Integer) and int(expr.evaluated_value) == 0


INVALID = (
    """\
import jax
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu


def kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1.0


def add_one(x):
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(x.shape[0] // 16,),
        in_specs=[pl.BlockSpec((16,), lambda i: (i,))],  # expect: PF202
        out_specs=pl.BlockSpec((16,), lambda i: (i,)),  # expect: PF202
        interpret=plgpu.InterpretGPUParams(),
    )(x)
""",
)

# Edits that make the INVALID example VALID.
FIX = (
    ("        grid=(x.shape[0] // 16,),\n", ""),
    ("pl.BlockSpec((16,), lambda i: (i,))],  # expect: PF202", "pl.BlockSpec(x.shape, lambda: (0,))],"),
    ("pl.BlockSpec((16,), lambda i: (i,)),  # expect: PF202", "pl.BlockSpec(x.shape, lambda: (0,)),"),
)

RULE = make_rule(__doc__, "PF202", "gpu-interpret-blockspec", claims_no_index, invalid=INVALID, fix=FIX)
