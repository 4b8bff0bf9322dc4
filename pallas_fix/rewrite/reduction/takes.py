"""Which loops R2 (lift-reduction) takes: a carry, a ref written at a place every iteration
shares (both a reduction, PF102), or a trip count that reads the program id (R2's guarded full
axis runs the steps past the bound as no-ops, carry or not). The rest are R1's."""

from __future__ import annotations

from pallas_fix.core.model import IndexUse, LoopInfo, Origin
from pallas_fix.core.plans import Refuse
from pallas_fix.rewrite.kernel.ref_access import ref_accesses
from pallas_fix.rewrite.loops.regions import loop_region


def is_reduction(analysis, loop: LoopInfo, uses: list[IndexUse]) -> bool:
    """The loops R2's planner takes (the rest are R1's): a carry, an output accumulated in place,
    or a trip count that depends on pl.program_id (a tail block's fewer chunks, causal rows):
    R2's axis runs the full length and skips the steps past the bound, carry or not."""
    return iterations_depend(analysis, loop, uses) or _bounded_by_program_id(analysis, loop, uses)


def iterations_depend(analysis, loop: LoopInfo, uses: list[IndexUse]) -> bool:
    """A carry, or a ref written at a place every iteration shares: a reduction (PF102)."""
    return loop.carries or _accumulates(analysis, loop, uses)


def _bounded_by_program_id(analysis, loop: LoopInfo, uses: list[IndexUse]) -> bool:
    region = _region(analysis, loop, uses)
    return region is not None and trip_reads_program_id(region)


def trip_reads_program_id(region) -> bool:
    """The loop's upper bound is a traced function of pl.program_id (a causal row, a tail block)."""
    upper = region.env.value(region.loop.upper)
    return upper.dynamic and upper.origin is Origin.PROGRAM_ID


def _accumulates(analysis, loop: LoopInfo, uses: list[IndexUse]) -> bool:
    region = _region(analysis, loop, uses)
    if region is None:
        return False
    try:
        return any(g.written and not g.lifted for g in ref_accesses(analysis, region, loop).values())
    except Refuse:
        return False


def _region(analysis, loop: LoopInfo, uses: list[IndexUse]):
    """The loop's region in its kernel as R2 reads it, or None where R2 cannot read one."""
    site = uses[0].kernel_site
    if site is None or site.kernel is None:
        return None
    try:
        return loop_region(analysis, site, loop, reduction=True)
    except Refuse:
        return None
