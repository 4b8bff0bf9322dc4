"""The rule table: every code, in an explicit list of rule modules, and how an index gets its code.

A dynamic index gets exactly one PF1xx code: the rules are tried in `ORDER` and the first that
claims the index wins, so a one-element start inside a fori_loop is PF107 (the GPU interpret mode
error) rather than PF101.

The PF2xx rules are kernel-level: rules/gpu_interpret/kernel_rules.py produces their findings (a whole kernel, a call
site or a BlockSpec is at fault, not one index), so they claim no index and are not in `ORDER`.
They fire when the module uses `plgpu.InterpretGPUParams` / `force_gpu_interpret_mode`, or under
`--target gpu-interpret`. rules/gpu_interpret/hazards.py keeps the jax versions each was seen on.

The PF3xx rules are about what compiles on the chip and claim no index either: PF301 is reported
by verification, from what it traced on an example call (pallas_fix/verify/judge/footprint_findings.py),
with each verdict; PF302 (a window Mosaic cannot prove aligned) by the static check
(rules/on_chip/pf302_tpu_unaligned_window.py).
"""

from __future__ import annotations

from pallas_fix.analysis.loops.windows import Window
from pallas_fix.core.model import IndexUse
from pallas_fix.rules.dynamic_index.pf101_independent_loop_slice import RULE as PF101
from pallas_fix.rules.dynamic_index.pf102_reduction_loop_slice import RULE as PF102
from pallas_fix.rules.dynamic_index.pf103_program_id_slice import RULE as PF103
from pallas_fix.rules.dynamic_index.pf104_traced_constant_start import RULE as PF104
from pallas_fix.rules.dynamic_index.pf105_data_dependent_start import RULE as PF105
from pallas_fix.rules.dynamic_index.pf106_non_block_window import RULE as PF106
from pallas_fix.rules.dynamic_index.pf107_non_integer_start import RULE as PF107
from pallas_fix.rules.dynamic_index.pf108_traced_integer_array_index import RULE as PF108
from pallas_fix.rules.dynamic_index.pf109_traced_start import RULE as PF109
from pallas_fix.rules.gpu_interpret.pf201_gpu_interpret_program_id import RULE as PF201
from pallas_fix.rules.gpu_interpret.pf202_gpu_interpret_blockspec import RULE as PF202
from pallas_fix.rules.gpu_interpret.pf203_gpu_interpret_tpu_memory_space import RULE as PF203
from pallas_fix.rules.gpu_interpret.pf204_gpu_interpret_integer_array_index import RULE as PF204
from pallas_fix.rules.gpu_interpret.pf205_gpu_interpret_scalar_prefetch import RULE as PF205
from pallas_fix.rules.gpu_interpret.pf206_gpu_interpret_vmap import RULE as PF206
from pallas_fix.rules.on_chip.pf301_on_chip_footprint_over_limit import RULE as PF301
from pallas_fix.rules.on_chip.pf302_tpu_unaligned_window import RULE as PF302
from pallas_fix.rules.rule import Rule

__all__ = ["Rule", "RULES", "ORDER", "classify", "describe", "unknown_codes"]

# Every rule, one module each; the table is this explicit list, not registration on import.
RULES: dict[str, Rule] = {
    r.code: r
    for r in (PF101, PF102, PF103, PF104, PF105, PF106, PF107, PF108, PF109,
              PF201, PF202, PF203, PF204, PF205, PF206, PF301, PF302)
}

# PF1xx precedence: the first rule that claims an index gives its code (see above). PF109
# claims every index, so it is last.
ORDER: list[str] = ["PF107", "PF106", "PF108", "PF105", "PF101", "PF102", "PF103", "PF104", "PF109"]


def classify(use: IndexUse, window: Window) -> tuple[Rule, str]:
    for code in ORDER:
        r = RULES[code]
        msg = r.check(use, window)
        if msg is not None:
            return r, msg
    raise AssertionError("PF109 claims every index")


def describe(code: str) -> str:
    r = RULES.get(code.upper())
    if r is None:
        raise KeyError(code)
    return f"{r.code} ({r.name}, {r.severity})\n\n{r.doc}\n"


def unknown_codes(codes) -> list[str]:
    """The codes of a select / ignore list that name no rule: each must be a rule code or a
    prefix of one (`PF1`, `PF20`)."""
    return [c for c in codes if not any(code.startswith(c.upper()) for code in RULES)]
