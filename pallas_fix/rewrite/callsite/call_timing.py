"""Do the sizes a rewrite writes at the pallas_call mean there what the kernel got?

A pallas_call is evaluated in one place and run in another. `call = pl.pallas_call(...)` evaluates
out_shape, grid and specs where it stands; the kernel gets the operands that `call(x)` passes,
and a kernel defined in the wrapper reads the wrapper's names when `call(x)` traces it. A size
the rewrite writes at the pallas_call (`x.shape[1]`, a `d` copied out of an out_shape or BlockSpec
bound earlier, a wrapper name the kernel reads) must hold there what the kernel saw in the
original. `x = jnp.pad(x, ...)` between the pallas_call and its invocation, or `d = d + pad`
between an out_shape's binding and the pallas_call, breaks that; each function here returns the
refusal's reason, naming the binding and what the user could change, or None when the value
is the same (analysis.same_value decides). `CallTiming` gives rewrite.callsite.CallSite the
checks its size readers make before they hand an expression out for writing.
"""

from __future__ import annotations

from typing import Optional

import libcst as cst

from pallas_fix.analysis.context import ModuleContext
from pallas_fix.analysis.relays.passed_in import free_names, outer_call, own_names
from pallas_fix.analysis.values.same_value import Change, bound_after, name_change, value_change
from pallas_fix.core.model import KernelSite
from pallas_fix.rewrite.callsite.spelling.grafts import source_parts
from pallas_fix.rewrite.callsite.spelling.operands import CallSiteError


class CallTiming:
    """Mixin of rewrite.callsite.CallSite (needs its `ctx` and `site`)."""

    ctx: ModuleContext
    site: KernelSite
    grafted: set[int]  # ids of nodes an out_shape's reading built (CallSite sets it first)

    def anchor(self, expr: Optional[cst.CSTNode] = None) -> cst.CSTNode:
        """Where `expr` is read as the pallas_call reads it (`call_anchor`)."""
        return call_anchor(self.ctx, self.site, expr)

    def args_visible_at_call(self) -> bool:
        """Can the call's arguments be named where pallas_call is written? (Not in the decorator
        form, nor when a builder function returns the pallas_call for someone else to call.)"""
        inv = self.site.invocation
        if inv is not None and self.site.relayed_by and self.site.forwarded:
            return True  # `call(*args)` of a chain: the operands are what the outermost call passes, where specs are written
        return inv is not None and self.ctx.scope_of(inv) is self.ctx.scope_of(self.site.call)

    def arg_at_call(self, arg: cst.BaseExpression, *, strict: bool = False) -> bool:
        """Does the operand `arg` written at the pallas_call name the array the kernel gets? Not
        when rebound in between (`call = pl.pallas_call(...); x = jnp.pad(x, ...); call(x)`),
        which `strict` raises as the refusal."""
        if not self.args_visible_at_call():
            return False
        if _loop_target(self.ctx, arg):
            return True  # `h` of `for h in hs:`, the member where its group's spec is written (rewrite.operand_groups checks `hs`)
        inv = self.site.invocation
        if not isinstance(arg, cst.Name) and not (inv is not None and inv.func is self.site.call):
            return False  # `self.w = ...` between the two binds no name pallas-fix could see
        reason = operand_change(self.ctx, self.site, arg)
        if reason is not None and strict:
            raise CallSiteError(reason)
        return reason is None

    def same_at_call(self, expr: cst.BaseExpression, what: str) -> cst.BaseExpression:
        """`expr` (part of `what`) to copy into the pallas_call; refused when a name in it is
        rebound between where it stands and the pallas_call. An expression an out_shape's
        reading built (`x.shape[0]` for a builder's `B`: CallSite.grafted) is asked for each
        part of the source it holds."""
        parts = source_parts(expr, self.in_tree) if id(expr) in self.grafted else [expr]
        for part in parts:
            reason = copied_change(self.ctx, self.site, part, what)  # type: ignore[arg-type]
            if reason is not None:
                raise CallSiteError(reason)
        return expr

    def in_tree(self, node: cst.CSTNode) -> bool:
        """Is `node` one of the module's own (not one a rewrite or reading built)?"""
        return node is self.ctx.module or self.ctx.parent(node) is not None


def operand_change(ctx: ModuleContext, site: KernelSite, arg: cst.BaseExpression,
                   at: Optional[cst.CSTNode] = None, where: str = "the pallas_call") -> Optional[str]:
    """Why the operand `arg`, written at `at` (`where`: the pallas_call, or the loop that builds a
    group's specs), might not be the array the kernel gets (`arg` stands in the invocation, or
    in the operand list it spreads)."""
    at = call_anchor(ctx, site, arg) if at is None else at
    change = value_change(ctx, arg, at, either_order=True)
    if change is None:
        return None
    at_line, arg_line = _line(ctx, at), _line(ctx, arg)
    if at_line <= arg_line:
        span = f"after {where} (line {at_line}) and before the call at line {arg_line} passes it"
    else:
        span = f"after the operand is taken (line {arg_line}) and before {where} (line {at_line})"
    return (f"`{_text(ctx, arg)}` {_rebound(change, _text(ctx, arg))} {span}: a size written at {where} from "
            f"`{_text(ctx, arg)}` would not be the size of the array the kernel gets; build the pallas_call after "
            "the array has its final shape (after padding), or compute its sizes from that array")


def call_anchor(ctx: ModuleContext, site: KernelSite, expr: Optional[cst.CSTNode] = None) -> cst.CSTNode:
    """Where `expr` is read as the pallas_call reads it: at the pallas_call, except what a
    helper's call passes in as the grid or specs (KernelSite.forwarded), read at that call,
    where it is written and the helper runs (`expr` None: what the forwarded keywords name)."""
    if not site.forwarded or site.passed_by is None:
        return site.call
    helper = ctx.enclosing_function(site.call)
    if expr is not None and helper is not None and any(a is helper for a in ctx.ancestors(expr)):
        return site.call
    return outer_call(site)  # through a chain of helpers (KernelSite.relayed_by): the outermost call


def copied_change(ctx: ModuleContext, site: KernelSite, expr: cst.BaseExpression, what: str) -> Optional[str]:
    """Why `expr`, a part of `what` (an out_shape or BlockSpec bound before the pallas_call),
    would mean something else copied into the pallas_call."""
    # A grid and specs the helper's calls pass in (KernelSite.forwarded) are written, and the
    # pallas_call evaluated, where that call stands.
    at = call_anchor(ctx, site)
    helper = ctx.enclosing_function(site.call) if at is not site.call else None
    if helper is not None and free_names(expr) & own_names(ctx, helper):
        return (f"`{_text(ctx, expr)}` in {what} (line {_line(ctx, expr)}) reads names of `{helper.name.value}`, and the "
                f"specs of this kernel are written at its call (line {_line(ctx, at)}), where the helper's names mean "
                f"nothing or something else; build {what} from values the call passes in to get this fix")
    change = value_change(ctx, expr, at)
    if change is None:
        return None
    return (f"`{_text(ctx, expr)}` in {what} (line {_line(ctx, expr)}) {_rebound(change, _text(ctx, expr))} before the pallas_call "
            f"(line {_line(ctx, at)}): written there, it would not be the size the kernel gets; build "
            f"{what} next to the pallas_call, or give the new value another name")


def closure_change(ctx: ModuleContext, site: KernelSite, name: str, at: Optional[cst.CSTNode] = None) -> Optional[str]:
    """Why the wrapper's `name`, which the kernel defined inside it reads when the call runs,
    means something else at `at` (the pallas_call, or a statement before it)."""
    at = site.call if at is None else at
    inv = site.invocation
    if inv is not None and ctx.scope_of(inv) is ctx.scope_of(at):
        change = name_change(ctx, name, at, inv)
        when = f"when the call at line {_line(ctx, inv)} runs it"
    else:
        change = bound_after(ctx, name, at)
        when = "when the pallas_call it returns runs"
    if change is None:
        return None
    return (f"the kernel reads `{name}` {when}, and `{name}` {_rebound(change, name)} after the pallas_call "
            f"(line {_line(ctx, site.call)}): written there, it would be the value before; build the pallas_call "
            "after the last binding of it, or pass the value to the kernel with functools.partial")


def _rebound(change: Change, text: str = "") -> str:
    """`is rebound at line N`, naming the name when the expression is more than that name."""
    name = f" (its `{change.name}`)" if change.name and change.name != text else ""
    if change.line is None:
        return f"may hold another value there{name}"
    return f"is rebound at line {change.line}{name}"


def _loop_target(ctx: ModuleContext, node: cst.CSTNode) -> bool:
    parent = ctx.parent(node)
    return isinstance(parent, (cst.For, cst.CompFor)) and parent.target is node


def _line(ctx: ModuleContext, node: cst.CSTNode) -> int:
    return ctx.span(node).line


def _text(ctx: ModuleContext, node: cst.CSTNode) -> str:
    return ctx.code(node).strip()
