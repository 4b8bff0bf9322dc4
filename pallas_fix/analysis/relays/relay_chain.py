"""Kernels handed to their pallas_call through a chain of launcher helpers (issue 28):

    def make_pallas_call(kernel, n_in, out_shape, config, grid):
        kwargs = {"grid": grid, "in_specs": whole_specs(n_in), "out_specs": ..., "out_shape": out_shape}
        return pl.pallas_call(kernel, **kwargs)

    def launch(name, kernel, out_shape, grid, args):
        call = make_pallas_call(kernel, len(args), out_shape, config, grid)
        return call(*args)

    launch("fwd", _fwd_kernel, [jax.ShapeDtypeStruct(...), ...], (B, N), (q, k, v))

Discovery follows the kernel out through the chain (passed_in.relayed, KernelSite.relayed_by). The
grid, out_shape and operands each kernel runs with are what its outermost call passes, handed on
untouched (or only measured with `len`) by every helper: `forward_chain` points the site's keywords
at those arguments, and finds the call that runs the returned pallas_call (`call(*args)`). Specs,
which each kernel windows its own way, are threaded as a Pallas author would: each helper of the
chain takes `in_specs` / `out_specs` parameters and hands them on, the innermost using them where
its own specs stood, defaulting to what it did before (rewrite.callsite.spec_params), and the lift
writes them at the outermost call. A chain the lift cannot thread (a decorator, `*args` in a call of
the chain, a name the parameters would shadow, specs other than whole arrays) is not forwarded, and
kernel_entry refuses its fixes, saying why.

A spec list written `whole_specs(n)`, a module function every return of which is a list of
`pl.BlockSpec(memory_space=...)` with no block shape, counts as every operand whole on Triton:
Triton lowers a ref of any memory space to a pointer into the array in global memory, so the whole
array and a block both load from there, the block's offset moving from the kernel's index into the
index_map; nothing is copied. On other backends (TPU's `pl.ANY` stays in HBM, copied by hand) such a
spec is read as written, and refused."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from pallas_fix.analysis.context import ModuleContext, walk
from pallas_fix.analysis.relays.passed_in import (
    FORWARDABLE, THREADABLE, argument_for, calls_of, chain_value, outer_call, own_names, param_default, partial_target,
)
from pallas_fix.analysis.relays.splat_dict import splat_problem
from pallas_fix.analysis.effects.syntax import param_names
from pallas_fix.core import names as N
from pallas_fix.core.model import Backend, KernelSite


def chain_functions(ctx: ModuleContext, site: KernelSite) -> list[cst.FunctionDef]:
    """The helper holding the pallas_call, then each function holding a call of the chain, outwards
    (the last is the one the outermost call runs)."""
    calls = chain_calls(site)
    found = [ctx.enclosing_function(site.call), *(ctx.enclosing_function(c) for c in calls[:-1])]
    return [fn for fn in found if fn is not None]


def chain_calls(site: KernelSite) -> list[cst.Call]:
    """The calls of the chain, innermost (`passed_by`) first."""
    return [site.passed_by, *reversed(site.relayed_by)] if site.passed_by is not None else []


def forward_chain(ctx: ModuleContext, site: KernelSite) -> None:
    """Point the grid, out_shape and spec keywords of a kernel handed on through a chain of helpers
    at what the outermost call passes, and mark the spec keywords to thread through the chain
    (KernelSite.thread); leave the site unforwarded when some keyword cannot be taken so, saying
    why in `site.relay_issue`."""
    site.relay_issue = _forward_chain(ctx, site)


def _forward_chain(ctx: ModuleContext, site: KernelSite) -> str:
    fns = chain_functions(ctx, site)
    calls = chain_calls(site)
    if len(fns) != len(calls) or any(fn.decorators for fn in fns) or site.grid_spec is not None:
        return "a helper of the chain is decorated or nested, or the call takes a grid_spec"
    if any(a.star for c in calls for a in c.args) or splat_problem(ctx, site.call) is not None:
        return "a call of the chain passes `*args` / `**kwargs`, or the pallas_call gets `**` settings pallas-fix cannot read"
    invocation = _chain_invocation(ctx, site) if site.invocation is None else site.invocation
    if invocation is None or not all(a.star == "*" and isinstance(a.value, cst.Name) and chain_value(ctx, site, a.value)[0] is not None
                                     for a in invocation.args):
        return ("the operands do not reach the pallas_call as one `*args` tuple the outermost call passes (`call(*args)` "
                "on what the pallas_call's helper returns)")
    for key, _value, tests in site.conditional_settings:
        if key in THREADABLE:  # the lift's parameter would be passed beside the dict's entry, or stand in on no run
            return (f"its {key} is set only under `if {ctx.code(tests[0]).strip()}` (line {ctx.span(tests[0]).line}), "
                    "where a spec parameter handed down the chain cannot take its place; write it in the dict literal")
    taken = set().union(*(own_names(ctx, fn) for fn in fns))
    keywords, forwarded, thread = dict(site.keywords), [], []
    for key in FORWARDABLE:
        arg = keywords.get(key)
        how = _spec_form(ctx, site, arg) if key in THREADABLE else None
        if how == "thread" and key in taken:
            return f"a helper of the chain binds a name `{key}` of its own, which a new spec parameter would shadow"
        if how == "thread":
            keywords.pop(key, None)  # every operand whole, as without the keyword: the lift writes it at the call
            forwarded.append(key)
            thread.append(key)
            continue
        value = arg.value.orelse if how == "threaded" else arg.value if arg is not None else None
        passed, reached = chain_value(ctx, site, value) if isinstance(value, cst.Name) else (None, False)
        default = _outer_default(ctx, site, value) if passed is None and reached else ""
        if passed is None and reached and how == "threaded" and default not in ("none", "no_block_spec"):
            # `whole if in_specs is None else in_specs` is the whole arrays only for None: another default runs
            return (f"its {key} parameter defaults to `{default or '?'}` where the outermost call leaves it out, not "
                    "None: that call runs with those specs, not the whole arrays; pass the specs at the call")
        if default == "no_block_spec" or (how == "threaded" and default == "none"):
            keywords.pop(key)  # the threaded parameter left at its default: whole operands, as the helper writes them
            forwarded.append(key)
        elif passed is not None:
            keywords[key] = next(a for a in outer_call(site).args if a.value is passed)
            forwarded.append(key)
        elif arg is not None:
            what = "spec list other than absent or whole arrays on Triton (`whole_specs(n)`)" if key in THREADABLE else key
            return (f"its {what} `{ctx.code(arg.value).strip()}` is not a parameter every helper hands on untouched from "
                    "the outermost call")
    if not all(key in forwarded for key in THREADABLE):  # (every branch above forwards a spec key or returns)
        return "the spec lists cannot be handed on through the chain"
    site.keywords, site.forwarded, site.thread, site.invocation = keywords, tuple(forwarded), tuple(thread), invocation
    return ""


def _outer_default(ctx: ModuleContext, site: KernelSite, name: cst.Name) -> str:
    """The default of the parameter of the function the outermost call runs that the chain hands
    on down as `name` (the outermost call leaving it out: chain_value's (None, True)):
    "no_block_spec" for `pl.no_block_spec`, "none" for None, else its code; "" when not found."""
    fns, calls = chain_functions(ctx, site), chain_calls(site)
    expr: cst.BaseExpression = name
    for fn, call in zip(fns, calls):
        if not isinstance(expr, cst.Name) or ctx.enclosing_function(expr) is not fn:
            return ""
        if call is calls[-1]:
            default = param_default(fn, expr.value)
            if default is None:
                return ""
            if ctx.imports.is_(default, N.NO_BLOCK_SPEC):
                return "no_block_spec"
            return "none" if isinstance(default, cst.Name) and default.value == "None" else ctx.code(default).strip()
        expr = argument_for(fn, call, expr.value)
    return ""


def chain_problem(ctx: ModuleContext, site: KernelSite) -> Optional[str]:
    """Why the chain does not say which kernel its pallas_call runs, or None: every function of the
    chain but the outermost one is called once, by the chain, and read nowhere else; the outermost is
    only called, each call passing a def of the module by name (or bound with functools.partial)."""
    fns, calls = chain_functions(ctx, site), chain_calls(site)
    for fn, call in zip(fns, calls):
        name = fn.name.value
        mine = calls_of(ctx, fn)
        reads = [n for n in walk(ctx.scope_of(fn)) if isinstance(n, cst.Name) and n.value == name and n is not fn.name
                 and all(n is not c.func for c in mine) and ctx.resolve_def(name, n) is fn]
        if reads:
            return f"`{name}` is also read other than called (line {ctx.span(reads[0]).line})"
        if fn is not fns[-1] and (len(mine) != 1 or mine[0] is not call):
            return f"`{name}` is called {len(mine)} times, not only by `{ctx.code(calls[calls.index(call) + 1].func)}`"
    return None


def passing_chain(ctx: ModuleContext, site: KernelSite) -> list[cst.Arg]:
    """The arguments of the outermost calls that pass the kernels in (each call of the function the
    outermost call runs), for a chain with no problem."""
    fns = chain_functions(ctx, site)
    if not fns or site.kernel_expr is None:
        return []
    top, name = fns[-1], _kernel_param(ctx, site)
    out = []
    for call in calls_of(ctx, top):
        value = argument_for(top, call, name) if name is not None else None
        arg = next((a for a in call.args if a.value is value), None)
        if arg is not None:
            out.append(arg)
    return out


def _kernel_param(ctx: ModuleContext, site: KernelSite) -> Optional[str]:
    """The name of the outermost helper's parameter the kernel arrives in."""
    expr = partial_target(ctx, site.kernel_expr) if site.kernel_expr is not None else None
    for call in chain_calls(site)[:-1]:
        holder = ctx.enclosing_function(expr) if isinstance(expr, cst.Name) else None
        value = argument_for(holder, call, expr.value) if holder is not None else None
        if not isinstance(value, cst.Name):
            return None
        expr = value
    return expr.value if isinstance(expr, cst.Name) else None


def _spec_form(ctx: ModuleContext, site: KernelSite, arg: Optional[cst.Arg]) -> Optional[str]:
    """"thread": absent, or every operand whole (`whole_specs(n)` on Triton): the chain can take
    spec parameters; "threaded": `whole_specs(n) if in_specs is None else in_specs`, what the
    threading wrote, `in_specs` a parameter defaulting to None; None: anything else."""
    if arg is None:
        return "thread"
    value = arg.value
    if _whole_list(ctx, site, value):
        return "thread"
    if (isinstance(value, cst.IfExp) and isinstance(value.orelse, cst.Name) and _whole_list(ctx, site, value.body)
            and isinstance(value.test, cst.Comparison) and len(value.test.comparisons) == 1
            and isinstance(value.test.comparisons[0].operator, cst.Is) and isinstance(value.test.left, cst.Name)
            and value.test.left.value == value.orelse.value and ctx.code(value.test.comparisons[0].comparator).strip() == "None"):
        return "threaded"
    return None


def _whole_list(ctx: ModuleContext, site: KernelSite, value: cst.BaseExpression) -> bool:
    """`whole_specs(n, ...)` on Triton, a module function that returns only lists of
    `pl.BlockSpec(memory_space=...)` with no block shape: the whole array per operand (see above)."""
    if site.backend is not Backend.TRITON or not isinstance(value, cst.Call) or not isinstance(value.func, cst.Name):
        return False
    fn = ctx.resolve_def(value.func.value, value)
    if fn is None or fn.decorators or ctx.scope_of(fn) is not ctx.module:
        return False
    returns = [n for n in walk(fn.body) if isinstance(n, cst.Return) and ctx.enclosing_function(n) is fn]
    return bool(returns) and all(_whole_items(ctx, r.value) for r in returns)


def _whole_items(ctx: ModuleContext, value: Optional[cst.BaseExpression]) -> bool:
    if isinstance(value, cst.ListComp):
        return _placed_whole(ctx, value.elt) and not value.for_in.ifs and value.for_in.inner_for_in is None
    if isinstance(value, cst.List):
        return all(not isinstance(e, cst.StarredElement) and _placed_whole(ctx, e.value) for e in value.elements)
    return False


def _placed_whole(ctx: ModuleContext, spec: cst.BaseExpression) -> bool:
    """`pl.BlockSpec(memory_space=...)`: no block shape, no index_map."""
    return (isinstance(spec, cst.Call) and ctx.imports.is_(spec.func, N.BLOCK_SPEC) and len(spec.args) == 1
            and spec.args[0].keyword is not None and spec.args[0].keyword.value == "memory_space")


def _chain_invocation(ctx: ModuleContext, site: KernelSite) -> Optional[cst.Call]:
    """`return pl.pallas_call(...)` in the helper, whose call `call = make_pallas_call(...)` is bound
    once and run once (`call(*args)`) in the function holding it, or run at once
    (`make_pallas_call(...)(*args)`): that run."""
    helper = ctx.enclosing_function(site.call)
    returned = ctx.parent(site.call)
    if helper is None or not isinstance(returned, cst.Return):
        return None
    call = site.passed_by
    parent = ctx.parent(call)
    if isinstance(parent, cst.Call) and parent.func is call:
        return parent
    if not (isinstance(parent, cst.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0].target, cst.Name)):
        return None
    name, scope = parent.targets[0].target.value, ctx.scope_of(call)
    if len(ctx.assignments(name, scope)) != 1 or name in param_names(scope):
        return None
    reads = [n for n in walk(scope) if isinstance(n, cst.Name) and n.value == name and n is not parent.targets[0].target]
    runs = [ctx.parent(n) for n in reads if isinstance(ctx.parent(n), cst.Call) and ctx.parent(n).func is n]
    return runs[0] if len(reads) == 1 and len(runs) == 1 else None


def chain_note(ctx: ModuleContext, site: KernelSite) -> str:
    """What a lift that threads specs through a chain changes besides the kernel's windows, for the
    fix's description: the helpers' new parameters, and whole `memory_space` specs become blocks."""
    if not site.relayed_by or not site.thread:
        return ""
    names = " then ".join(f"`{fn.name.value}`" for fn in reversed(chain_functions(ctx, site)))
    keys = " / ".join(site.thread)
    whole = site.backend is Backend.TRITON  # threaded spec entries are whole lists only there (_spec_form)
    return (f"; {names} take {keys} parameters defaulting to None (their own specs, as before, for every call passing "
            "none), and this kernel's call passes its blocks" + (
                ": on Triton a whole `memory_space` spec and a block are both a pointer into the array in global memory, "
                "the block's offset moving from the kernel's index into its index_map; nothing is copied" if whole else ""))
