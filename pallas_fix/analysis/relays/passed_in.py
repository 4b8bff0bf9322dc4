"""Kernels passed in as a parameter of the function that holds their pallas_call:
`def call_kernel(*, kernel, grid): return pl.pallas_call(functools.partial(kernel, ...), ...)`,
called as `call_kernel(kernel=_dkdv_kernel, ...)` and `call_kernel(kernel=_dq_kernel, ...)`.
Discovery makes one site per kernel passed (KernelSite.passed_by); kernel_entry refuses their
fixes when the calls pass different kernels, since one pallas_call runs every kernel passed in,
and lets one kernel that every call passes be rewritten with that pallas_call.

Where each call passes its own kernel together with the grid and specs the pallas_call takes
from parameters (`call_kernel(kernel=_dq, grid=(...), in_specs=dq_specs)`), those belong to that
kernel alone: the site's keywords become the call's arguments (`forward_keywords`), so the lift
reads and edits them in the caller, and the one pallas_call is planned as one call per kernel.
What the calls still share (the helper itself, a list both copy) is screened by
rewrite.callsite.forwarded."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from pallas_fix.analysis.binders import is_label, positional_names
from pallas_fix.analysis.context import ModuleContext, walk
from pallas_fix.analysis.effects.evaluator import scope_names
from pallas_fix.analysis.effects.syntax import param_names
from pallas_fix.core import names as N
from pallas_fix.core.model import KernelSite


def relayed(ctx: ModuleContext, call: cst.Call, arg: cst.BaseExpression,
            depth: int = 3) -> list[tuple[tuple[cst.Call, ...], cst.BaseExpression]]:
    """`make_call(kernel)` inside `def launch(name, kernel, ...)`: the argument passed on is
    launch's own parameter, so the kernels are what launch's calls pass for it, followed up to
    `depth` helpers out: (the calls they came through, outermost first; what the outermost
    passes). Empty when `arg` is no such parameter or some call hides what it passes."""
    fn = ctx.enclosing_function(call)
    if depth == 0 or fn is None or not isinstance(arg, cst.Name) or arg.value not in param_names(fn):
        return []
    if _rebinding(ctx, fn, arg.value) is not None:
        return []
    out: list[tuple[tuple[cst.Call, ...], cst.BaseExpression]] = []
    for outer in calls_of(ctx, fn):
        passed = argument_for(fn, outer, arg.value)
        if passed is None:
            return []
        further = relayed(ctx, outer, passed, depth - 1)
        out += [((*calls, outer), value) for calls, value in further] if further else [((outer,), passed)]
    return out


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
    for call in calls_of(ctx, helper):
        arg = argument_for(helper, call, name)
        if arg is not None:
            out.append((call, arg))
    return out


# The pallas_call keywords a lift rewrites or reads: where the helper takes them from parameters, each
# call that passes its own kernel supplies them for that kernel.
FORWARDABLE = ("grid", "in_specs", "out_specs", "out_shape")


def forward_keywords(ctx: ModuleContext, site: KernelSite) -> None:
    """Point the site's grid and spec keywords that are parameters of the helper at what
    `site.passed_by` passes for them, when that argument reads the same names at the pallas_call
    as at the call (no parameter or local of the helper shadows them, and the call stands in the
    scope that defines the helper): the argument then means there what it means here. A parameter
    the helper rebinds or reads anywhere else (`in_specs.reverse()`) is not forwarded."""
    helper = ctx.enclosing_function(site.call)
    call = site.passed_by
    if helper is None or call is None:
        return
    if ctx.scope_of(call) is not ctx.scope_of(helper) and not _threaded(ctx, site, helper):
        return
    shadowing = own_names(ctx, helper)
    keywords, forwarded, thread = dict(site.keywords), [], []
    for key in FORWARDABLE:
        arg = keywords.get(key)
        if arg is None and key in THREADABLE and _threadable(ctx, site, helper, key):
            forwarded.append(key)  # absent: the lift writes it at the call, through a new parameter
            thread.append(key)
            continue
        if arg is None or not isinstance(arg.value, cst.Name) or arg.value.value not in param_names(helper):
            continue
        if _rebinding(ctx, helper, arg.value.value) is not None or _read_besides(ctx, helper, arg.value):
            continue
        passed = _arg_for(helper, call, arg.value.value)
        if passed is None and key in THREADABLE and _defaults_to_whole(ctx, helper, call, arg.value.value):
            del keywords[key]  # a threaded parameter this call leaves at `pl.no_block_spec`: as if absent
            forwarded.append(key)
            continue
        if passed is None or free_names(passed.value) & shadowing:
            continue
        keywords[key] = passed
        forwarded.append(key)
    site.keywords, site.forwarded, site.thread = keywords, tuple(forwarded), tuple(thread)


# The spec keywords a helper without them can take as parameters defaulting to what the pallas_call
# does without them (`pl.no_block_spec`: every operand whole), so that callers not passing them get
# what they got before, and each call of the helper passes its own kernel's specs.
THREADABLE = ("in_specs", "out_specs")


def _threaded(ctx: ModuleContext, site: KernelSite, helper: cst.FunctionDef) -> bool:
    """Does each call of the helper pass (or may it pass) its own kernel's specs, through spec
    parameters defaulting to `pl.no_block_spec` or ones the lift adds? Then the lift writes them at
    the call, in the caller's scope, and reads every size there, wherever the helper is defined."""
    for key in THREADABLE:
        arg = site.keywords.get(key)
        if arg is None and not _threadable(ctx, site, helper, key):
            return False
        if arg is not None and not (isinstance(arg.value, cst.Name) and _defaults_to_whole(ctx, helper, site.passed_by, arg.value.value)):
            return False
    return True


def _threadable(ctx: ModuleContext, site: KernelSite, helper: cst.FunctionDef, key: str) -> bool:
    """Can the helper take `key` as a new parameter forwarded to its pallas_call? Only a plain
    def (a decorator such as `jax.jit` may treat a list argument as a static or traced value)
    whose pallas_call spells every keyword (no `**kwargs`, no grid_spec holding the specs) and
    that binds no name `key` the new parameter would shadow."""
    if helper.decorators or site.grid_spec is not None or key in site.keywords:
        return False
    if any(a.star == "**" for a in site.call.args) or not ctx.imports.is_(site.call.func, N.PALLAS_CALL):
        return False
    return key not in own_names(ctx, helper) and all(not a.star for a in site.passed_by.args)


def _defaults_to_whole(ctx: ModuleContext, helper: cst.FunctionDef, call: cst.Call, param: str) -> bool:
    """Is `param` a parameter of `helper` defaulting to `pl.no_block_spec` that `call` leaves at
    its default (passing no `*args` / `**kwargs` that could hold it)?"""
    if any(a.star for a in call.args):
        return False
    default = param_default(helper, param)
    return default is not None and ctx.imports.is_(default, N.NO_BLOCK_SPEC)


def passed_for(ctx: ModuleContext, site: KernelSite, param: cst.BaseExpression) -> Optional[cst.BaseExpression]:
    """What the helper's call `site.passed_by` passes for `param`, a parameter of the helper
    holding the pallas_call that the helper hands on untouched (`)(*args)`), or None."""
    if site.relayed_by:  # handed on through several helpers: what the outermost call passes
        return chain_value(ctx, site, param)[0]
    helper = ctx.enclosing_function(site.call)
    if helper is None or site.passed_by is None or not isinstance(param, cst.Name) or param.value not in param_names(helper):
        return None
    if _rebinding(ctx, helper, param.value) is not None or _read_besides(ctx, helper, param):
        return None
    passed = _arg_for(helper, site.passed_by, param.value)
    return passed.value if passed is not None else None


def _read_besides(ctx: ModuleContext, fn: cst.FunctionDef, value: cst.Name, measured: bool = False) -> bool:
    """Does `fn` read the parameter `value` names other than there, at its pallas_call? A read
    may change the list in place first (`in_specs.reverse()`, `fix(in_specs)`): the pallas_call
    would not get the list as the call wrote it, item by item. `measured`: `len(value)` changes
    nothing, and is allowed."""
    for node in walk(fn.body):
        if not isinstance(node, cst.Name) or node.value != value.value or node is value:
            continue
        parent = ctx.parent(node)
        if measured and _measured(ctx, node):
            continue
        if not is_label(parent, node):
            return True
    return False


def _measured(ctx: ModuleContext, node: cst.Name) -> bool:
    """`len(node)`, `node is None`: a read that changes nothing."""
    arg = ctx.parent(node)
    if isinstance(arg, cst.Comparison) and arg.left is node and len(arg.comparisons) == 1 \
            and isinstance(arg.comparisons[0].operator, (cst.Is, cst.IsNot)) and is_none_literal(arg.comparisons[0].comparator):
        return True
    call = ctx.parent(arg) if isinstance(arg, cst.Arg) else None
    return (isinstance(call, cst.Call) and isinstance(call.func, cst.Name) and call.func.value == "len"
            and len(call.args) == 1 and not arg.star and arg.keyword is None)


def is_none_literal(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Name) and node.value == "None"


def own_names(ctx: ModuleContext, fn: cst.FunctionDef) -> set[str]:
    """The names `fn` binds, its parameters and locals: they mean something else outside it."""
    return set(param_names(fn)) | set(scope_names(ctx, fn))


def free_names(node: cst.CSTNode) -> set[str]:
    """The names `node` reads, less attribute and keyword names and those its lambdas bind (an
    index_map's grid indices). Any tree: a rewrite's result too."""
    nodes = list(walk(node))
    bound = {p.name.value for n in nodes if isinstance(n, cst.Lambda) for p in n.params.params}
    skip = {id(n.attr) for n in nodes if isinstance(n, cst.Attribute)}
    skip |= {id(n.keyword) for n in nodes if isinstance(n, cst.Arg) and n.keyword is not None}
    return {n.value for n in nodes if isinstance(n, cst.Name) and id(n) not in skip and n.value not in bound}


def calls_of(ctx: ModuleContext, fn: cst.FunctionDef) -> list[cst.Call]:
    """Calls `fn(...)` by its name in the scope that defines it."""
    scope = ctx.scope_of(fn)
    return [
        node for node in walk(scope)
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value == fn.name.value
        and ctx.resolve_def(fn.name.value, node) is fn
    ]


def argument_for(fn: cst.FunctionDef, call: cst.Call, param: str) -> Optional[cst.BaseExpression]:
    """The expression `call` passes for `fn`'s parameter `param` (by keyword or position)."""
    arg = _arg_for(fn, call, param)
    return arg.value if arg is not None else None


def _arg_for(fn: cst.FunctionDef, call: cst.Call, param: str) -> Optional[cst.Arg]:
    """The argument `call` passes for `fn`'s parameter `param` (by keyword or position)."""
    positional = positional_names(fn)
    pos = 0
    for arg in call.args:
        if arg.star:
            return None  # `*args` / `**kwargs`: which one is the kernel is not written here
        if arg.keyword is not None:
            if arg.keyword.value == param:
                return arg
        elif pos < len(positional):
            if positional[pos] == param:
                return arg
            pos += 1
    return None


def passing_arguments(ctx: ModuleContext, site: KernelSite, own_specs: bool = False) -> tuple[list[cst.BaseExpression], str]:
    """What each call of the function holding the pallas_call passes as its kernel parameter
    (the expressions that hand it the kernel), for a site discovery made per kernel passed, and
    "" or why some use of that function does not say which def it passes, bare.

    `own_specs`: every call passes its kernel with its own specs (KernelSite.forwarded), which
    the lift writes at that call, in the caller's scope, leaving the helper as it is (or taking
    new spec parameters that default to what it did): a helper other modules may call, and a
    kernel bound with `functools.partial` at the call, mean there what they meant."""
    helper = ctx.enclosing_function(site.call)
    expr = partial_target(ctx, site.kernel_expr) if site.kernel_expr is not None else None
    if site.passed_by is None or helper is None or not isinstance(expr, cst.Name) or expr.value not in param_names(helper):
        return [], "the kernel is not a parameter of the function holding the pallas_call"
    if not own_specs and not isinstance(ctx.scope_of(helper), cst.FunctionDef):
        # Another module may import the function and pass it kernels this module never sees.
        return [], f"`{helper.name.value}` is not local to a function (other modules may call it with other kernels)"
    rebound = _rebinding(ctx, helper, expr.value)
    if rebound is not None:
        return [], (f"`{helper.name.value}` rebinds its parameter `{expr.value}` (line {ctx.span(rebound).line}): no call says "
                    "which kernel it runs")
    calls = calls_of(ctx, helper)
    funcs = {id(call.func) for call in calls}
    for node in walk(ctx.scope_of(helper)):
        if (isinstance(node, cst.Name) and node.value == helper.name.value and id(node) not in funcs
                and node is not helper.name and ctx.resolve_def(node.value, node) is helper):
            return [], f"`{helper.name.value}` is also read other than called (line {ctx.span(node).line})"
    found = []
    for call in calls:
        arg = argument_for(helper, call, expr.value)
        if arg is None:
            return [], f"the call on line {ctx.span(call).line} passes it through `*args` / `**kwargs`"
        value = ctx.resolve_value(arg, call)
        if own_specs and isinstance(value, cst.Call) and ctx.imports.is_(value.func, N.PARTIAL) and value.args \
                and not value.args[0].star:
            value = value.args[0].value  # sizes bound where the specs are written
        if isinstance(value, cst.Call) and ctx.imports.is_(value.func, N.PARTIAL):
            # Bound in the caller's scope: the sizes it binds are not names the pallas_call sees,
            # and another call may bind others.
            return [], (f"the call on line {ctx.span(call).line} binds it with `functools.partial`, whose arguments the "
                        "pallas_call does not see")
        if not isinstance(value, cst.Name) or ctx.resolve_def(value.value, call) is None:
            return [], f"the call on line {ctx.span(call).line} passes `{ctx.code(arg)}`, not a def of the module"
        found.append(arg)
    return found, ""


def partial_target(ctx: ModuleContext, expr: cst.BaseExpression) -> cst.BaseExpression:
    """`functools.partial(functools.partial(k, a), b)` -> `k`."""
    while isinstance(expr, cst.Call) and ctx.imports.is_(expr.func, N.PARTIAL) and expr.args:
        expr = expr.args[0].value
    return expr


def param_default(fn: cst.FunctionDef, name: str) -> Optional[cst.BaseExpression]:
    """The default of `fn`'s parameter `name` (positional or keyword-only), None when it has none."""
    params = [*fn.params.params, *fn.params.kwonly_params]
    return next((p.default for p in params if p.name.value == name), None)


def _rebinding(ctx: ModuleContext, fn: cst.FunctionDef, name: str) -> Optional[cst.CSTNode]:
    """A statement of `fn`'s own body that binds `name` (`if fast: kernel = _fast_kernel`)."""
    for node in walk(fn.body):
        targets: list = []
        if isinstance(node, cst.AssignTarget):
            targets = [node.target]
        elif isinstance(node, (cst.AugAssign, cst.AnnAssign, cst.NamedExpr, cst.For)):
            targets = [node.target]
        if any(isinstance(n, cst.Name) and n.value == name for t in targets for n in walk(t)) and \
                ctx.enclosing_function(node) is fn:
            return node
    return None


def outer_call(site: KernelSite) -> Optional[cst.Call]:
    """The call where the kernel is passed in by name: the outermost of the helpers it is handed
    on through (`launch(..., _fwd_kernel, ...)`), or the helper's own call when none relays it."""
    return site.relayed_by[0] if site.relayed_by else site.passed_by


def _chain_callers(ctx: ModuleContext, site: KernelSite) -> dict[int, tuple[cst.FunctionDef, cst.Call]]:
    """id(function of the chain) -> (that function, the chain's call of it): the helper holding the
    pallas_call is called by `passed_by`, the function holding `passed_by` by the last relay, and so on."""
    calls = [*site.relayed_by, site.passed_by] if site.passed_by is not None else []
    holders = [ctx.enclosing_function(c) for c in calls[1:]] + [ctx.enclosing_function(site.call)]
    return {id(fn): (fn, call) for fn, call in zip(holders, calls) if fn is not None}


def chain_value(ctx: ModuleContext, site: KernelSite, expr: cst.BaseExpression, to_outer: bool = True,
                reads_ok: bool = False) -> tuple[Optional[cst.BaseExpression], bool]:
    """What the chain of calls that hands the kernel to its pallas_call passes for `expr`, a
    parameter of a function of the chain that the function only hands on (or measures with `len`):
    (the expression, True) once that expression is an argument of the outermost call (`to_outer`:
    required, else wherever the walk stops); (None, True) when the outermost call leaves it at its
    default; (None, False) when the walk stops short (rebound, read otherwise, not passed).
    `reads_ok`: other reads do not stop it (a value read, not a list a lift edits)."""
    callers = _chain_callers(ctx, site)
    outer = outer_call(site)
    while isinstance(expr, cst.Name):
        fn = ctx.enclosing_function(expr)
        found = callers.get(id(fn)) if fn is not None else None
        if found is None or expr.value not in param_names(fn) or _rebinding(ctx, fn, expr.value) is not None:
            break
        if not reads_ok and _read_besides(ctx, fn, expr, measured=True):
            return None, False
        call = found[1]
        arg = _arg_for(fn, call, expr.value)
        if arg is None:
            return None, call is outer and not any(a.star for a in call.args)
        expr = arg.value
        if call is outer:
            return expr, True
    return (expr, True) if not to_outer else (None, False)
