"""Whether a dynamic index can be rewritten where it is written: the element sits in the subscript
itself, or in an index tuple the edit can spell out there (`rewritable_in_place`,
`inlinable_tuple`), and why not when it cannot (`packed_refusal`, `atomic_refusal`). The uses
come from analysis.accesses; planners (analysis.loops.windows, rewrite, codemods) ask here."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from pallas_fix.core import names as N
from pallas_fix.analysis.context import ModuleContext, walk
from pallas_fix.analysis.values.provenance import Env
from pallas_fix.core.model import IndexUse


def rewritable_in_place(use: IndexUse) -> bool:
    """Can a planner rewrite the use's window by replacing the subscript element at its dim?
    Yes when the element is written there (`x_ref[pl.ds(...), :]`, `x_ref[sl, :]`), or when the
    subscript's one element is a tuple (in place, bound to a name or passed to a helper) whose
    window is its first dim and whose other dims are whole (`(pl.ds(r * bs, bs), slice(None))`):
    replacing that one element by the whole block is then the same rewrite. Any other tuple
    would lose its other dims."""
    sub = use.subscript
    if not isinstance(sub, cst.Subscript):
        return False  # an index passed to an atomic (`atomic_index_uses`): no subscript to edit
    if use.dim < len(sub.slice):
        written = sub.slice[use.dim].slice
        if written is use.element or (isinstance(written, cst.Index) and written.value is use.element):
            return True
    if len(sub.slice) != 1 or not isinstance(sub.slice[0].slice, cst.Index):
        return False
    if _packed_in_place(use) or _inlinable_tuple(use) is not None:
        return True  # the edit spells the tuple out in the subscript (rewrite.blocks.kernel_edits)
    if use.dim != 0:
        return False
    ctx = use.env.ctx  # type: ignore[attr-defined]
    holder = ctx.parent(use.element)
    packed = ctx.parent(holder) if isinstance(holder, cst.Element) else None
    if not isinstance(packed, (cst.Tuple, cst.List)) or packed.elements[0] is not holder:
        return False
    return all(_whole_dim(ctx, e.value) for e in packed.elements[1:])


def _packed_in_place(use: IndexUse) -> bool:
    """`k_ref[(0, pl.ds(t0, bt), slice(None))]`: the same subscript as `k_ref[0, pl.ds(t0, bt), :]`,
    with the use's element one of the tuple's own."""
    value = use.subscript.slice[0].slice.value  # type: ignore[attr-defined]
    return isinstance(value, cst.Tuple) and any(e.value is use.element for e in value.elements)


def _inlinable_tuple(use: IndexUse) -> Optional[cst.Tuple]:
    env: Env = use.env  # type: ignore[assignment]
    packed = inlinable_tuple(env.ctx, env, use.subscript, frozenset({use.dim}))
    return packed if packed is not None and any(e.value is use.element for e in packed.elements) else None


def inlinable_tuple(ctx: ModuleContext, env: Optional[Env], sub: cst.Subscript, dims: frozenset[int]) -> Optional[cst.Tuple]:
    """The tuple a one-name subscript `k_ref[idx]` stands for, when writing its elements in the
    subscript itself (all but `dims`, which a rewrite replaces) means the same: `idx` is bound
    once, to a tuple written in the function that holds the subscript, and the elements kept read
    no name the function (or one around it) binds (so they mean the same where the subscript is, and outlive the
    tuple's binding once it is dead)."""
    if env is None or len(sub.slice) != 1 or not isinstance(sub.slice[0].slice, cst.Index):
        return None
    name = sub.slice[0].slice.value
    if not isinstance(name, cst.Name) or env.owner(name.value) is not env or name.value in env.params:
        return None
    packed = env.single_assignment(name.value)
    if not isinstance(packed, cst.Tuple) or ctx.scope_of(packed) is not ctx.scope_of(sub):
        return None
    if any(isinstance(e, cst.StarredElement) for e in packed.elements):
        return None
    bound: set[str] = set()
    scope: Optional[Env] = env
    while scope is not None:  # names bound here or in an enclosing kernel function
        bound |= set(scope.bindings())
        scope = scope.parent
    for dim, e in enumerate(packed.elements):
        if dim not in dims and any(isinstance(n, cst.Name) and n.value in bound for n in walk(e.value)):
            return None
    return packed


def packed_refusal(use: IndexUse) -> str:
    """Why a window inside an index tuple cannot be rewritten where it is written."""
    sub = use.subscript
    if isinstance(sub, cst.Call):
        return atomic_refusal(use)
    name = sub.slice[0].slice.value if len(sub.slice) == 1 and isinstance(sub.slice[0].slice, cst.Index) else None
    env: Env = use.env  # type: ignore[assignment]
    if isinstance(name, cst.Name) and env.owner(name.value) is env and isinstance(env.single_assignment(name.value), cst.Tuple):
        return (f"its index tuple `{name.value}` holds, beside the window, an index that reads a name the kernel "
                f"binds, so it cannot be spelled out in the subscript; write the indices in the subscript itself")
    return ("its index tuple is built elsewhere (a helper's parameter, another function) and has other dims "
            "that are not whole (`slice(None)`); write the slices in the subscript itself")


def _whole_dim(ctx: ModuleContext, expr: cst.BaseExpression) -> bool:
    """`slice(None)`: the whole of a dim, in a tuple of indices."""
    return (
        isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name) and expr.func.value == "slice"
        and len(expr.args) == 1 and isinstance(expr.args[0].value, cst.Name) and expr.args[0].value.value == "None"
    )


def atomic_refusal(use: IndexUse) -> str:
    """Why an index passed to an atomic (`atomic_index_uses`) stays as it is."""
    call: cst.Call = use.subscript  # type: ignore[assignment]
    name = N.dotted(call.func) or "the atomic"
    return (f"`{name}` scatters into the whole `{use.ref_name}` at positions the kernel computes (its index "
            f"argument), as atomics are meant to: programs may hit the same element, so no BlockSpec block can "
            f"stand for the positions it writes; it stays an access of the whole array")
