"""Is a kernel's body the whole of what its pallas_call runs, and is the pallas_call the only
thing that runs it? A rewrite changes the body and the call together, so it is sound only when

- no decorator stands between the def and the pallas_call (a decorator may run code, or write
  refs, around the body, once per grid step after a lift), except ones known to change nothing
  (`functools.wraps`, `jax.named_scope`); and
- nothing else in the module calls or passes the kernel function (another kernel calling it as a
  helper, a list of kernels, `jax.jit(kernel)`): that code would run the rewritten body without
  the rewritten call. Names bound to the kernel (`kern = functools.partial(kernel, bs=8)`) count
  as the kernel.

Other pallas_calls of the same kernel are counted separately (rewrite.common.check_single_call).
"""

from __future__ import annotations

from typing import Iterator, Optional

import libcst as cst

from pallas_fix.analysis.binders import is_label, paired, positional_names
from pallas_fix.analysis.context import ModuleContext, walk
from pallas_fix.analysis.relays.passed_in import partial_target, passing_arguments
from pallas_fix.analysis.discovery.reaching import reaching_value
from pallas_fix.analysis.relays.relay_chain import chain_problem, passing_chain
from pallas_fix.analysis.effects.calls import PURE_DECORATORS
from pallas_fix.analysis.effects.evaluator import scope_names
from pallas_fix.analysis.effects.syntax import param_names
from pallas_fix.core import names as N
from pallas_fix.core.model import KernelSite


def entry_problem(analysis, site: KernelSite, *, variants: bool = False) -> Optional[str]:
    """Why the kernel's body is not only run by this pallas_call, or None. `variants`: the caller
    plans each variant of a call against its own arm (rewrite.callsite.variant_arms), so a kernel
    picked per arm of a static `if` is not a reason."""
    ctx: ModuleContext = analysis.ctx
    kernel = site.kernel
    if kernel is None:
        return None
    decorator = _wrapping_decorator(ctx, site, kernel)
    if decorator is not None:
        return (
            f"kernel `{kernel.name.value}` is decorated with `@{ctx.code(decorator.decorator).strip()}`, so its body is "
            "not the whole kernel (the decorator may run code, or write refs, around it); pallas-fix only rewrites "
            "kernels whose body is all that runs"
        )
    if len(site.variants) > 1 and not variants and len({d.name.value for d in site.variants}) > 1:
        names = ", ".join(f"`{d.name.value}`" for d in site.variants)
        return (
            f"the pallas_call runs `{site.kernel_name}`, a name bound to one of {names} when the wrapper runs (a static "
            f"flag), and {_compared(analysis, {f'`{d.name.value}`': d for d in site.variants})}; pallas-fix rewrites one "
            "body with its one pallas_call and does not lift per variant. Give each variant its own pallas_call (the "
            "same flag choosing between them) to get this fix"
        )
    if len(site.variants) > 1 and not variants:
        lines = ", ".join(str(ctx.span(d).line) for d in site.variants)
        return (
            f"kernel `{kernel.name.value}` is defined {len(site.variants)} times in one scope (lines {lines}), so which "
            "body the pallas_call runs is chosen when the wrapper runs (a static flag), and "
            f"{_compared(analysis, {f'line {ctx.span(d).line}': d for d in site.variants})}; pallas-fix rewrites one "
            "body with its one pallas_call and does not lift per variant. Give each variant its own name and its own "
            "pallas_call (the same flag choosing between them) to get this fix"
        )
    if site.forwarder is not None and site.forwarder.params.params:
        # A lift may give the kernel refs of its own (scratch for a reduction's state), which a
        # lambda of fixed arity would not pass on.
        return (
            f"kernel `{kernel.name.value}` reaches its pallas_call through `{ctx.code(site.forwarder).strip()}`, a lambda "
            "that names the refs it forwards, so a ref the lift adds (scratch) would not reach the kernel; write "
            f"`lambda *refs: {kernel.name.value}(*refs, ...)` or `functools.partial({kernel.name.value}, ...)` to get this fix"
        )
    if site.forwarder is not None and site.forwarder is not site.kernel_expr:
        # A lambda bound before the call reads its keywords' names when it runs, not where it is
        # written: the partial keywords the lift reads could mean other values there. (Or one
        # inside another lambda or partial: the lift would edit a call it does not own.)
        where = "bound before the call" if isinstance(site.kernel_expr, cst.Name) else "inside another wrapper"
        return (
            f"kernel `{kernel.name.value}` reaches its pallas_call through `{ctx.code(site.forwarder).strip()}`, a lambda "
            f"{where} that forwards every ref to it, whose keywords are read when the call runs; write "
            f"`functools.partial({kernel.name.value}, ...)` with the same keywords, or the lambda in the pallas_call "
            "itself, to get this fix"
        )
    if site.entry is not None:
        return (
            f"kernel `{kernel.name.value}` runs under `{site.entry}`, which takes no BlockSpecs: every ref is the whole "
            "array and each grid cell picks its part by hand; pallas-fix rewrites pl.pallas_call kernels. Write it as a "
            "pl.pallas_call with a grid and BlockSpecs whose index_maps pick the same windows to get this fix"
        )
    if site.maybe_argument is not None:
        assign = ctx.parent(site.maybe_argument)
        param = ctx.code(assign.targets[0].target) if isinstance(assign, cst.Assign) else "a name"
        holder = ctx.enclosing_function(site.maybe_argument)
        return (
            f"kernel `{kernel.name.value}` reaches its pallas_call through `{param}`, a parameter of "
            f"`{holder.name.value if holder else 'the wrapper'}` that line {ctx.span(site.maybe_argument).line} "
            "assigns it only on some runs; on the others the same pallas_call runs the caller's kernel with the "
            f"BlockSpecs written for `{kernel.name.value}`. Give it its own pallas_call that names it to get this fix"
        )
    if site.relayed_by:
        chain = " then ".join(f"`{ctx.code(c.func)}` (line {ctx.span(c).line})" for c in (*site.relayed_by, site.passed_by))
        problem = chain_problem(ctx, site) if site.forwarded else None
        if not site.forwarded or problem is not None:
            why = f"{problem}, so the chain may run other kernels" if problem else (
                f"{site.relay_issue or 'a kernel reaches the pallas_call through more than one call'}, so the lift cannot "
                "give each kernel its own grid and specs through them")
            return (
                f"kernel `{kernel.name.value}` reaches its pallas_call through {chain}, helpers that hand it on as a "
                f"parameter, and {why}; the grid and specs a lift writes would serve every kernel those helpers pass. "
                "Give the kernel its own pallas_call, or pass it (and its specs) straight to the function holding the "
                "pallas_call, to get this fix"
            )
        return None  # each kernel planned against its own outermost call; what the chain shares is screened
    if site.passed_by is not None:
        problem = _passed_problem(analysis, site)
        if problem is not None:
            return problem
    dispatch = analysis.detection.dispatches.get(kernel) if analysis.detection is not None else None
    if dispatch is not None:
        call, options = dispatch
        names = ", ".join(f"`{name}`" for name in options)
        return (
            f"kernel `{kernel.name.value}` calls `{ctx.code(call.func)}` (line {ctx.span(call).line}), a name bound to "
            f"one of {names} when the kernel runs; one grid and one set of BlockSpecs would be "
            f"written for whichever the flag picks, and {_variants_compared(analysis, call, options)}. Give each "
            "variant its own kernel and pallas_call (the same flag choosing between them) to get this fix"
        )
    if site.decorated is kernel:
        return None  # the name is the pallas_call: calling it runs the call, not the body
    if site.factory is not None:
        # The kernel's sizes are the factory's parameters, bound at `make_kernel(...)`: a lift
        # would have to write them at the pallas_call through that call, and other calls of the
        # factory would get the rewritten body with their own sizes.
        return (
            f"kernel `{kernel.name.value}` is returned by the factory `{ctx.code(site.factory).strip()}` and closes over "
            "its parameters; pallas-fix rewrites kernels passed by name or through functools.partial: bind the sizes "
            f"with functools.partial(kernel, ...) instead of a factory to get this fix"
        )
    other = _other_use(ctx, analysis.sites, kernel)
    if other is not None:
        return (
            f"kernel `{kernel.name.value}` is also called or passed outside its pallas_call (line {ctx.span(other).line}: "
            f"`{_statement_text(ctx, other)}`); rewriting its body would change what that code runs"
        )
    return None


def _passed_problem(analysis, site: KernelSite) -> Optional[str]:
    """Why a kernel passed in as a parameter of the function holding its pallas_call cannot be
    rewritten with that call, or None: when every call passes this one kernel, the pallas_call
    runs it alone, as if it named it."""
    ctx: ModuleContext = analysis.ctx
    helper = ctx.enclosing_function(site.call)
    kernels = [s for s in analysis.sites if s.call is site.call and s.kernel is not None]
    if len(kernels) < 2:
        why = passing_arguments(ctx, site)[1]
        if not why:
            return None
        return (
            f"kernel `{site.kernel.name.value}` reaches its pallas_call as a parameter of `{helper.name.value}` (passed "
            f"on line {ctx.span(site.passed_by).line}), and {why}, so the one pallas_call may run other kernels, or "
            "this one with other bindings, too. Give the kernel its own pallas_call that names it, or pass it by name "
            "in every call of a helper local to the wrapper (its sizes bound inside the helper), to get this fix"
        )
    if all(s.forwarded for s in kernels) and not passing_arguments(ctx, site, own_specs=True)[1]:
        # Each call passes its kernel with its own grid and specs: one pallas_call per kernel, in
        # effect; what the calls still share is screened per plan (rewrite.callsite.forwarded).
        return None
    passed = ", ".join(f"`{s.kernel.name.value}` (line {ctx.span(s.passed_by).line})" for s in kernels if s.passed_by is not None)
    return (
        f"kernel `{site.kernel.name.value}` reaches its pallas_call as a parameter of `{helper.name.value}`, whose calls "
        f"pass {len(kernels)} kernels ({passed}), so the one pallas_call runs whichever each call passes in; "
        f"{_windows_compared(analysis, kernels)}. pallas-fix lifts a kernel passed in only when every call passes that "
        "one kernel. Give each kernel its own pallas_call that names it to get this fix"
    )


def _windows_compared(analysis, kernels: list[KernelSite]) -> str:
    """How the kernels passed in window their operands, where they differ: the pallas_call's one
    grid and set of BlockSpecs would have to serve every one of them."""
    windows = {each.kernel.name.value: _operand_windows(analysis, each) for each in kernels}
    positions = sorted({n for count, found in windows.values() for n in (*found, *range(count))})
    differ = [n for n in positions
              if len({found[n][1] if n in found else ("whole" if n < count else None) for count, found in windows.values()}) > 1]
    if not differ:
        return "their windows fall on the same operands the same way, but pallas-fix does not lift kernels passed in together"

    def how(n: int, name: str, count: int, found: dict) -> str:
        if n in found:
            return f"{' and '.join(sorted(found[n][1]))} in `{name}` (`{found[n][0]}`)"
        return f"whole in `{name}`" if n < count else f"no such operand in `{name}`"

    told = "; ".join(f"operand {n}: " + ", ".join(how(n, name, *w) for name, w in windows.items()) for n in differ[:3])
    more = f" and {len(differ) - 3} more" if len(differ) > 3 else ""
    return f"their windows differ ({told}{more}), so no one grid and set of BlockSpecs serves them all"


def _operand_windows(analysis, site: KernelSite) -> tuple[int, dict[int, tuple[str, frozenset[str]]]]:
    """(how many operands the kernel takes, operand position -> (the kernel's ref name, how it is
    windowed: "dim d by pl.program_id(a)" or "dim d by a loop index" ...)) for every operand the
    kernel takes a dynamic window of."""
    kernel = site.kernel
    params = positional_names(kernel)[len(site.partial_args):]
    found: dict[int, tuple[str, set[str]]] = {}
    for u in analysis.detection.uses if analysis.detection is not None else ():
        if u.kernel_site is site and u.ref_name in params:
            how = f"dim {u.dim} {_by(u)}"
            found.setdefault(params.index(u.ref_name), (u.ref_name, set()))[1].add(how)
    return len(params), {n: (name, frozenset(hows)) for n, (name, hows) in found.items()}


def _variants_compared(analysis, call: cst.Call, options: list[str]) -> str:
    """Whether the bodies a kernel picks when it runs take the same windows: one lift could
    serve them all only if they do, and a body not defined in the module cannot be compared."""
    ctx: ModuleContext = analysis.ctx
    missing = [f"`{name}`" for name in options if ctx.resolve_def(name, call) is None]
    if missing:
        return (f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not defined in this module, so whether "
                "every variant needs the same grid axis and blocks cannot be checked")
    compared = _compared(analysis, {f"`{name}`": ctx.resolve_def(name, call) for name in options})
    if compared.startswith("the variants take the same"):
        return f"{compared}, but pallas-fix does not lift windows in a body picked when the kernel runs"
    return compared


def _compared(analysis, bodies: dict) -> str:
    """Whether the bodies (label -> def) take the same windows, told per body: one lift could
    serve them all only if they do."""
    ctx: ModuleContext = analysis.ctx
    uses = analysis.detection.uses if analysis.detection is not None else ()
    windows = {label: frozenset(f"`{u.ref_name}` dim {u.dim} {_by(u)}" for u in uses
                                if u.function is fn or fn in set(ctx.ancestors(u.function)))
               for label, fn in bodies.items()}
    told = "; ".join(f"{label}: {', '.join(sorted(w)) or 'whole refs'}" for label, w in windows.items())
    return f"the variants take {'different' if len(set(windows.values())) > 1 else 'the same'} windows ({told})"


def _by(u) -> str:
    axis = u.provenance.program_id_axis
    return f"by pl.program_id({axis})" if axis is not None else f"by a {u.provenance.origin.value.replace('_', ' ')} index"


def _wrapping_decorator(ctx: ModuleContext, site: KernelSite, kernel: cst.FunctionDef) -> Optional[cst.Decorator]:
    """The first decorator applied to the kernel before the pallas_call sees it that is not
    known to leave the function as it is. In the decorator form only those below
    `@functools.partial(pl.pallas_call, ...)` wrap the body; those above wrap the call."""
    decorators = list(kernel.decorators)
    if site.decorated is kernel:
        at = next((n for n, d in enumerate(decorators) if d.decorator is site.call), -1)
        decorators = decorators[at + 1 :]
    for dec in decorators:
        expr = dec.decorator
        if isinstance(expr, cst.Call) and ctx.imports.is_(expr.func, N.PARTIAL) and expr.args:
            expr = expr.args[0].value  # `@partial(jax.named_call, name="k")` is `jax.named_call(k, name="k")`
        if ctx.imports.qualify(expr.func if isinstance(expr, cst.Call) else expr) not in PURE_DECORATORS:
            return dec
    return None


def _other_use(ctx: ModuleContext, sites, kernel: cst.FunctionDef) -> Optional[cst.Name]:
    """A read of the kernel's name (or of a name bound to it) that is not how a pallas_call
    gets its kernel."""
    aliases = _aliases(ctx, kernel)
    # A pallas_call that runs another def of the same name (its own arm of a static `if`:
    # discovery) passes that def, not this one.
    passed = {
        id(s.kernel_expr) for s in sites
        if s.kernel_expr is not None and s.kernel is not None
        and (s.kernel is kernel or (not s.variants and s.kernel.name.value == kernel.name.value
                                    and ctx.scope_of(s.kernel) is ctx.scope_of(kernel)))
    }
    # A kernel passed in as a parameter of the function holding its pallas_call: the arguments
    # that pass it reach that pallas_call too.
    passed |= {id(arg) for s in sites if s.kernel is kernel and s.passed_by is not None and not s.relayed_by
               for arg in passing_arguments(ctx, s, own_specs=bool(s.forwarded))[0]}
    passed |= {id(arg.value) for s in sites if s.kernel is kernel and s.relayed_by for arg in passing_chain(ctx, s)}
    # `lambda *refs: kernel(*refs, bs=8)`: the call the lambda forwards to runs it for that pallas_call.
    passed |= {id(s.forwarder.body.func) for s in sites if s.kernel is kernel and s.forwarder is not None}
    chain = passed | {id(value) for value, _ in aliases.values() if value is not None}
    for name in _reads(ctx, {n for n, _ in aliases}):
        binding = _binding_scope(ctx, name)
        if (name.value, id(binding)) not in aliases:
            continue
        reached = reaching_value(ctx, name, name)  # a name assigned again reads its latest value
        if reached is not None and not _names_alias(ctx, reached, aliases):
            continue
        if not _feeds(ctx, name, chain):
            return name
    return None


def _names_alias(ctx: ModuleContext, value: cst.BaseExpression, aliases: dict) -> bool:
    """`value` is the kernel or one of its aliases, bare or in a functools.partial."""
    inner = partial_target(ctx, value)
    return isinstance(inner, cst.Name) and (inner.value, id(_binding_scope(ctx, inner))) in aliases


def _aliases(ctx: ModuleContext, kernel: cst.FunctionDef) -> dict[tuple[str, int], tuple[Optional[cst.BaseExpression], cst.CSTNode]]:
    """(name, id(scope)) of the kernel's def and of every name assigned the kernel, or a
    functools.partial of it -> (the assigned value, the scope)."""
    found: dict = {(kernel.name.value, id(ctx.scope_of(kernel))): (None, ctx.scope_of(kernel))}
    assigns = []  # (target name, value, the assignment)
    for n in walk(ctx.module):
        if isinstance(n, cst.Assign) and len(n.targets) == 1:
            target = n.targets[0].target
            if isinstance(target, cst.Name):
                assigns.append((target, n.value, n))
            elif paired(target, n.value):  # `kernel, name = partial(k, ...), "fwd"`, as ModuleContext pairs them
                assigns += [(t.value, v.value, n) for t, v in zip(target.elements, n.value.elements)
                            if isinstance(t.value, cst.Name)]
    changed = True
    while changed:
        changed = False
        for target, value, node in assigns:
            inner = partial_target(ctx, value)
            if not isinstance(inner, cst.Name) or (inner.value, id(_binding_scope(ctx, inner))) not in found:
                continue
            key = (target.value, id(ctx.scope_of(node)))
            if key not in found:
                found[key] = (value, ctx.scope_of(node))
                changed = True
    return found


def _feeds(ctx: ModuleContext, name: cst.Name, chain: set[int]) -> bool:
    """`name` is a pallas_call's kernel argument or an alias's value, possibly inside
    functools.partial(...) layers."""
    cur: cst.CSTNode = name
    while id(cur) not in chain:
        parent = ctx.parent(cur)
        arg_of = ctx.parent(parent) if isinstance(parent, cst.Arg) else None
        if not (isinstance(arg_of, cst.Call) and ctx.imports.is_(arg_of.func, N.PARTIAL) and arg_of.args[0] is parent):
            return False
        cur = arg_of
    return True


def _reads(ctx: ModuleContext, names: set[str]) -> Iterator[cst.Name]:
    """Names read anywhere in the module (not the name being bound, an attribute, a keyword)."""
    for node in walk(ctx.module):
        if not isinstance(node, cst.Name) or node.value not in names:
            continue
        parent = ctx.parent(node)
        if isinstance(parent, (cst.FunctionDef, cst.ClassDef, cst.Param, cst.AssignTarget, cst.ImportAlias, cst.AsName)):
            continue
        if is_label(parent, node):
            continue
        if isinstance(parent, (cst.AugAssign, cst.For, cst.CompFor, cst.NamedExpr)) and parent.target is node:
            continue
        if _unpacked_target(ctx, node):
            continue
        yield node


def _unpacked_target(ctx: ModuleContext, name: cst.Name) -> bool:
    """`name` is bound by an unpacking (`kernel, label = ...`, `for a, b in ...`), not read."""
    node: cst.CSTNode = name
    parent = ctx.parent(node)
    while isinstance(parent, (cst.Element, cst.StarredElement, cst.Tuple, cst.List)):
        node, parent = parent, ctx.parent(parent)
    if node is name:
        return False
    return isinstance(parent, cst.AssignTarget) or (isinstance(parent, (cst.For, cst.CompFor)) and parent.target is node)


def _binding_scope(ctx: ModuleContext, name: cst.Name) -> cst.CSTNode:
    """The innermost scope around `name` that binds it (the module when none does)."""
    for scope in ctx.scope_chain(name):
        if isinstance(scope, cst.Module):
            return scope
        if name.value in param_names(scope) or name.value in scope_names(ctx, scope):
            return scope
    return ctx.module


def _statement_text(ctx: ModuleContext, node: cst.CSTNode) -> str:
    stmt = ctx.statement_of(node)
    text = " ".join(ctx.code(stmt if isinstance(stmt, cst.SimpleStatementLine) else node).split())
    return text if len(text) <= 70 else text[:67] + "..."
