"""`pl.program_id` in a grid with more than one step, run in GPU interpret mode: silently wrong.

What it detects: a call to `pl.program_id(axis)` in a kernel (or a helper it calls) whose
pallas_call has a grid axis `axis` of more than one step (or of a size pallas-fix cannot read),
in a module that runs in GPU interpret mode (`interpret=plgpu.InterpretGPUParams()`,
`plgpu.force_gpu_interpret_mode()`) or under `--target gpu-interpret`.

Why it matters: GPU interpret mode runs every grid step with `pl.program_id` equal to 0. A
kernel that picks its block with `pl.program_id` computes block 0 over and over; the rest of
the output is never written (NaN) and nothing raises. Observed on jax 0.10.2, 0.12.0.1 and 0.12.1
(CPU); `pl.num_programs` is correct there.

Example:
    def kernel(x_ref, o_ref):
        i = pl.program_id(0)                              # PF201: always 0
        o_ref[pl.ds(i * 16, 16)] = x_ref[pl.ds(i * 16, 16)] + 1
    pl.pallas_call(kernel, out_shape=..., grid=(4,), interpret=plgpu.InterpretGPUParams())(x)

What to do: check this kernel with `interpret=True` (or TPU interpret mode) instead, or make
the grid an in-kernel loop. Fix (safe, `--target gpu-interpret` only, when every ref is a
whole-array block): `grid-to-loop` wraps the kernel body in
`def _step(pid, carry): ...; return carry` + `lax.fori_loop(0, n, _step, None)`, replaces
`pl.program_id(0)` by the loop index and removes the grid.
"""

from __future__ import annotations

from typing import Iterator

from pallas_fix.core import names as N
from pallas_fix.core.model import KernelSite
from pallas_fix.core.plans import site_key
from pallas_fix.rules.gpu_interpret.hazards import targeted
from pallas_fix.rules.gpu_interpret.kernel_scope import Issue, KernelScope
from pallas_fix.rules.rule import claims_no_index, make_rule


def site_issues(scope: KernelScope, site: KernelSite) -> Iterator[Issue]:
    """Each `pl.program_id(axis)` of a grid axis that may have more than one step. The finding is
    anchored on the site: no dynamic index carries the grid-to-loop plan when `pl.program_id`
    only feeds a `pl.when`."""
    sizes = scope.grid_sizes(site)
    if sizes is None:
        return
    grid_text = scope.text(site.kw("grid"))  # type: ignore[arg-type]
    if targeted(scope.analysis):
        refusal = "no grid to move"
    else:
        refusal = (
            "run with `--target gpu-interpret` to move the grid into an in-kernel loop (grid-to-loop), "
            "or check this kernel with interpret=True"
        )
    for call in scope.calls_in(site, N.PROGRAM_ID):
        axis = scope.module_env.static_int(call.args[0].value) if call.args else None
        size = sizes[axis] if axis is not None and axis < len(sizes) else None
        if size is not None and size <= 1:
            continue
        steps = f"{size} steps" if size is not None else "a size pallas-fix cannot read"
        message = (
            f"`{scope.text(call)}` is 0 in every step of grid `{grid_text}` ({steps}): only block 0 "
            "is computed and the rest of the output is never written, with no error"
        )
        yield Issue("PF201", call, message, site, refusal, anchor=site_key(site))


INVALID = (
    """\
import jax
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu


def kernel(x_ref, o_ref):
    i = pl.program_id(0)  # expect: PF201
    o_ref[pl.ds(i * 16, 16)] = x_ref[pl.ds(i * 16, 16)] + 1.0


def add_one(x):
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(4,),
        interpret=plgpu.InterpretGPUParams(),
    )(x)
""",
)

# Edits that make the INVALID example VALID: grid-to-loop's rewrite.
FIX = (
    ("import jax\n", "import jax\nfrom jax import lax\n"),
    ("    i = pl.program_id(0)  # expect: PF201\n    o_ref", "    def step(i, carry):\n        o_ref"),
    (" + 1.0\n", " + 1.0\n        return carry\n\n    lax.fori_loop(0, 4, step, None)\n"),
    ("        grid=(4,),\n", ""),
)

RULE = make_rule(__doc__, "PF201", "gpu-interpret-program-id", claims_no_index, severity="error", invalid=INVALID, fix=FIX)
