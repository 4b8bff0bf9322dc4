"""Find every pallas_call site in a module and the kernel function it runs."""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional

import libcst as cst

from pallas_fix.core import names as N
from pallas_fix.analysis.context import ModuleContext, walk
from pallas_fix.analysis.relays.passed_in import forward_keywords, passed_kernels, relayed
from pallas_fix.analysis.discovery.kernel_forms import factory_kernel, forwarded_call
from pallas_fix.analysis.discovery.reaching import reaching_value
from pallas_fix.analysis.discovery.variants import picked_kernels, variant_sites
from pallas_fix.analysis.relays.relay_chain import forward_chain
from pallas_fix.analysis.relays.splat_dict import dict_keywords, made_keywords, splat_dict, splatted_settings
from pallas_fix.analysis.relays.static_test import test_value
from pallas_fix.core.model import Backend, KernelSite

# pallas_call's positional parameters, in order.
_PALLAS_CALL_POSITIONAL = ("kernel", "out_shape")


def discover(ctx: ModuleContext, backend_override: Optional[Backend] = None,
             where: Optional[Callable[[cst.Call], bool]] = None) -> list[KernelSite]:
    """Every site of the module; with `where`, only those whose pallas_call it accepts (the
    language server skips the calls of units it carries over, and the positions they would cost)."""
    sites: list[KernelSite] = []
    for node in ctx.nodes_of(cst.Call):
        if where is not None and not where(node):  # type: ignore[arg-type]
            continue
        if ctx.imports.is_(node.func, N.PALLAS_CALL):  # type: ignore[attr-defined]
            site = _direct_site(ctx, node)
        elif ctx.imports.is_(node.func, N.KERNEL_ENTRY):  # type: ignore[attr-defined]
            site = _direct_site(ctx, node)
            site.entry = ctx.code(node.func).strip()  # type: ignore[attr-defined]
        elif _is_partial_of_pallas_call(ctx, node):
            site = _decorator_site(ctx, node)
        else:
            continue
        if site is None:
            continue
        site.backend, site.backend_reason = _backend(ctx, site, backend_override)
        for each in _passed_in_sites(ctx, site, backend_override):
            sites += variant_sites(ctx, each)
    return sites


def _settle_conditional(ctx: ModuleContext, site: KernelSite, override: Optional[Backend]) -> None:
    """Settings the call gets only under an `if` (analysis.relays.splat_dict): one whose tests
    the source fixes as true (static_test, through the chain of calls that hands the kernel on) is
    a keyword; any other leaves the call's settings, and a backend they would name, unknown."""
    unread = []
    for key, value, tests in site.conditional_settings:
        verdicts = [test_value(ctx, site, t) for t in tests]
        if all(v is True for v in verdicts):
            site.keywords.setdefault(key, cst.Arg(value=value, keyword=cst.Name(key)))
        elif not any(v is False for v in verdicts):
            unread.append((key, tests[0]))
    site.backend, site.backend_reason = _backend(ctx, site, override)
    if unread and site.backend is Backend.UNKNOWN:
        key, test = unread[0]
        site.backend_reason = (f"{key} is set only under `if {ctx.code(test).strip()}` (line {ctx.span(test).line}), "
                               "a test pallas-fix cannot read (use --backend)")


def _passed_in_sites(ctx: ModuleContext, site: KernelSite, backend_override: Optional[Backend]) -> list[KernelSite]:
    """The site, or one site per kernel def the calls of the function holding the pallas_call
    pass in as a parameter (analysis.relays.passed_in), each analysed and none rewritten;
    where each call passes its own kernel, the grid and specs it passes with it are that
    kernel's (passed_in.forward_keywords)."""
    found: list[KernelSite] = []
    passes = 0
    for call, arg in passed_kernels(ctx, site):
        # `launch(kernel=_fwd)` handing its parameter on to the helper's call: through each relay
        for calls, value in relayed(ctx, call, arg) or [((), arg)]:
            each = dataclasses.replace(site, partial_kwargs=dict(site.partial_kwargs),
                                       partial_args=list(site.partial_args), passed_by=call, relayed_by=calls)
            _resolve_kernel(ctx, each, value, calls[0] if calls else call)  # `calls`: outermost first
            passes += 1
            if each.kernel is not None and all(each.kernel is not other.kernel for other in found):
                found.append(each)
    for each in found or [site]:
        if each.conditional_settings:  # read through the chain that hands the kernel on, where there is one
            _settle_conditional(ctx, each, backend_override)
    relays = any(each.relayed_by for each in found)
    if (len(found) > 1 or relays) and len(found) == passes:  # a kernel two calls pass would get one call's grid
        for each in found:
            # handed on through several helpers: read at the outermost call (analysis.relays.relay_chain)
            forward_chain(ctx, each) if each.relayed_by else forward_keywords(ctx, each)
    return found or [site]


def _is_partial_of_pallas_call(ctx: ModuleContext, call: cst.Call) -> bool:
    return (
        ctx.imports.is_(call.func, N.PARTIAL)
        and bool(call.args)
        and call.args[0].keyword is None
        and ctx.imports.is_(call.args[0].value, N.PALLAS_CALL)
    )


def _split_args(args, positional_names) -> tuple[dict[str, cst.Arg], list[cst.Arg]]:
    keywords: dict[str, cst.Arg] = {}
    extra: list[cst.Arg] = []
    pos = 0
    for arg in args:
        if arg.keyword is not None:
            keywords[arg.keyword.value] = arg
        elif arg.star:
            extra.append(arg)
        elif pos < len(positional_names):
            keywords[positional_names[pos]] = arg
            pos += 1
        else:
            extra.append(arg)
    return keywords, extra


def _direct_site(ctx: ModuleContext, call: cst.Call) -> Optional[KernelSite]:
    keywords, extra = _split_args(call.args, _PALLAS_CALL_POSITIONAL)
    conditional: tuple = ()
    for arg in extra:
        splat = splat_dict(ctx, arg, call)  # `**kwargs`, a dict literal: its entries, read where written
        settings = splat.settings if splat is not None else splatted_settings(ctx, arg, call) or []
        conditional += tuple(splat.conditional) if splat is not None else ()
        for setting in settings:
            keywords.setdefault(setting.keyword.value, setting)  # `**dict(grid=...)`: read as written there
    kernel_arg = keywords.pop("kernel", None)
    site = KernelSite(
        call=call,
        span=ctx.span(call),
        form="direct",
        kernel_name=None,
        kernel=None,
        keywords=keywords,
        enclosing=ctx.enclosing_function(call),
        conditional_settings=conditional,
    )
    if kernel_arg is not None:
        site.kernel_expr = kernel_arg.value
        _resolve_kernel(ctx, site, kernel_arg.value, call)
    _resolve_grid_spec(ctx, site)
    _find_invocation(ctx, site)
    return site


def _decorator_site(ctx: ModuleContext, call: cst.Call) -> Optional[KernelSite]:
    parent = ctx.parent(call)
    if not isinstance(parent, cst.Decorator):
        return None
    func = ctx.parent(parent)
    if not isinstance(func, cst.FunctionDef):
        return None
    keywords, _ = _split_args(call.args[1:], _PALLAS_CALL_POSITIONAL[1:])
    site = KernelSite(
        call=call,
        span=ctx.span(call),
        form="decorator",
        kernel_name=func.name.value,
        kernel=func,
        keywords=keywords,
        enclosing=ctx.enclosing_function(func),
        decorated=func,
    )
    _resolve_grid_spec(ctx, site)
    # The decorated name now *is* the pallas_call: its invocations run the kernel.
    scope = ctx.scope_of(func)
    for node in walk(scope if not isinstance(scope, cst.Lambda) else ctx.module):
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value == func.name.value:
            site.invocation = node
            break
    return site


def _resolve_kernel(ctx: ModuleContext, site: KernelSite, expr: cst.BaseExpression, at: cst.CSTNode) -> None:
    """The kernel def behind `expr`, through names and (nested) `functools.partial` bindings.
    The partials are met from the outermost inwards, and Python binds them the other way round:
    `partial(partial(k, a, bs=1), b, bs=2)` calls `k(a, b, bs=2)`, so an outer keyword wins over
    an inner one and inner positional arguments come first. A loop with a visited set: real code
    rebinds `kernel = functools.partial(kernel, ...)`, and no chain is followed twice."""
    seen: set[int] = set()
    while True:
        expr = ctx.resolve_value(expr, at)
        reached = reaching_value(ctx, expr, at) if isinstance(expr, cst.Name) else None
        if reached is not None:
            expr = at = reached
        if id(expr) in seen:
            return
        seen.add(id(expr))
        forwarded = forwarded_call(expr)
        if forwarded is not None:  # `lambda *refs: kernel(*refs, bs=8)`: a partial in effect
            site.forwarder = expr
            site.partial_kwargs.update({a.keyword.value: a.value for a in forwarded.args if a.keyword is not None
                                        and a.keyword.value not in site.partial_kwargs})
            expr, at = forwarded.func, forwarded
            continue
        if not (isinstance(expr, cst.Call) and ctx.imports.is_(expr.func, N.PARTIAL) and expr.args):
            break
        positional = []
        for arg in expr.args[1:]:
            if arg.keyword is not None:
                site.partial_kwargs.setdefault(arg.keyword.value, arg.value)
            elif arg.star == "**":  # `**shape()`, shape = functools.partial(dict, ...): its keywords, when readable
                made = made_keywords(ctx, arg, expr) or dict_keywords(ctx, arg, expr)
                for each in made or ():
                    site.partial_kwargs.setdefault(each.keyword.value, each.value)
                if made is None and isinstance(arg.value, cst.Name):  # perhaps a dict per arm: read per variant
                    site.partial_splats.append((arg, expr))
            elif not arg.star:
                positional.append(arg.value)
        site.partial_args[:0] = positional
        expr, at = expr.args[0].value, expr
    if isinstance(expr, cst.Name):
        site.kernel_name = expr.value
        site.kernel = ctx.resolve_def(expr.value, at)
        values = ctx.assignments(expr.value, ctx.scope_of(at)) if site.kernel is None else []
        if len(values) == 1 and isinstance(values[0], cst.Name) and ctx.resolve_def(values[0].value, values[0]):
            # A parameter the function assigns only on some runs (ContextIndex.resolve_value left
            # it): analysed as that def, its fixes refused (kernel_entry)
            site.kernel_name, site.maybe_argument = values[0].value, values[0]
            site.kernel = ctx.resolve_def(values[0].value, values[0])
        elif len(values) > 1:
            picked_kernels(ctx, site, values)
    elif isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name):
        made = factory_kernel(ctx, ctx.resolve_def(expr.func.value, at))
        if made is not None:
            site.kernel_name, site.kernel, site.factory = made.name.value, made, expr


def _resolve_grid_spec(ctx: ModuleContext, site: KernelSite) -> None:
    arg = site.keywords.get("grid_spec")
    if arg is None:
        return
    value = ctx.resolve_value(arg.value, site.call)
    if isinstance(value, cst.Call) and ctx.imports.is_(value.func, N.GRID_SPEC):
        site.grid_spec = value
        positional = ("num_scalar_prefetch", "grid", "in_specs", "out_specs", "scratch_shapes") if ctx.imports.is_(
            value.func, N.PREFETCH_GRID_SPEC
        ) else ("grid", "in_specs", "out_specs", "scratch_shapes")
        site.grid_spec_keywords, _ = _split_args(value.args, positional)


def _find_invocation(ctx: ModuleContext, site: KernelSite) -> None:
    call = site.call
    parent = ctx.parent(call)
    if isinstance(parent, cst.Call) and parent.func is call:
        site.invocation = parent
        return
    # `f = pl.pallas_call(...)` then `f(x)` in the same scope.
    if isinstance(parent, cst.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0].target, cst.Name):
        site.form = "stored"
        name = parent.targets[0].target.value
        scope = ctx.scope_of(call)
        rebound = len(ctx.assignments(name, scope)) > 1  # `f = pl.pallas_call(...); f(x); f = ...; f(y)`
        # the reads of the name that may see this call (all of them when it is bound once), and
        # those that surely do
        mentions = [n for n in walk(scope) if isinstance(n, cst.Name) and n.value == name and not isinstance(ctx.parent(n), cst.AssignTarget)]
        seen = {id(n): reaching_value(ctx, n, n) if rebound else call for n in mentions}
        reads = [n for n in mentions if seen[id(n)] is None or seen[id(n)] is call]
        calls = [r for r in reads if isinstance(ctx.parent(r), cst.Call) and ctx.parent(r).func is r and seen[id(r)] is call]
        if calls:
            site.invocation = ctx.parent(calls[0])
        other = next((r for r in reads if calls and r is not calls[0]), None)
        if other is not None:  # `f(q)` and `f(k)`, `jax.vmap(f)`: operands the rewrite's proofs did not see
            site.invocation_issue = (f"the stored pallas_call `{name}` is also used at line {ctx.span(other).line} "
                                     f"besides its call at line {ctx.span(calls[0]).line}; its operands' shapes are read "
                                     "from one call only: give each call its own pallas_call")
        if calls:
            return
    # `return pl.pallas_call(...)` from a builder function: invoked by the caller; leave it open.
    if not isinstance(parent, cst.Call):
        site.form = "stored"


def _backend(ctx: ModuleContext, site: KernelSite, override: Optional[Backend]) -> tuple[Backend, str]:
    if override is not None and override is not Backend.UNKNOWN:
        return override, "--backend"
    params = site.kw("compiler_params")
    if params is not None:
        params = ctx.resolve_value(params, site.call)
        if isinstance(params, cst.Call):
            if ctx.imports.is_(params.func, N.TPU_PARAMS):
                return Backend.TPU, "compiler_params is pltpu.CompilerParams"
            if ctx.imports.is_(params.func, N.MOSAIC_GPU_PARAMS):
                return Backend.MOSAIC_GPU, "compiler_params is plgpu.CompilerParams"
            if ctx.imports.is_(params.func, N.TRITON_PARAMS):
                return Backend.TRITON, "compiler_params is the Triton CompilerParams"
            if isinstance(params.func, cst.Name) and params.func.value == "dict":
                keys = {a.keyword.value for a in params.args if a.keyword is not None}
                found = _legacy_backend(keys)
                if found:
                    return found
        if isinstance(params, cst.Dict):
            keys = {
                e.key.evaluated_value
                for e in params.elements
                if isinstance(e, cst.DictElement) and isinstance(e.key, cst.SimpleString)
            }
            found = _legacy_backend(keys)
            if found:
                return found
    # Scratch memory spaces name the backend unambiguously.
    scratch = site.kw("scratch_shapes")
    if scratch is not None:
        for node in walk(scratch):
            if isinstance(node, cst.Call):
                if ctx.imports.is_(node.func, N.VMEM | N.SMEM_TPU):
                    return Backend.TPU, "scratch_shapes use pltpu memory spaces"
                if ctx.imports.is_(node.func, N.SMEM_GPU):
                    return Backend.MOSAIC_GPU, "scratch_shapes use plgpu.SMEM"
    imported = [
        (N.TPU, Backend.TPU),
        (N.MOSAIC_GPU, Backend.MOSAIC_GPU),
        (N.TRITON, Backend.TRITON),
    ]
    hits = [b for prefix, b in imported if ctx.imports.imports_any(prefix) or _uses_attr(ctx, prefix)]
    if len(hits) == 1:
        return hits[0], f"the module imports {hits[0].value} Pallas"
    return Backend.UNKNOWN, "no compiler_params or backend-specific import (use --backend)"


def _legacy_backend(keys: set) -> Optional[tuple[Backend, str]]:
    if "mosaic" in keys:
        return Backend.TPU, "compiler_params dict has a 'mosaic' entry"
    if "mosaic_gpu" in keys:
        return Backend.MOSAIC_GPU, "compiler_params dict has a 'mosaic_gpu' entry"
    if "triton" in keys:
        return Backend.TRITON, "compiler_params dict has a 'triton' entry"
    return None


def _uses_attr(ctx: ModuleContext, prefix: str) -> bool:
    # `pl.tpu.VMEM` style access without a separate import.
    tail = prefix.rsplit(".", 1)[-1]
    return any(
        local for local, full in ctx.imports.bindings.items() if full == N.PALLAS
    ) and f".{tail}." in ctx.source
