"""Kernels passed in as a parameter of the function that holds their pallas_call:
`def call_kernel(*, kernel, grid): return pl.pallas_call(functools.partial(kernel, ...), ...)`,
called as `call_kernel(kernel=_dkdv_kernel, ...)` and `call_kernel(kernel=_dq_kernel, ...)`.
Discovery makes one site per kernel passed (KernelSite.passed_by); kernel_entry refuses their
fixes, since one pallas_call runs every kernel passed in."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from pallas_fix.analysis.context import ModuleContext, walk
from pallas_fix.analysis.effects.syntax import param_names
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
