"""What a lift does to a kernel's speed on TPU, as plain data and words every layer shares.

The model (the step-count model): a lift's cost on TPU is the grid steps it adds. Where the
original runs without a grid, or with whole arrays, the new grid pipelines the copies, and where
the original does not fit in VMEM the lift is what makes it compile; but where the original
already fits and is already pipelined over other grid axes, a lift multiplies its grid steps
(each with a fixed cost, and for a reduction a read-modify-write of its scratch state) and buys
only memory. Measured on a TPU v5e (jax 0.10.2, compiled; ../shared/docs/pallas-notes.md): such
rewrites ran at 0.47-0.91x the original's speed (bf16 K-loop matmuls 0.54-0.89x, flash attention
0.47-0.91x), none faster. (One kind of lift measured otherwise: an online softmax's strip-mined
lift with lane-dense statistics, at least as fast with 2 to 8 times the steps; judge.lift_cost
says when.)

A codemod marks its plan with `Pipelined` when the call it lifts is already gridded with
BlockSpecs (what the source says); verification then measures the footprint and the steps at the
example's shapes (pallas_fix/verify/judge/lift_cost.py), and `--apply` holds a lift that only
trades speed for memory unless `--lift-for-memory` asks for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

MODEL = "the step-count model"
MEASURED = "measured on a TPU v5e where the original fit and was pipelined: 0.47-0.91x its speed"
OPTION = "--lift-for-memory (or lift-for-memory = true in [tool.pallas-fix]) applies it"


@dataclass(frozen=True)
class Pipelined:
    """A lift of a call already pipelined on other axes: its grid had `axes` axes with BlockSpecs,
    and the lift adds an axis; `scratch`: each new step reads and writes scratch state (R2)."""

    axes: int
    scratch: bool = False
    # A strip-mined lift (R2): the words saying how many of the loop's windows each step walks
    windows: Optional[str] = None

    def note(self) -> str:
        """What the source alone says about the lift's speed (no example: no footprint)."""
        axes = "axis" if self.axes == 1 else "axes"
        per_step = ", each step reading and writing its scratch state" if self.scratch else ""
        if self.windows is not None:
            return (f"may trade speed for memory on TPU where the windows per step do not cover the loop: the call is"
                    f" already pipelined over {self.axes} grid {axes} and the lift multiplies its grid steps by the loop's"
                    f" trip count over the windows each step walks ({self.windows}){per_step}; speed at your sizes unknown"
                    f" without an example call")
        return (f"may trade speed for memory on TPU: the call is already pipelined over {self.axes} grid {axes} and"
                f" the lift multiplies its grid steps{per_step}; where the original fits on chip {MODEL} expects it"
                f" slower ({MEASURED}); speed at your sizes unknown without an example call")
