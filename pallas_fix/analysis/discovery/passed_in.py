"""Kernels passed in as a parameter of the function that holds their pallas_call:
`def call_kernel(*, kernel, grid): return pl.pallas_call(functools.partial(kernel, ...), ...)`,
called as `call_kernel(kernel=_dkdv_kernel, ...)` and `call_kernel(kernel=_dq_kernel, ...)`.
Discovery makes one site per kernel passed (KernelSite.passed_by); kernel_entry refuses their
fixes when the calls pass different kernels, since one pallas_call runs every kernel passed in,
and lets one kernel that every call passes be rewritten with that pallas_call."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from pallas_fix.analysis.context import ModuleContext, walk
from pallas_fix.analysis.effects.syntax import param_names
from pallas_fix.core import names as N
from pallas_fix.core.model import KernelSite


def passed_kernels(ctx: ModuleContext, site: KernelSite) -> list[tuple[cst.Call, cst.BaseExpression]]:
    """(call of the function holding the pallas_call, the expression it passes as the kernel)
    for each call in the module, when the site's kernel is a parameter of that function."""
    # Discovery followed the kernel argument through names and functools.partial layers
    # (discovery._resolve_kernel): a name it found no def for is the one to look for here.
    name = site.kernel_name
    if site.kernel is not None or site.kernel_expr is None or name is None:
        return []
    helper = ctx.enclosing_function(site.call)
    if helper is None or name not in param_names(helper):
        return []
    out = []
    for call in _calls_of(ctx, helper):
        arg = _argument_for(helper, call, name)
        if arg is not None:
            out.append((call, arg))
    return out


def _calls_of(ctx: ModuleContext, fn: cst.FunctionDef) -> list[cst.Call]:
    """Calls `fn(...)` by its name in the scope that defines it."""
    scope = ctx.scope_of(fn)
    return [
        node for node in walk(scope)
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value == fn.name.value
        and ctx.resolve_def(fn.name.value, node) is fn
    ]


def _argument_for(fn: cst.FunctionDef, call: cst.Call, param: str) -> Optional[cst.BaseExpression]:
    """The expression `call` passes for `fn`'s parameter `param` (by keyword or position)."""
    positional = [p.name.value for p in (*fn.params.posonly_params, *fn.params.params)]
    pos = 0
    for arg in call.args:
        if arg.star:
            return None  # `*args` / `**kwargs`: which one is the kernel is not written here
        if arg.keyword is not None:
            if arg.keyword.value == param:
                return arg.value
        elif pos < len(positional):
            if positional[pos] == param:
                return arg.value
            pos += 1
    return None


def passing_arguments(ctx: ModuleContext, site: KernelSite) -> Optional[list[cst.BaseExpression]]:
    """What each call of the function holding the pallas_call passes as its kernel parameter
    (the expressions that hand it the kernel), for a site discovery made per kernel passed; None
    when some use of that function does not say what it passes (`*args`, `**kwargs`, the
    function itself passed on or bound to another name) or passes no def of the module."""
    helper = ctx.enclosing_function(site.call)
    expr = site.kernel_expr
    while isinstance(expr, cst.Call) and ctx.imports.is_(expr.func, N.PARTIAL) and expr.args:
        expr = expr.args[0].value
    if site.passed_by is None or helper is None or not isinstance(expr, cst.Name) or expr.value not in param_names(helper):
        return None
    calls = _calls_of(ctx, helper)
    funcs = {id(call.func) for call in calls}
    for node in walk(ctx.scope_of(helper)):
        if (isinstance(node, cst.Name) and node.value == helper.name.value and id(node) not in funcs
                and node is not helper.name and ctx.resolve_def(node.value, node) is helper):
            return None  # the helper read other than called: who else it gets a kernel from is unknown
    found = [_argument_for(helper, call, expr.value) for call in calls]
    if any(arg is None or _def_behind(ctx, arg, call) is None for arg, call in zip(found, calls)):
        return None
    return found  # type: ignore[return-value]


def _def_behind(ctx: ModuleContext, expr: cst.BaseExpression, at: cst.CSTNode) -> Optional[cst.FunctionDef]:
    """The module's def an argument names, through names and functools.partial layers."""
    for _ in range(16):
        expr = ctx.resolve_value(expr, at)
        if not (isinstance(expr, cst.Call) and ctx.imports.is_(expr.func, N.PARTIAL) and expr.args):
            break
        expr, at = expr.args[0].value, expr
    return ctx.resolve_def(expr.value, at) if isinstance(expr, cst.Name) else None
