"""Windows written after `...` whose dim the call site settles.

Analysis cannot count the dims a `...` stands for, so it marks every window after one as having
an unknown dim (`IndexUse.after_ellipsis`). Where the call site states the rank of the kernel's
view of the ref (its BlockSpec's dims less the squeezed ones, or the operand's rank; not a rank
counted from the kernel's own indexing, only a lower bound) and that rank equals the index's
entries, the `...` stands for exactly one dim: every entry's position is its dim, which is all
the planners assume, so the mark comes off (`x_ref[..., pl.ds(k * bk, bk)]` on a 2-D block, the
K loop of a matmul). A `...` standing for no dim or for several keeps the mark, and its window
is refused asking for the dims spelled out.

May import core, analysis and the rewrite room callsite."""

from __future__ import annotations

from typing import Optional

from pallas_fix.core.model import KernelSite
from pallas_fix.rewrite.callsite.reading import CallSite, CallSiteError


def settle_ellipsis_dims(analysis) -> None:
    """Clear the unknown-dim mark of each window after a `...` that fills exactly one dim."""
    ranks: dict[tuple[int, str], Optional[int]] = {}
    for use in analysis.uses:
        if not use.after_ellipsis or use.kernel_site is None:
            continue
        key = (id(use.kernel_site), use.ref_name)
        if key not in ranks:
            ranks[key] = _view_rank(analysis, use.kernel_site, use.ref_name)
        if ranks[key] is not None and ranks[key] == use.positions:
            # In place: the loops, findings and plans hold these uses by identity.
            use.starred = use.after_ellipsis = False


def _view_rank(analysis, site: KernelSite, ref: str) -> Optional[int]:
    """The rank the call site states; not one counted from the kernel's indexing or shown by the
    examples' trace, which other calls need not share (CallSite.counted_ranks, .hypotheses)."""
    try:
        cs = CallSite(analysis.ctx, site, analysis.detection.envs.get(site.kernel))
        rank = cs.kernel_rank(ref)
    except CallSiteError:
        return None
    return None if cs.counted_ranks or cs.hypotheses else rank
