"""What GPU interpret mode (`interpret=plgpu.InterpretGPUParams()`) cannot do, and on which jax.

The PF2xx rules (rules/gpu_interpret/kernel_rules.py) warn about these hazards; the `--target gpu-interpret` codemods
avoid them. Every hazard was reproduced on CPU with the jax versions in `versions` (the scripts are
the PF2xx tests in tests/test_gpu_interpret.py); a different installed jax gets a note, because the
GPU interpreter is young and each of these may change.

Nothing here imports jax: the installed version is read from the package metadata.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import metadata
from typing import Optional

import libcst as cst

from pallas_fix.analysis.context import walk
from pallas_fix.analysis.result import Analysis
from pallas_fix.core import names as N

TARGET = "gpu-interpret"
CONFIRMED_ON = ("0.10.2", "0.12.0.1", "0.12.1")


@dataclass(frozen=True)
class Hazard:
    code: str
    what: str
    observed: str  # what the user sees
    versions: tuple[str, ...] = CONFIRMED_ON


HAZARDS: dict[str, Hazard] = {
    h.code: h
    for h in (
        Hazard(
            "PF201",
            "pl.program_id in a grid with more than one step",
            "no error: pl.program_id is 0 in every step, so only block 0 is computed and the rest "
            "of the output is left uninitialised (NaN)",
        ),
        Hazard(
            "PF202",
            "a BlockSpec whose window is not the whole array",
            "bare AssertionError (`assert all(bm.has_trivial_window() ...)`), even with grid=(1,)",
        ),
        Hazard(
            "PF203",
            "TPU memory spaces (pltpu.VMEM / pltpu.SMEM scratch or run_scoped, memory_space=pltpu.VMEM / pltpu.SMEM / pl.ANY)",
            "KeyError: VMEM (scratch_shapes), NotImplementedError: Unsupported memory space (run_scoped), "
            "KeyError: <MemorySpace.ANY> (BlockSpec memory_space)",
        ),
        Hazard(
            "PF204",
            "an integer-array index into a ref",
            "TypeError at run time: Only scalar arrays can be converted to Python scalars",
        ),
        Hazard(
            "PF205",
            "scalar prefetch (PrefetchScalarGridSpec with num_scalar_prefetch > 0)",
            "NotImplementedError: Scalar arguments not (yet) supported on GPU",
        ),
        Hazard(
            "PF206",
            "jax.vmap over a pallas_call",
            "TypeError: _pallas_call_batching_rule() got an unexpected keyword argument (jax 0.10.2, "
            "0.12.0.1); bare AssertionError, the batch made a grid axis with blocks (jax 0.12.1)",
        ),
    )
}

# The interpreter's parameters class and its mode switches; jax 0.10.2 only has the private path.
_PRIVATE = "jax._src.pallas.mosaic_gpu.interpret.params"
INTERPRET_GPU_NAMES = N.INTERPRET_GPU | N.FORCE_GPU_INTERPRET | frozenset(
    {
        N.MOSAIC_GPU + ".set_gpu_interpret_mode",
        _PRIVATE + ".InterpretGPUParams",
        _PRIVATE + ".force_gpu_interpret_mode",
        _PRIVATE + ".set_gpu_interpret_mode",
    }
)


@functools.lru_cache(maxsize=1)
def installed_jax_version() -> Optional[str]:
    try:
        return metadata.version("jax")
    except metadata.PackageNotFoundError:
        return None


def version_note(code: Optional[str] = None, version: Optional[str] = None) -> Optional[str]:
    """A warning when `version` (default: the installed jax) is not one the hazard was seen on."""
    versions = HAZARDS[code].versions if code else CONFIRMED_ON
    version = version if version is not None else installed_jax_version()
    if version in versions:
        return None
    seen = " and ".join(filter(None, (", ".join(versions[:-1]), versions[-1])))
    if version is None:
        return f"jax is not installed here; observed on jax {seen}"
    return f"observed on jax {seen}; not checked on the installed jax {version}"


def verification_note(version: str) -> str:
    """What a gpu-interpret verification run can say about the jax it ran on."""
    note = version_note(None, version)
    if note is None:
        return f"gpu-interpret on jax {version}: PF201-PF206 hazards confirmed on this version"
    return f"gpu-interpret on jax {version}: {note} (PF201-PF206 may not apply)"


def trigger(analysis: Analysis) -> Optional[str]:
    """Why this module's kernels may run in GPU interpret mode, or None when nothing says so."""
    if analysis.config.target == TARGET:
        return "--target gpu-interpret"
    if analysis.config.target == "compiled":
        return None
    ctx = analysis.ctx
    if ctx is None or not any(s in analysis.source for s in N.GPU_INTERPRET_WORDS):
        return None
    for node in walk(ctx.module):
        if isinstance(node, (cst.Attribute, cst.Name)) and ctx.imports.is_(node, INTERPRET_GPU_NAMES):
            name = ctx.code(node).rsplit(".", 1)[-1]
            return f"the module uses {name} (line {ctx.span(node).line})"
    return None


def targeted(analysis: Analysis) -> bool:
    return analysis.config.target == TARGET
