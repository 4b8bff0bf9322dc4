"""A TPU memory space (VMEM / SMEM scratch, `pl.ANY`), run in GPU interpret mode: KeyError.

What it detects: `pltpu.VMEM(...)` / `pltpu.SMEM(...)` in `scratch_shapes` or in
`pl.run_scoped(...)`, and `memory_space=pltpu.VMEM / pltpu.SMEM / pl.ANY` in a
BlockSpec, in a module that runs in GPU interpret mode or under `--target gpu-interpret`.

Why it matters: GPU interpret mode knows the Mosaic GPU memory spaces only. Observed on jax
0.10.2, 0.12.0.1 and 0.12.1 (CPU): `KeyError: VMEM` / `KeyError: SMEM` for scratch shapes,
`NotImplementedError: Unsupported memory space: vmem` for run_scoped, `KeyError:
<MemorySpace.ANY>` for `memory_space=pl.ANY`.

Example:
    scratch_shapes=[pltpu.VMEM((128, 128), jnp.float32)]   # PF203

What to do: a TPU kernel belongs in `interpret=True` or `pltpu.InterpretParams()`. A kernel
meant for Mosaic GPU takes `plgpu.SMEM(shape, dtype)` scratch (runs in GPU and HLO interpret
mode) and `plgpu.GMEM` / `plgpu.SMEM` memory spaces. No automatic fix: the memory space
decides where the kernel can run.
"""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from pallas_fix.analysis.context import walk
from pallas_fix.core import names as N
from pallas_fix.core.model import KernelSite
from pallas_fix.rules.gpu_interpret.kernel_scope import Issue, KernelScope
from pallas_fix.rules.rule import claims_no_index, make_rule

# The memory spaces GPU interpret mode was seen to reject (gpu_hazards.HAZARDS["PF203"]).
_TPU_SCRATCH = N.VMEM | N.SMEM_TPU
_TPU_MEMORY_SPACES = frozenset({N.TPU + ".VMEM", N.TPU + ".SMEM", N.PALLAS + ".ANY"})
_RUN_SCOPED = frozenset({N.PALLAS + ".run_scoped"})


def site_issues(scope: KernelScope, site: KernelSite) -> Iterator[Issue]:
    """TPU scratch in scratch_shapes, then in `pl.run_scoped`, then BlockSpec memory spaces."""
    scratch = site.kw("scratch_shapes")
    if scratch is not None:
        for node in scope.items(scratch, site.call):
            if isinstance(node, cst.Call) and scope.is_(node.func, _TPU_SCRATCH):
                yield _issue(scope, site, node, node.func, "scratch")
    for call in scope.calls_in(site, _RUN_SCOPED):
        for a in call.args[1:] if call.args else []:
            for node in walk(a.value):
                if isinstance(node, cst.Call) and scope.is_(node.func, _TPU_SCRATCH):
                    yield _issue(scope, site, node, node.func, "run_scoped scratch")
    for spec in scope.block_specs(site):
        for a in spec.args:
            if a.keyword is not None and a.keyword.value == "memory_space":
                value = a.value.func if isinstance(a.value, cst.Call) else a.value
                if scope.is_(value, _TPU_MEMORY_SPACES):
                    yield _issue(scope, site, a.value, value, "BlockSpec memory space")


def _issue(scope: KernelScope, site: KernelSite, node: cst.CSTNode, space: cst.BaseExpression, where: str) -> Issue:
    message = (
        f"{where} in the TPU memory space `{scope.text(space)}`: GPU interpret mode rejects it (KeyError / "
        "NotImplementedError); Mosaic GPU kernels use plgpu.SMEM / plgpu.GMEM"
    )
    return Issue("PF203", node, message, site)


INVALID = (
    """\
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu
from jax.experimental.pallas import tpu as pltpu


def kernel(x_ref, o_ref, acc_ref):
    acc_ref[...] = x_ref[...] * 2.0
    o_ref[...] = acc_ref[...] + 1.0


def scaled(x):
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        scratch_shapes=[pltpu.VMEM((64,), jnp.float32)],  # expect: PF203
        interpret=plgpu.InterpretGPUParams(),
    )(x)
""",
)

# Edits that make the INVALID example VALID.
FIX = (
    ("from jax.experimental.pallas import tpu as pltpu\n", ""),
    ("pltpu.VMEM((64,), jnp.float32)],  # expect: PF203", "plgpu.SMEM((64,), jnp.float32)],"),
)

RULE = make_rule(__doc__, "PF203", "gpu-interpret-tpu-memory-space", claims_no_index, invalid=INVALID, fix=FIX)
