"""Kernel-level rules (PF2xx): what GPU interpret mode gets wrong or rejects in a kernel.

They fire only when the module's kernels may run in GPU interpret mode (see
`gpu_hazards.trigger`). Each finding sits on the node at fault: the `pl.program_id` call, the
BlockSpec, the scratch shape, the indexed ref, the grid spec, the `jax.vmap`. The hazards and the
jax versions they were seen on live in `gpu_hazards.HAZARDS`; each rule's check lives in its own
module (pf201_gpu_interpret_program_id.py, ...).

PF201 findings are anchored on their pallas_call (`site_key`): under `--target gpu-interpret` the
engine attaches the grid-to-loop plan for that site, since no dynamic index carries it when
`pl.program_id` only feeds a `pl.when`.
"""

from __future__ import annotations

from pallas_fix.analysis.result import Analysis
from pallas_fix.core.model import Finding
from pallas_fix.rules.gpu_interpret import pf201_gpu_interpret_program_id as pf201
from pallas_fix.rules.gpu_interpret import pf202_gpu_interpret_blockspec as pf202
from pallas_fix.rules.gpu_interpret import pf203_gpu_interpret_tpu_memory_space as pf203
from pallas_fix.rules.gpu_interpret import pf204_gpu_interpret_integer_array_index as pf204
from pallas_fix.rules.gpu_interpret import pf205_gpu_interpret_scalar_prefetch as pf205
from pallas_fix.rules.gpu_interpret import pf206_gpu_interpret_vmap as pf206
from pallas_fix.rules.gpu_interpret.hazards import trigger, version_note
from pallas_fix.rules.gpu_interpret.kernel_scope import Issue, KernelScope
from pallas_fix.rules.registry import RULES

# Checks of one pallas_call site, run for each site in this order; then the checks of the module.
SITE_CHECKS = (pf201.site_issues, pf202.site_issues, pf203.site_issues, pf205.site_issues)
MODULE_CHECKS = (pf204.module_issues, pf206.module_issues)


def kernel_findings(analysis: Analysis) -> list[Finding]:
    why = trigger(analysis)
    if why is None or analysis.ctx is None or analysis.detection is None:
        return []
    scope = KernelScope.of(analysis)
    return _findings(scope, _issues(scope), why)


def kernel_hazards(analysis: Analysis) -> list[Issue]:
    """Every PF2xx hazard of the module, whether or not anything says it runs in GPU interpret
    mode (gpu_interpret_policy asks this of Mosaic GPU kernels it presumes run there). One issue
    per code and node, like the findings."""
    if analysis.ctx is None or analysis.detection is None:
        return []
    return _issues(KernelScope.of(analysis))


def _issues(scope: KernelScope) -> list[Issue]:
    """One issue per code and node (a node reached from two sites is reported once)."""
    issues = [issue for site in scope.analysis.sites for check in SITE_CHECKS for issue in check(scope, site)]
    issues += [issue for check in MODULE_CHECKS for issue in check(scope)]
    seen: set[tuple[str, int]] = set()
    distinct = []
    for issue in issues:
        if (issue.code, id(issue.node)) not in seen:
            seen.add((issue.code, id(issue.node)))
            distinct.append(issue)
    return distinct


def _findings(scope: KernelScope, issues: list[Issue], why: str) -> list[Finding]:
    return [_finding(scope, issue, why) for issue in issues]


def _finding(scope: KernelScope, issue: Issue, why: str) -> Finding:
    message = f"{issue.message} [GPU interpret mode: {why}]"
    note = version_note(issue.code)
    if note:
        message += f" ({note})"
    return Finding(
        code=issue.code,
        message=message,
        path=scope.analysis.path,
        span=scope.ctx.span(issue.node),
        provenance="",
        origin="gpu_interpret",
        fixable=False,
        refusal=issue.refusal or f"no automatic fix; see `pallas-fix explain {issue.code}`",
        severity=RULES[issue.code].severity,
        kernel=issue.site.kernel_name if issue.site else None,
        anchor=issue.anchor,
    )
