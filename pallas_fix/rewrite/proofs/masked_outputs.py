"""An output a masked kernel writes in lockstep with the array its grid counts, sized by another
array. JAX's Triton norm backward kernels write `dw_ref` (`weight.shape[0]` long) at the column
window the grid steps over `x`'s columns (`pl.cdiv(n, block_n)` steps), each store masked at `n`
(`mask=cols < n_col`). The code never says `weight.shape[0] == n`; every caller passes it.

That equality is the one check a lift may write for a masked kernel (rewrite.proofs.bounds writes
no other there): with every store of the output masked at `n`, a call whose output is longer
gets a tail the original never writes (uninitialised memory) and a shorter one is written past
its end, so the check rejects no call whose result the original defines. With it, the output's
blocks are the ones the grid steps over `x`, the last one partial, as the lift already takes them
for `x`.

`masked_at` reads each access of the output: a store (`pl.store`, Triton's `plgpu.store`, or a
`.store` of the same family) whose `mask=` is, or has as an `&` conjunct, `idx < bound`, where `idx`
is the window's own range (`start + jnp.arange(size)`, the `pl.ds(start, size)` it indexes) and
`bound` reads at the call site as the count the grid divides. A load, an unmasked store, a mask
at another bound, or a range pallas-fix cannot match to the window is not read: the lift is
refused as before.
"""

from __future__ import annotations

from typing import Callable, Optional

import libcst as cst

from pallas_fix.analysis.context import ModuleContext
from pallas_fix.core import names as N
from pallas_fix.rewrite.callsite.spelling.operands import CallSiteError
from pallas_fix.rewrite.guards.shape_guards import candidates
from pallas_fix.rewrite.text.syntax import code
from pallas_fix.rewrite.text.translate import Translator


def masked_at(ctx: ModuleContext, subscripts: list, dim: int, bound_is_count: Callable[[cst.BaseExpression], bool]) -> bool:
    """Every access in `subscripts` (the ref's window subscripts, with the dims they touch) is a
    store masked at the count along `dim` (`bound_is_count` reads a kernel expression at the call
    site and compares it with the count)."""
    if not subscripts:
        return False
    for sub, _dims in subscripts:
        mask = _store_mask(ctx, sub)
        window = _window(ctx, sub, dim) if mask is not None else None
        if window is None or not any(_is_range(ctx, left, window) and bound_is_count(right) for left, right in _less_than(ctx, mask)):
            return False
    return True


def _store_mask(ctx: ModuleContext, sub: cst.CSTNode) -> Optional[cst.BaseExpression]:
    """The `mask=` of the store call `sub` is the target of (`plgpu.store(o_ref.at[w], v, mask=m)`)."""
    arg = ctx.parent(sub)
    call = ctx.parent(arg) if isinstance(arg, cst.Arg) else None
    if not (isinstance(call, cst.Call) and call.args and call.args[0] is arg and arg.keyword is None):
        return None
    name = ctx.imports.qualify(call.func) or ""
    if not (name.startswith(N.PALLAS + ".") and name.rsplit(".", 1)[-1] == "store"):
        return None
    return next((a.value for a in call.args if a.keyword is not None and a.keyword.value == "mask"), None)


def _window(ctx: ModuleContext, sub: cst.CSTNode, dim: int) -> Optional[tuple[str, str]]:
    """(start, size) of the window at `dim`, as code: `pl.ds(start, size)` or a range
    `start + jnp.arange(size)` used as an index (the Triton-port spelling)."""
    if not isinstance(sub, cst.Subscript) or dim >= len(sub.slice) or not isinstance(sub.slice[dim].slice, cst.Index):
        return None
    index = ctx.resolve_value(sub.slice[dim].slice.value, sub)
    if isinstance(index, cst.Call) and (ctx.imports.qualify(index.func) or "") in N.DS | N.SLICE and len(index.args) == 2:
        return code(ctx.resolve_value(index.args[0].value, sub)), code(ctx.resolve_value(index.args[1].value, sub))
    return _range(ctx, index, sub)


def _range(ctx: ModuleContext, expr: cst.BaseExpression, at: cst.CSTNode) -> Optional[tuple[str, str]]:
    """`start + jnp.arange(size)` (either way round) as (start, size) code."""
    if not (isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Add)):
        return None
    for start, ramp in ((expr.left, expr.right), (expr.right, expr.left)):
        ramp = ctx.resolve_value(ramp, at)
        if (isinstance(ramp, cst.Call) and ctx.imports.is_(ramp.func, N.ARANGE) and len(ramp.args) == 1
                and ramp.args[0].keyword is None):
            return code(ctx.resolve_value(start, at)), code(ctx.resolve_value(ramp.args[0].value, at))
    return None


def _is_range(ctx: ModuleContext, expr: cst.BaseExpression, window: tuple[str, str]) -> bool:
    return _range(ctx, ctx.resolve_value(_broadcast_base(expr), expr), expr) == window


def _less_than(ctx: ModuleContext, mask: cst.BaseExpression) -> list[tuple[cst.BaseExpression, cst.BaseExpression]]:
    """The `a < b` conjuncts of a mask (through names the kernel binds once, `&`, and `[None, :]`)."""
    expr = ctx.resolve_value(_broadcast_base(mask), mask)
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.BitAnd):
        return _less_than(ctx, expr.left) + _less_than(ctx, expr.right)
    if (isinstance(expr, cst.Comparison) and len(expr.comparisons) == 1
            and isinstance(expr.comparisons[0].operator, cst.LessThan)):
        return [(expr.left, expr.comparisons[0].comparator)]
    return []


def _broadcast_base(expr: cst.BaseExpression) -> cst.BaseExpression:
    """`m[None, :]` / `m[:, None]`: `m` (a broadcast selects no lanes)."""
    while isinstance(expr, cst.Subscript) and all(
            isinstance(e.slice, cst.Slice) and e.slice.lower is None and e.slice.upper is None and e.slice.step is None
            or isinstance(e.slice, cst.Index) and isinstance(e.slice.value, cst.Name) and e.slice.value.value == "None"
            for e in expr.slice):
        expr = expr.value
    return expr


def equal_count(bounds, block, trip: Optional[cst.BaseExpression], size_expr: cst.BaseExpression) -> bool:
    """Prove `block` of a masked kernel's output with the check `size == count` (the module
    docstring), adopting the check into `bounds` (rewrite.proofs.bounds.Bounds) and allowing the
    block its partial last step; False where the output is not so written, or no example keeps
    the check."""
    cs = bounds.cs
    slot = cs.slots.get(block.param)
    if slot is None or slot.kind != "out" or cs.aliased or block.squeeze or block.squeezed or cs.env is None:
        return False  # an aliased output's tail is the input's data, which a longer call keeps
    translator = Translator(cs.ctx, cs.site, cs.kernel_shape_dim, cs.kernel_rank)
    full = bounds.poly(size_expr)
    extents = [bounds.poly(bounds.extent(a, trip)) for a in block.index.axes]
    texts = (code(size_expr), code(block.size))
    for combo in candidates(bounds.symbols, bounds.prover.substitute, full, bounds.poly(block.size), extents, texts):
        if len(combo) != 1 or combo[0][0] != "equal":
            continue
        count = bounds.prover.substitute(combo[0][2])

        def is_count(expr: cst.BaseExpression, count=count) -> bool:
            try:
                at_call = translator(expr, cs.env)
            except CallSiteError:
                return False
            return at_call is not None and bounds.prover.substitute(bounds.poly(at_call)) == count

        if masked_at(cs.ctx, block.subscripts, block.dim, is_count) and _adopt(bounds, block, trip, size_expr, combo):
            return True
    return False


def _adopt(bounds, block, trip, size_expr: cst.BaseExpression, combo: tuple) -> bool:
    """Take the check of `combo` if it proves the blocks are the count's, partial last one and all.
    A call the original defines has the output exactly as long as the count (the module
    docstring): those are the good calls the check must keep (rewrite.proofs.necessity)."""
    (_kind, full, count, full_text, count_text), = combo
    why = (f"the kernel masks its stores to `{block.param}` at `{count_text}`: a longer `{full_text}` would keep a tail "
           "the original never writes, a shorter one is written past its end")
    partial = bounds.partial_ok
    bounds.partial_ok = partial | {(block.param, block.dim)}

    def proves(prover) -> bool:
        saved, bounds.prover = bounds.prover, prover
        try:
            return bounds.cdiv_axis(block, size_expr, trip) is not None
        finally:
            bounds.prover = saved

    try:
        bounds.choose([combo], [full - count, count - full], why, CallSiteError(why), proves)
    except CallSiteError:
        bounds.partial_ok = partial
        return False
    return True
