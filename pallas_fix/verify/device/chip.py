"""One example's original and rewrite compiled and run on the TPU: does each compile (and if not,
why, in words: VMEM OOM, tiling, alignment), does the rewrite agree with the original (or, where
the original does not compile, with the interpreters' reference), and how long one call of each
takes. Where the machine has a TPU (and JAX_PLATFORMS does not say cpu), verification runs this in
a second worker after the interpreters agreed (verify.runner); the interpreters stay on the CPU."""

from __future__ import annotations

import contextlib
import glob
import importlib.util
import os
from dataclasses import dataclass, field
from typing import Callable, Optional

from pallas_fix.verify.device.timing import classify_error, looped, time_per_call

_REPEAT = 3  # timed loops per kernel (median): enough for a verdict, the benchmark takes more


def tpu_visible() -> bool:
    """A TPU on this machine, told without importing jax: its device files and the libtpu package
    (verify.runner then runs the chip check in a worker of its own)."""
    if os.environ.get("JAX_PLATFORMS", "").strip().lower() in ("cpu", "gpu", "cuda"):
        return False
    if not (glob.glob("/dev/accel[0-9]*") or glob.glob("/dev/vfio/[0-9]*")):
        return False
    return importlib.util.find_spec("libtpu") is not None


def keep_on_cpu() -> None:
    """In the worker: every computation not placed elsewhere runs on the CPU (the interpreters
    compare there, in f32 as written), when the worker also sees a TPU."""
    import jax

    if jax.default_backend() != "cpu":
        jax.config.update("jax_default_device", jax.devices("cpu")[0])


def _tpu():
    import jax

    try:
        return jax.devices("tpu")[0]
    except RuntimeError:  # no TPU backend in this process
        return None


def tpu_chip() -> Optional[str]:
    """The TPU's kind (`TPU v5 lite`) when the worker sees one, else None."""
    device = _tpu()
    return device.device_kind if device is not None else None


@dataclass
class DeviceRun:
    chip: str
    original: str = "ok"  # "ok", or the failure in words (classify_error)
    rewrite: str = "ok"
    ms: dict = field(default_factory=dict)  # "original" / "rewrite" -> ms per call
    mismatch: Optional[str] = None  # why the rewrite's outputs differ from the compiled original's
    reference_rel_err: Optional[float] = None  # where the original fails: the rewrite against the reference

    @property
    def failure(self) -> Optional[str]:
        """Why the rewrite fails on the chip where the original did not (compile or outputs)."""
        if self.rewrite != "ok" and self.original == "ok":
            return f"compiled on the {self.chip}, the rewrite fails where the original runs: {self.rewrite}"
        if self.mismatch is not None:
            return f"compiled on the {self.chip}, the rewrite's outputs differ: {self.mismatch}"
        return None

    def note(self) -> str:
        """What the verdict says of the chip when nothing failed."""
        before, after = self.ms.get("original"), self.ms.get("rewrite")
        if self.original != "ok":
            ran = f"runs in {after:.3g} ms" if after is not None else "runs"
            if self.reference_rel_err is not None:
                ran += f", {self.reference_rel_err:.1e} from the interpreters' reference (relative)"
            return f"on the {self.chip} (compiled) the original fails ({self.original.split(':')[0]}) and the rewrite {ran}"
        if before is None or after is None:
            return f"on the {self.chip} (compiled) both run and agree"
        return (f"on the {self.chip} (compiled) both run and agree, {before:.3g} ms -> {after:.3g} ms per call "
                f"({before / after:.2f}x)")

    def to_json(self) -> dict:
        return {"chip": self.chip, "original": self.original, "rewrite": self.rewrite, "ms": dict(self.ms),
                "mismatch": self.mismatch, "reference_rel_err": self.reference_rel_err}


def run_on_chip(chip: str, original: Callable, rewrite: Callable, inputs: list, reference: Optional[list],
                compiled: Callable[[], contextlib.AbstractContextManager], leaves: Callable) -> DeviceRun:
    """`original` / `rewrite`: the example's entry bound to its dynamic inputs; `reference`: the
    interpreters' outputs of the original on `inputs` (output leaves), if known; `compiled()`: the context
    in which every pallas_call compiles instead of interpreting; `leaves(out)`: output leaves."""
    import jax

    from pallas_fix.verify.judge.compare import compare_leaves  # numpy: only in the worker

    run = DeviceRun(chip)
    outputs = {}
    device = _tpu()
    inputs = jax.device_put(inputs, device)
    for side, fn in (("original", original), ("rewrite", rewrite)):
        try:
            with compiled(), jax.default_device(device):
                outputs[side] = leaves(jax.block_until_ready(jax.jit(fn)(*inputs)))
                run.ms[side] = time_per_call(looped(fn, {}), inputs, _REPEAT)
        except Exception as e:  # a compile or run failure is the finding, not a crash
            setattr(run, side, classify_error(e))
    if run.rewrite == "ok" and run.original == "ok":
        bad = [r for r in compare_leaves(outputs["original"], outputs["rewrite"]) if not r.ok]
        run.mismatch = bad[0].reason if bad else None
    elif run.rewrite == "ok" and reference is not None:
        # No compiled original to compare with; the interpreters' reference runs XLA's ops,
        # whose f32 matmuls take bf16 passes on a TPU: report the distance, judge nothing.
        errs = [r.rel_err for r in compare_leaves(reference, outputs["rewrite"]) if r.rel_err is not None]
        run.reference_rel_err = max(errs, default=None)
    return run

