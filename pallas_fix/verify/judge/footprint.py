"""The bytes one grid step of a pallas_call holds on chip, and the backend's default limit on them.

Pure Python over :class:`CallLayout` (what :mod:`pallas_fix.verify.worker.block_layouts` reads off a
traced pallas_call); imports no jax, so the rules can be tested on hand-made layouts.

Counting rules (jax 0.12 sources):

* **TPU (Mosaic), and kernels without compiler params** (Pallas lowers those through Mosaic on
  TPU): ``jax/_src/pallas/mosaic/lowering.py`` gives ANY / HBM / semaphore operands no window
  (they stay in HBM: 0 bytes; what a kernel DMAs out of them lands in scratch, counted there),
  forces ``Buffered(1)`` on a VMEM operand whose window is trivial (block = whole array, index map
  all zeros) and otherwise passes ``pipeline_mode=pl.Buffered(n)`` on (n = 1 or 2), leaving Mosaic's
  default, double buffering, when none is given (``tests/pallas/tpu_pallas_test.py``
  ``test_two_input_vadd`` measures VMEM use = block x (2 + the inputs' buffer counts)). A call
  without a grid has only trivial windows: every operand once. Scalar-prefetch operands sit whole
  in SMEM; scratch shapes count once in their memory space.
* **Mosaic GPU**: blocks in SMEM (the default) are allocated ``(max_concurrent_steps, *block)``
  (``jax/_src/pallas/mosaic_gpu/pipeline.py`` ``emit_pipeline``; ``max_concurrent_steps`` defaults
  to 1 and shrinks to the number of sequential grid steps); GMEM operands cost none; SMEM / TMEM
  scratch counts once; registers and barriers are not counted.
* **Triton**: Pallas does not buffer blocks (Triton loads them); each block counts once and no
  limit is known from JAX's sources.

An entry's footprint is the largest per-step footprint among its pallas_calls: kernels run one
after another and each has a scoped limit of its own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

KiB = 1024
MiB = 1024 * KiB

# The scoped VMEM a TPU kernel may use unless pltpu.CompilerParams(vmem_limit_bytes=...) says
# otherwise. Not in JAX's sources: it is libtpu's --xla_tpu_scoped_vmem_limit_kib (named by
# jax 0.12 jax/_src/pallas/mosaic/core.py, CompilerParams.vmem_limit_bytes); the values are the
# ones libtpu reports in CompileTimeScopedVmemOom errors. Physical VMEM per core is in jax 0.12
# jax/_src/tpu_info.py (16 MiB on v4, 128 MiB on v5e / v6e, 64 MiB on v5p / v7x).
TPU_SCOPED_VMEM_DEFAULTS = {"v4": 16 * MiB, "v5e": 16 * MiB, "v5p": 16 * MiB, "v6e": 32 * MiB, "v7x": 32 * MiB}
TPU_SCOPED_VMEM_DEFAULT = min(TPU_SCOPED_VMEM_DEFAULTS.values())
# jax 0.12 jax/experimental/mosaic/gpu/core.py: without a device to ask, Mosaic GPU assumes
# 227 KiB of shared memory per block (compute capability 9.0 and 10.x) and refuses a kernel over it.
MOSAIC_GPU_SMEM_DEFAULT = 227 * KiB

_OFF_CHIP = {
    "tpu": {"any", "hbm", "semaphore_mem", "semaphore", "error"},
    "mosaic_gpu": {"any", "gmem", "regs"},
    "triton": {"any"},
}


@dataclass(frozen=True)
class Operand:
    """One operand's on-chip buffer: a block of an input or output, a scratch shape, or a
    scalar-prefetch array."""

    shape: tuple[int, ...]  # the block's shape (the whole array when the block is)
    bits: int  # bits per element
    memory_space: str = "default"  # "default", "vmem", "smem", "any", "hbm", "gmem", ...
    trivial_window: bool = False  # block = whole array, index map all zeros
    buffer_count: Optional[int] = None  # pipeline_mode=pl.Buffered(n)

    @property
    def nbytes(self) -> int:
        return (math.prod(self.shape) * self.bits + 7) // 8


@dataclass(frozen=True)
class CallLayout:
    backend: str  # tpu | generic | mosaic_gpu | triton
    grid: tuple = ()  # ints; None for a dynamic size
    blocks: tuple[Operand, ...] = ()  # inputs, then outputs
    scratch: tuple[Operand, ...] = ()
    index: tuple[Operand, ...] = ()  # scalar prefetch
    vmem_limit_bytes: Optional[int] = None  # pltpu.CompilerParams(vmem_limit_bytes=...)
    max_concurrent_steps: int = 1  # plgpu.CompilerParams
    sequential_steps: Optional[int] = 1  # Mosaic GPU: grid points of its non-"parallel" axes


@dataclass(frozen=True)
class StepBytes:
    total: int
    by_space: dict = field(default_factory=dict)  # "vmem" / "smem" / ... -> bytes
    limit_space: Optional[str] = None  # the space the limit bounds
    limit_bytes: Optional[int] = None
    limit_source: str = ""  # "default" | "vmem_limit_bytes"

    def to_json(self) -> dict:
        return {"bytes": self.total, "by_space": dict(self.by_space), "limit_space": self.limit_space,
                "limit_bytes": self.limit_bytes, "limit_source": self.limit_source}


def _rules(backend: str) -> str:
    return "tpu" if backend in ("tpu", "generic") else backend


def _space(op: Operand, rules: str) -> Optional[str]:
    """The on-chip space the operand occupies, or None when it stays off chip."""
    space = (op.memory_space or "default").lower()
    if space in _OFF_CHIP.get(rules, ()):
        return None
    if space == "default":
        return {"tpu": "vmem", "mosaic_gpu": "smem"}.get(rules, "default")
    return space


def block_copies(layout: CallLayout, op: Operand) -> int:
    """How many copies of a block one grid step keeps on chip (see the module docstring)."""
    rules = _rules(layout.backend)
    if rules == "tpu":
        if not layout.grid:
            return 1
        if op.trivial_window and _space(op, rules) == "vmem":
            return 1
        return op.buffer_count if op.buffer_count is not None else 2
    if rules == "mosaic_gpu":
        steps = layout.sequential_steps
        return max(1, min(layout.max_concurrent_steps, steps) if steps is not None else layout.max_concurrent_steps)
    return 1


def step_bytes(layout: CallLayout) -> StepBytes:
    """The bytes one grid step of this call holds on chip, by memory space."""
    rules = _rules(layout.backend)
    by_space: dict[str, int] = {}

    def add(op: Operand, copies: int) -> None:
        space = _space(op, rules)
        if space is not None:
            by_space[space] = by_space.get(space, 0) + op.nbytes * copies

    for op in layout.blocks:
        add(op, block_copies(layout, op))
    for op in layout.scratch:
        add(op, 1)
    for op in layout.index:
        add(Operand(op.shape, op.bits, "smem"), 1)
    total = sum(by_space.values())
    if rules == "tpu":
        if layout.vmem_limit_bytes is not None:
            return StepBytes(total, by_space, "vmem", int(layout.vmem_limit_bytes), "vmem_limit_bytes")
        return StepBytes(total, by_space, "vmem", TPU_SCOPED_VMEM_DEFAULT, "default")
    if rules == "mosaic_gpu":
        return StepBytes(total, by_space, "smem", MOSAIC_GPU_SMEM_DEFAULT, "default")
    return StepBytes(total, by_space)


def entry_bytes(calls: Optional[list[dict]]) -> Optional[int]:
    """The largest per-step footprint among an entry's traced calls (``pallas_call_infos``
    entries with an ``"on_chip"`` record); None when none was counted."""
    counted = [c["on_chip"]["bytes"] for c in calls or () if c.get("on_chip")]
    return max(counted) if counted else None


def footprint_record(before: Optional[list[dict]], after: Optional[list[dict]]) -> Optional[dict]:
    """``{"before_bytes": N, "after_bytes": M}`` for the verdict, or None when a side has none."""
    b, a = entry_bytes(before), entry_bytes(after)
    if b is None or a is None:
        return None
    return {"before_bytes": b, "after_bytes": a}


def format_bytes(n: int) -> str:
    """Binary units: ``512 B``, ``1.5 KiB``, ``288 KiB``, ``8.0 MiB``, ``40 MiB``."""
    if n < KiB:
        return f"{n} B"
    for unit, size in (("GiB", 1024 * MiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= size or unit == "KiB":
            x = n / size
            return f"{x:.1f} {unit}" if round(x, 1) < 10 else f"{x:.0f} {unit}"
    raise AssertionError  # pragma: no cover


def over_limit(o: Optional[dict]) -> bool:
    """Does an ``on_chip`` record hold more in its limited space than its limit allows?"""
    return bool(o and o.get("limit_bytes") and o["by_space"].get(o["limit_space"], 0) > o["limit_bytes"])


def limit_phrase(o: dict) -> str:
    """``TPU's default scoped VMEM limit of 16 MiB (...)`` for an ``on_chip`` record with a limit."""
    n = format_bytes(o["limit_bytes"])
    if o["limit_source"] == "vmem_limit_bytes":
        return f"the {n} its pltpu.CompilerParams(vmem_limit_bytes=...) allows"
    if o["limit_space"] == "vmem":
        return (f"TPU's default scoped VMEM limit of {n} (v4, v5e, v5p; 32 MiB on v6e, v7x: libtpu's"
                " --xla_tpu_scoped_vmem_limit_kib, which pltpu.CompilerParams(vmem_limit_bytes=...) raises"
                " per kernel, jax 0.12 jax/_src/pallas/mosaic/core.py)")
    return (f"Mosaic GPU's shared memory limit of {n} per block (compute capability 9.0 / 10.x, as jax 0.12"
            " jax/experimental/mosaic/gpu/core.py assumes without a device)")
