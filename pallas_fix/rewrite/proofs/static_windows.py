"""Whether a window a codemod writes with static bounds (`x_ref[pl.ds(3, 8)]`, an unrolled
loop's windows) lies inside its ref as a pallas_call shapes it: proved, disproved, or unknown.
Imports the bounds prover and the call-site reader."""

from __future__ import annotations

from typing import Optional

from pallas_fix.analysis.loops.symbolic import Poly
from pallas_fix.core.model import KernelSite
from pallas_fix.rewrite.callsite.reading import CallSite
from pallas_fix.rewrite.callsite.spelling.operands import CallSiteError
from pallas_fix.rewrite.proofs.bounds import Bounds


def static_window_fits(analysis, site: KernelSite, param: str, dim: int, end: int) -> Optional[bool]:
    """Does a window ending at `end` lie inside dim `dim` of kernel parameter `param`, as this
    pallas_call shapes it? True when proved, False when the size is known and too small, None when
    the code does not tell."""
    kernel = site.kernel
    if kernel is None:
        return None
    cs = CallSite(analysis.ctx, site, analysis.detection.envs.get(kernel))
    try:
        size = cs.kernel_shape_dim(param, dim)
    except CallSiteError:
        return None
    if size is None:
        return None
    bounds = Bounds(cs)
    room = bounds.poly(size) - Poly.const(end)
    if bounds.prover.nonneg(room):
        return True
    if bounds.prover.nonneg(Poly.const(-1) - room):
        return False
    return None
