"""Scalar prefetch, run in GPU interpret mode: NotImplementedError.

What it detects: `pltpu.PrefetchScalarGridSpec(num_scalar_prefetch=n)` with n > 0 (or a
count pallas-fix cannot read), in a module that runs in GPU interpret mode or under
`--target gpu-interpret`.

Why it matters: GPU interpret mode rejects scalar arguments: "NotImplementedError: Scalar
arguments not (yet) supported on GPU", with or without BlockSpecs. Observed on jax 0.10.2,
0.12.0.1 and 0.12.1 (CPU).

Example:
    grid_spec=pltpu.PrefetchScalarGridSpec(num_scalar_prefetch=1, grid=(n,), ...)   # PF205

What to do: scalar prefetch is a TPU feature; check the kernel with `interpret=True` or
`pltpu.InterpretParams()`. For GPU interpret mode pass the indices as an ordinary input and
read them with scalar loads in the kernel (`idx_ref[k]`). No automatic fix.
"""

from __future__ import annotations

from typing import Iterator

from pallas_fix.core import names as N
from pallas_fix.core.model import KernelSite
from pallas_fix.rules.gpu_interpret.kernel_scope import Issue, KernelScope
from pallas_fix.rules.rule import claims_no_index, make_rule


def site_issues(scope: KernelScope, site: KernelSite) -> Iterator[Issue]:
    spec = site.grid_spec
    if spec is None or not scope.is_(spec.func, N.PREFETCH_GRID_SPEC):
        return
    arg = site.grid_spec_keywords.get("num_scalar_prefetch")
    n = scope.module_env.static_int(arg.value) if arg is not None else 0
    if n == 0:
        return
    count = f"{n} scalar prefetch operand(s)" if n is not None else "scalar prefetch"
    message = f"{count}: GPU interpret mode raises NotImplementedError (Scalar arguments not (yet) supported on GPU)"
    yield Issue("PF205", spec, message, site)


INVALID = (
    """\
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu
from jax.experimental.pallas import tpu as pltpu


def kernel(off_ref, x_ref, o_ref):
    o_ref[...] = x_ref[...] + off_ref[0].astype(jnp.float32)


def shifted(off, x):
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(num_scalar_prefetch=1),  # expect: PF205
        interpret=plgpu.InterpretGPUParams(),
    )(off, x)
""",
)

# Edits that make the INVALID example VALID.
FIX = (
    ("from jax.experimental.pallas import tpu as pltpu\n", ""),
    ("        grid_spec=pltpu.PrefetchScalarGridSpec(num_scalar_prefetch=1),  # expect: PF205\n", ""),
)

RULE = make_rule(__doc__, "PF205", "gpu-interpret-scalar-prefetch", claims_no_index, invalid=INVALID, fix=FIX)
