"""A whole-ref write before the loop that the loop overwrites block by block.

    o_ref[...] = jnp.zeros(o_ref.shape, o_ref.dtype)      # before the loop
    def body(i, c):
        o_ref[pl.ds(i * bs, bs), :] = f(x_ref[pl.ds(i * bs, bs), :])   # first touch of o_ref

When every iteration's first touch of `o_ref` writes its whole block, and the iterations'
blocks cover all of `o_ref`, nothing ever reads what the statement wrote: it is dead, and it goes
with the loop (kept, it would run on every grid step and write the block the step overwrites).
Only for a loop that runs unconditionally: under `pl.when` the statement's value is the output
wherever the condition fails. A statement whose value the loop reads, or that writes anything
else, stays what it was: a write before the loop, refused.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from pallas_fix.analysis.effects.model import statement_writes
from pallas_fix.core.plans import Refuse
from pallas_fix.rewrite.proofs.bounds import Bounds
from pallas_fix.rewrite.kernel.scratch_temps import first_write, whole_dim
from pallas_fix.rewrite.text.syntax import code


@dataclass
class DeadStore:
    stmt: cst.SimpleStatementLine
    ref: str
    overwrite: cst.Subscript  # the loop body's first write of the ref


def overwritten_stores(analysis, region) -> list[DeadStore]:
    """The statements before the loop `ref[...] = value` that write nothing else, whose ref the
    body overwrites before anything else reads it (blocks and coverage: `confirm_dead_stores`)."""
    found = []
    for stmt in region.before:
        target = _whole_store(stmt)
        if target is None:
            continue
        ref = target.value.value  # type: ignore[union-attr]
        writes = statement_writes(analysis, region.site, [stmt])
        if any(w.ref != ref or w.node is not target for w in writes):
            continue
        overwrite = first_write(analysis.ctx, region, ref, outside=frozenset({id(stmt)}))
        if overwrite is not None:
            found.append(DeadStore(stmt, ref, overwrite))
    return found


def _whole_store(stmt: cst.CSTNode):
    """The target of `ref[...] = value` (or `ref[:, :] = value`) alone on its line."""
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1 or not isinstance(stmt.body[0], cst.Assign):
        return None
    targets = stmt.body[0].targets
    target = targets[0].target if len(targets) == 1 else None
    if not (isinstance(target, cst.Subscript) and isinstance(target.value, cst.Name)):
        return None
    return target if all(whole_dim(el.slice) for el in target.slice) else None


def confirm_dead_stores(ctx, stores: list[DeadStore], blocks, cs, trip: cst.BaseExpression) -> None:
    """Each overwrite is a lifted window of the ref, whole in its other dims, and the new axis's
    blocks (block `i` at step `i`, `trip` of them) tile the kernel's view of the ref exactly."""
    for store in stores:
        line = ctx.span(store.stmt).line
        block = next((b for b in blocks if b.param == store.ref), None)
        dims = next((d for sub, d in block.subscripts if sub is store.overwrite), None) if block is not None else None
        if dims is None or any(n not in dims and not whole_dim(el.slice) for n, el in enumerate(store.overwrite.slice)):
            raise Refuse(
                f"the kernel writes `{store.ref}` before the loop (line {line}) and the loop does not overwrite "
                "whole blocks of it; after lifting the write would run on every grid step"
            )
        full = cs.kernel_shape_dim(store.ref, block.dim)
        if full is None or not _tiles(cs, block, trip, full):
            raise Refuse(
                f"the kernel writes `{store.ref}` before the loop (line {line}), which the loop overwrites block by "
                f"block; pallas-fix cannot prove the `{code(trip)}` blocks of `{code(block.size)}` cover dim {block.dim}"
                f"{f' (`{code(full)}`)' if full is not None else ''}, so the write may not be dead; "
                + (f"assert `{code(full)} % {code(block.size)} == 0` before the pallas_call" if full is not None
                   else "make the trip count cover the dim exactly")
            )


def _tiles(cs, block, trip: cst.BaseExpression, full: cst.BaseExpression) -> bool:
    """`trip` blocks of `block.size`, block `i` at step `i`, make exactly `full`: `full // size` or
    `pl.cdiv(full, size)` where `size` provably divides `full`, or a product the prover equates."""
    if block.index.axes != {"new": 1} or block.index.offset != 0 or block.index.symbolic or block.squeezed:
        return False
    bounds = Bounds(cs)
    size, whole = bounds.poly(block.size), bounds.poly(full)
    quotient = _quotient(cs, trip)
    if quotient is not None and bounds.poly(quotient[0]) == whole and bounds.poly(quotient[1]) == size:
        return bounds.prover.divides(size, whole)
    covered = bounds.poly(trip) * size
    return bounds.prover.nonneg(covered - whole) and bounds.prover.nonneg(whole - covered)


def _quotient(cs, trip: cst.BaseExpression):
    """(num, den) of `num // den` or `pl.cdiv(num, den)`; None otherwise."""
    if isinstance(trip, cst.BinaryOperation) and isinstance(trip.operator, cst.FloorDivide):
        return trip.left, trip.right
    if isinstance(trip, cst.Call) and len(trip.args) == 2 and (cs.ctx.imports.qualify(trip.func) or "").endswith(".cdiv"):
        return trip.args[0].value, trip.args[1].value
    return None
