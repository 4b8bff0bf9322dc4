"""An output that gets a block must be written before it is read, in every grid step.

Pallas copies an output block out of a grid step, never in: the block a step sees starts
uninitialised (the TPU interpreter fills it with NaN), whatever the HBM array holds. The
original kernel's whole output ref is different: with `input_output_aliases` it holds the aliased
input, and one step reads what an earlier one wrote. So `o_ref[rows] = f(o_ref[rows])`, an
`o_ref[rows] += ...` before any write, or a read of the output under a condition stops being the
same kernel once `o_ref` is blocked (traps/loop_bounds_aliased_second_half). A step that first
writes its whole block and then reads it back is unchanged, and is kept.
"""

from __future__ import annotations

from typing import Callable, Iterable

import libcst as cst

from pallas_fix.analysis.context import ModuleContext, walk
from pallas_fix.core.plans import Refuse
from pallas_fix.rewrite.kernel.ref_access import AccessGroup, is_write
from pallas_fix.rewrite.kernel.scratch_temps import whole_dim
from pallas_fix.rewrite.text.statements import body_statements
from pallas_fix.rewrite.text.syntax import code


def check_written_before_read(
    ctx: ModuleContext, fn: cst.CSTNode, ref: str, subscripts: Iterable[cst.Subscript],
    block_dims: Callable[[cst.Subscript], set[int]], aliased: bool,
) -> None:
    """Refuse unless every read of the output `ref` (among `subscripts`, all its accesses) comes
    after a top-level statement of `fn` that writes `ref`'s whole block from a value not reading
    it. `block_dims(sub)`: the dims of `sub` that are the moving block window."""
    subs = list(subscripts)
    reads = [s for s in subs if _reads(ctx, s)]
    if not reads:
        return
    first, whole = _first_write(fn, subs, block_dims)
    inside = {id(n) for n in walk(fn)}
    if first is not None and all(
        id(r) in inside and _after(ctx, r, first) and (whole or _same_window(r, first)) for r in reads
    ):
        return
    read = min(reads, key=lambda s: (ctx.span(s).line, ctx.span(s).column))
    held = "the aliased input (input_output_aliases)" if aliased else "what earlier iterations wrote"
    raise Refuse(
        f"`{ref}` is read (line {ctx.span(read).line}) before the step writes its whole block; an output "
        f"block starts uninitialised in every grid step (Pallas copies outputs out, never in), while the "
        f"original's whole `{ref}` holds {held}. "
        f"{'Read the input it aliases instead' if aliased else 'Keep the value in a local'}, or write the block first"
    )


def check_group_written_before_read(ctx: ModuleContext, fn: cst.CSTNode, group: AccessGroup, aliased: bool) -> None:
    """check_written_before_read for a loop's accesses of one output (R1, R2): every access,
    its lifted ones moving along the dims of their loop uses."""
    check_written_before_read(ctx, fn, group.ref, [*group.subscripts, *group.unlifted_accesses],
                              lambda s: {u.dim for u in group.uses.get(id(s), [])}, aliased)


def _reads(ctx: ModuleContext, sub: cst.Subscript) -> bool:
    """A load: a subscript that is not written (ref_access.is_write: a view handed to a call is
    taken for a write, as copies are), or the target of `+=`, which reads before it writes."""
    parent = ctx.parent(sub)
    return (isinstance(parent, cst.AugAssign) and parent.target is sub) or not is_write(ctx, sub)


def _first_write(fn, subs: list[cst.Subscript], block_dims) -> tuple[cst.Subscript | None, bool]:
    """The target of the first top-level statement of `fn` touching the ref, when that statement
    is `ref[window] = value` with `value` not reading the ref; and whether the window is the
    whole block (else only reads of that same window are covered)."""
    if not isinstance(fn, cst.FunctionDef):
        return None, False
    ids = {id(s) for s in subs}
    for stmt in body_statements(fn):
        if not any(id(n) in ids for n in walk(stmt)):
            continue
        if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assign)):
            return None, False
        assign = stmt.body[0]
        target = assign.targets[0].target if len(assign.targets) == 1 else None
        if not isinstance(target, cst.Subscript) or id(target) not in ids or any(id(n) in ids for n in walk(assign.value)):
            return None, False
        dims = block_dims(target)
        return target, all(i in dims or whole_dim(el.slice) for i, el in enumerate(target.slice))
    return None, False


def _same_window(read: cst.Subscript, write: cst.Subscript) -> bool:
    return code(read) == code(write)


def _after(ctx: ModuleContext, node: cst.CSTNode, first: cst.CSTNode) -> bool:
    a, b = ctx.span(node), ctx.span(first)
    return (a.line, a.column) > (b.line, b.column)
