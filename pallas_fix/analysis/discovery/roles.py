"""What the parameters of each analysed function are, from the role the function plays.

A kernel's parameters are refs unless functools.partial or a default binds them; a loop body's
index is the loop's induction variable; a pl.when body has none; a run_scoped body takes refs;
a helper takes the values of the arguments it is called with.
"""

from __future__ import annotations

from typing import Callable, Optional

import libcst as cst

from pallas_fix.core import names as N
from pallas_fix.analysis.context import ModuleContext, walk
from pallas_fix.analysis.loops.loops import describe_loop
from pallas_fix.analysis.values.provenance import Env
from pallas_fix.analysis.values.values import REF, REFLIST, STATIC, Val
from pallas_fix.core.model import KernelSite, LoopInfo, Origin

Params = dict[str, Val]


def kernel_params(site: KernelSite) -> tuple[Params, dict[str, cst.BaseExpression]]:
    """(values, call-site expressions of the Python-valued ones) of a kernel's parameters."""
    fn = site.kernel
    assert fn is not None
    params: Params = {}
    exprs: dict[str, cst.BaseExpression] = {}
    positional = list(fn.params.posonly_params) + list(fn.params.params)
    for i, p in enumerate(positional):
        name = p.name.value
        if i < len(site.partial_args):
            exprs[name] = site.partial_args[i]
        elif name in site.partial_kwargs:
            exprs[name] = site.partial_kwargs[name]
        elif p.default is not None:
            exprs[name] = p.default
        params[name] = STATIC if name in exprs else REF
    for p in fn.params.kwonly_params:
        name = p.name.value
        params[name] = STATIC
        if name in site.partial_kwargs:
            exprs[name] = site.partial_kwargs[name]
        elif p.default is not None:
            exprs[name] = p.default
    if isinstance(fn.params.star_arg, cst.Param):
        params[fn.params.star_arg.name.value] = REFLIST
    if fn.params.star_kwarg is not None:
        params[fn.params.star_kwarg.name.value] = STATIC
    return params, exprs


def role_params(ctx: ModuleContext, loops: dict[cst.CSTNode, LoopInfo], fn, env: Env) -> Optional[Params]:
    """Parameters of a loop body, pl.when body or run_scoped body; None for any other function."""
    names = [p.name.value for p in fn.params.params]
    loop = loops.get(fn)
    if loop is not None:
        return _loop_body_params(ctx, loop, names, env)
    if isinstance(fn, cst.FunctionDef):
        for dec in fn.decorators:
            d = dec.decorator
            if ctx.imports.is_(d.func if isinstance(d, cst.Call) else d, N.PL_WHEN):
                return {}
    if _is_run_scoped_body(ctx, fn, env):
        return {n: REF for n in names}
    return None


def _loop_body_params(ctx: ModuleContext, loop: LoopInfo, names: list[str], env: Env) -> Params:
    idx = names.index(loop.index_name) if loop.index_name in names else 0
    # Parameters functools.partial binds take the partial's arguments, before the index or after
    # it (`partial(body, x_ref=x_ref)` for `def body(i, h, x_ref)`): the loop passes only the
    # index and one carry, so of the rest, those the partial leaves free have defaults.
    bound = _partial_bindings(ctx, loop.call, names, env)
    free = [n for n in names[idx + 1:] if n not in bound]
    carry = loop if len(names[idx + 1:]) == 1 else None  # one whole carry: maybe an induction variable
    params = {n: Val(Origin.TRACED, "unknown", f"the carry `{n}` of the loop", carry_loop=carry) for n in free[:1]}
    for n in free[1:]:
        params[n] = STATIC
    for n in names[:idx]:
        params[n] = bound.get(n, STATIC)
    for n, v in bound.items():
        params.setdefault(n, v)
    params[names[idx]] = Val(Origin.LOOP, "int", describe_loop(ctx, loop), loop=loop, is_index=True)
    # Loop bounds that are traced make the index take their origin too.
    lower = env.value(loop.lower) if loop.lower is not None else STATIC
    if lower.origin is Origin.REF_LOAD:
        params[names[idx]] = Val(Origin.REF_LOAD, "int", f"a loop index whose bounds are {lower.words}", loop=loop)
    return params


def _is_run_scoped_body(ctx: ModuleContext, fn, env: Env) -> bool:
    """Passed to pl.run_scoped / pl.core_map style helpers, or decorated by one."""
    name = fn.name.value if isinstance(fn, cst.FunctionDef) else None
    for node in walk(env.scope if not isinstance(env.scope, cst.Module) else ctx.module):
        if isinstance(node, cst.Call) and (ctx.imports.qualify(node.func) or "").endswith("run_scoped"):
            for a in node.args:
                if a.value is fn or (name and isinstance(a.value, cst.Name) and a.value.value == name):
                    return True
    if isinstance(fn, cst.FunctionDef):
        for dec in fn.decorators:
            d = dec.decorator
            if (ctx.imports.qualify(d.func if isinstance(d, cst.Call) else d) or "").endswith("run_scoped"):
                return True
    return False


def _partial_bindings(ctx: ModuleContext, call: cst.Call, names: list[str], env: Env) -> Params:
    """`lax.fori_loop(lo, hi, functools.partial(body, x_ref, bs=bs), init)`: what body's leading
    parameters are bound to, evaluated where the partial is written."""
    positional = [a for a in call.args if a.keyword is None and not a.star]
    fun = next((a.value for a in call.args if a.keyword is not None and a.keyword.value == "body_fun"), None)
    if fun is None and len(positional) > 2:
        fun = positional[2].value
    if not (isinstance(fun, cst.Call) and ctx.imports.is_(fun.func, N.PARTIAL)):
        return {}
    pos = [a for a in fun.args[1:] if a.keyword is None and not a.star]
    out: Params = {n: env.value(a.value) for n, a in zip(names, pos)}
    for a in fun.args[1:]:
        if a.keyword is not None:
            out[a.keyword.value] = env.value(a.value)
    return out


def bind_args(fn: cst.FunctionDef, call: cst.Call, caller: Env) -> Params:
    """A helper's parameters take the values of `call`'s arguments, evaluated in the caller."""
    params: Params = {}
    positional = list(fn.params.posonly_params) + list(fn.params.params)
    pos_args = [a for a in call.args if a.keyword is None and not a.star]
    for p, a in zip(positional, pos_args):
        params[p.name.value] = caller.value(a.value)
    starred = [a for a in call.args if a.star == "*"]
    if starred and all(caller.value(a.value).vtype == "reflist" for a in starred):
        # `kernel(idx, x_ref, *refs)` forwards the kernel's own refs: the parameters after the
        # written arguments receive refs (a dispatching kernel calling the variant it picks).
        for p in positional[len(pos_args):]:
            params[p.name.value] = REF
    for a in call.args:
        if a.keyword is not None:
            params[a.keyword.value] = caller.value(a.value)
    for p in positional + list(fn.params.kwonly_params):
        params.setdefault(p.name.value, STATIC)
    if isinstance(fn.params.star_arg, cst.Param):
        rest = [caller.value(a.value) for a in pos_args[len(positional):]]
        params[fn.params.star_arg.name.value] = REFLIST if rest and all(v.is_ref for v in rest) else STATIC
    return params


def unknown_params(fn: cst.FunctionDef | cst.Lambda, words: Callable[[str], str]) -> Params:
    """Parameters nothing tells us about: traced values, described by `words(name)`."""
    return {p.name.value: Val(Origin.TRACED, "unknown", words(p.name.value)) for p in fn.params.params}
