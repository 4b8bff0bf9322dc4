"""A loop that stands at the top level of a helper the kernel calls once: the helper's body
inlined into the kernel, where the loop then stands at the top level and lifts as usual.

    def _kv_loop(q, k_ref, n):              def kernel(q_ref, k_ref, o_ref, *, n):
        acc = jnp.zeros(...)                    q = q_ref[...]
        acc = lax.fori_loop(0, n, body, acc)    acc = jnp.zeros(...)
        return acc / 2                  ->      acc = lax.fori_loop(0, n, body, acc)
                                                out = acc / 2
    def kernel(q_ref, k_ref, o_ref, *, n):      o_ref[...] = out
        out = _kv_loop(q_ref[...], k_ref, n)
        o_ref[...] = out

This is what a Pallas expert writes before lifting such a loop: the grid axis, the scratch and
the `pl.when` blocks belong to the kernel, not to a helper. The inlining keeps what the call
meant: a parameter passed a plain name reads that name (the substitution is by scope, so a
nested function's own names stay its own); one passed any other expression (or a literal
default) is bound to it by an assignment in the call's argument order, so nothing is evaluated
twice; the helper's return value is assigned to the call's targets. The helper's def goes when
the call was its only use (module `__all__` keeps a public one).

Refused, saying why: a helper called more than once (or read other than called), recursive,
decorated, a generator, `async`, with `*args` / `**kwargs`, `global` / `nonlocal`, a `return`
other than its last statement, a non-literal default it needs, one returning a function of its
own (a closure over its locals), one reading a module name the kernel binds (inlined, it would
read the kernel's), one whose names (parameters bound to expressions, locals) the kernel also
uses, and a call that is not a whole top-level statement of the kernel (`x = f(...)`, `f(...)`).

May import core, analysis and rewrite.text."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import libcst as cst
from libcst.metadata import BuiltinScope, GlobalScope, MetadataWrapper, ScopeProvider

from pallas_fix.analysis.context import ModuleContext, walk
from pallas_fix.analysis.result import analyze
from pallas_fix.core.model import LoopInfo
from pallas_fix.core.plans import FixPlan, Refuse
from pallas_fix.rewrite.callsite.spelling.operands import CallSiteError
from pallas_fix.rewrite.kernel.dead_params import drop_dead_params
from pallas_fix.rewrite.loops.regions import uses_by_loop
from pallas_fix.rewrite.text.line_width import fit_width
from pallas_fix.rewrite.text.edits import apply_edits, remove_statement
from pallas_fix.rewrite.text.scopes import bindings, target_names, walk_scope
from pallas_fix.rewrite.text.statements import body_statements, siblings_of
from pallas_fix.rewrite.text.syntax import code, variable_names


@dataclass(frozen=True)
class HeldLoop:
    """A loop at the top level of `helper`, which the kernel runs by `statement` (`call`)."""

    helper: cst.FunctionDef
    call: cst.Call
    statement: cst.SimpleStatementLine


def held_loop(ctx: ModuleContext, kernel: cst.FunctionDef, loop: LoopInfo) -> Optional[HeldLoop]:
    """The helper whose top level holds the loop, called from the kernel's top level; None where
    the loop sits elsewhere (the other nesting refusals speak for it). Raises Refuse where the
    helper is called in a way inlining cannot keep."""
    helper = ctx.parent(ctx.parent(loop.statement)) if loop.statement is not None else None
    if not isinstance(helper, cst.FunctionDef) or helper is kernel or loop.statement not in body_statements(helper):
        return None
    name = helper.name.value
    uses = [n for n in walk(ctx.module) if isinstance(n, cst.Name) and n.value == name and n is not helper.name]
    calls = [n for n in uses if isinstance(ctx.parent(n), cst.Call) and ctx.parent(n).func is n]
    in_kernel = [c for c in calls if kernel in ctx.ancestors(c)]
    if not in_kernel:
        return None
    where = f"the loop sits inside `{name}` (line {ctx.span(helper).line})"
    if any(helper in ctx.ancestors(n) for n in uses):
        raise Refuse(f"{where}, which calls itself: its body cannot be inlined into `{kernel.name.value}`")
    if len(uses) > 1:
        raise Refuse(f"{where}, which is used {len(uses)} times: inlined into `{kernel.name.value}` it would change "
                     "for its other callers too; give the kernel a helper of its own, or inline it")
    call = ctx.parent(in_kernel[0])
    statement = ctx.parent(ctx.parent(call))
    small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 else None
    whole = isinstance(small, (cst.Expr, cst.Assign, cst.AnnAssign)) and small.value is call
    if not whole or statement not in body_statements(kernel):
        raise Refuse(f"{where}, and `{kernel.name.value}` calls it inside a larger statement or block (line "
                     f"{ctx.span(call).line}); call it as a top-level statement of the kernel (`x = {name}(...)`)")
    return HeldLoop(helper, call, statement)


def inlined_source(ctx: ModuleContext, kernel: cst.FunctionDef, held: HeldLoop) -> str:
    """The module's text with the helper's body in place of its call (module docstring)."""
    helper = held.helper
    _check_helper(ctx, helper)
    scopes = MetadataWrapper(ctx.module, unsafe_skip_copy=True).resolve(ScopeProvider)
    own = scopes.get(body_statements(helper)[0])
    if own is None:
        raise Refuse(f"pallas-fix cannot read the scope of `{helper.name.value}`")
    args = _bound_arguments(helper, held.call)
    kernel_names = _kernel_names(kernel, held)
    _check_globals(scopes, helper, kernel)
    helper_names = variable_names(helper)
    renames: dict[int, str] = {}
    binds: list[cst.BaseStatement] = []
    locals_ = set(bindings(helper.body, nested=False))
    for param, arg in args:
        substituted = _substitution(own, param, arg, helper_names)
        if substituted is not None:
            renames.update({id(access.node): substituted for access in _reads(own, param)})
        elif not (isinstance(arg, cst.Name) and arg.value == param and len(own.assignments[param]) == 1):
            binds.append(cst.parse_statement(f"{param} = {code(arg)}\n"))
            locals_.add(param)  # bound by assignment in the kernel now
    clash = sorted(locals_ & kernel_names - _rebound_by_call(kernel, held))
    if clash:
        raise Refuse(f"inlining `{helper.name.value}` into `{kernel.name.value}` would bind `{clash[0]}`, a name the "
                     "kernel uses too; rename one of them")
    doc, body, final, comments = _renamed_body(helper, renames)
    result = _result(held.statement, final.value if final is not None else None, helper)
    if result and comments:  # what was said of the return is said of the assignment that replaces it
        result[0] = result[0].with_changes(leading_lines=comments)
    stmts = [*binds, *body, *result]
    if doc and stmts:  # what the docstring says of the helper is said above its inlined body
        stmts[0] = stmts[0].with_changes(leading_lines=[*doc, *stmts[0].leading_lines])
    edits: dict = {held.statement: _splice(held.statement, stmts)}
    if _removable(ctx, helper):
        remove_statement(edits, helper, siblings_of(ctx, helper))
    return apply_edits(ctx.module, edits)[0].code


# -- the helper and its call -------------------------------------------------------------------------
def _check_helper(ctx: ModuleContext, helper: cst.FunctionDef) -> None:
    name = helper.name.value
    why = None
    params = helper.params
    if helper.decorators:
        why = "is decorated (the decorator would no longer run)"
    elif helper.asynchronous is not None:
        why = "is `async`"
    elif isinstance(params.star_arg, cst.Param) or params.star_kwarg is not None:
        why = "takes `*args` or `**kwargs`"
    own = list(walk_scope(helper.body, classes=False))
    if why is None and any(isinstance(n, (cst.Yield, cst.Await)) for n in own):
        why = "is a generator"
    if why is None and any(isinstance(n, (cst.Global, cst.Nonlocal)) for n in walk(helper)):
        why = "declares `global` or `nonlocal` names"
    returns = [n for n in own if isinstance(n, cst.Return)]
    stmts = body_statements(helper)
    last = stmts[-1] if stmts else None
    final = last.body[0] if isinstance(last, cst.SimpleStatementLine) and isinstance(last.body[0], cst.Return) else None
    if why is None and (len(returns) > 1 or (returns and returns[0] is not final)):
        why = "returns other than by its last statement"
    if why is None and final is not None and final.value is not None:
        nested = {n.name.value for n in own if isinstance(n, (cst.FunctionDef, cst.ClassDef)) and n is not helper}
        if _returns_function(final.value, nested):
            why = "returns a function of its own, a closure over its locals"
    if why is not None:
        raise Refuse(f"the loop sits inside `{name}` (line {ctx.span(helper).line}), which {why}: pallas-fix inlines "
                     "a helper into the kernel only where the inlined body means what the call did")


def _returns_function(value: cst.BaseExpression, nested: set[str]) -> bool:
    """The value (or an item of the tuple, list or dict it builds) is a function the helper
    defines, a lambda or a `partial` of one: not called here, it would run later over names
    that are the kernel's once inlined. A nested function passed to a call (`fori_loop(0, n,
    body, init)`) runs in that call."""
    if isinstance(value, cst.Lambda) or (isinstance(value, cst.Name) and value.value in nested):
        return True
    if isinstance(value, (cst.Tuple, cst.List, cst.Set)):
        return any(_returns_function(e.value, nested) for e in value.elements)
    if isinstance(value, cst.Dict):
        return any(_returns_function(e.value, nested) for e in value.elements if isinstance(e, cst.DictElement))
    if isinstance(value, cst.Call) and code(value.func).endswith("partial"):
        return any(_returns_function(a.value, nested) for a in value.args)
    return False


def _bound_arguments(helper: cst.FunctionDef, call: cst.Call) -> list[tuple[str, cst.BaseExpression]]:
    """(parameter, the expression it gets) in the order the call evaluates them; a parameter the
    call leaves out gets its default, last, where that is a literal."""
    params = helper.params
    positional = [*params.posonly_params, *params.params]
    by_name = {p.name.value: p for p in [*positional, *params.kwonly_params]}
    given: dict[str, cst.BaseExpression] = {}
    for n, arg in enumerate(call.args):
        if arg.star:
            raise Refuse(f"the call of `{helper.name.value}` spreads `{arg.star}{code(arg.value)}`, which pallas-fix cannot bind")
        if arg.keyword is None:
            if n >= len(positional):
                raise Refuse(f"the call of `{helper.name.value}` passes more arguments than it takes")
            name = positional[n].name.value
        else:
            name = arg.keyword.value
        if name not in by_name or name in given or (arg.keyword is not None and by_name[name] in params.posonly_params):
            raise Refuse(f"the call of `{helper.name.value}` passes `{name}` in a way Python rejects")
        given[name] = arg.value
    for name, p in by_name.items():
        if name in given:
            continue
        if p.default is None or not isinstance(p.default, (cst.Integer, cst.Float, cst.SimpleString, cst.Name)) or (
                isinstance(p.default, cst.Name) and p.default.value not in ("None", "True", "False")):
            raise Refuse(f"the call of `{helper.name.value}` leaves out `{name}`, whose default is no literal; pass it")
        given[name] = p.default
    return list(given.items())


def _substitution(own, param: str, arg: cst.BaseExpression, helper_names: set[str]) -> Optional[str]:
    """The name that replaces `param` in the body: the argument's, where it is a plain name the
    helper neither rebinds as the parameter nor mentions itself; else None (bound by assignment)."""
    if not isinstance(arg, cst.Name) or arg.value == param or arg.value in helper_names:
        return None
    assigned = list(own.assignments[param])
    return arg.value if len(assigned) == 1 and isinstance(assigned[0].node, cst.Param) else None


def _reads(own, param: str) -> list:
    """Every read of the parameter, nested functions' included (by scope, not by spelling)."""
    return [a for assignment in own.assignments[param] for a in assignment.references]


def _kernel_names(kernel: cst.FunctionDef, held: HeldLoop) -> set[str]:
    """Every name the kernel mentions outside the helper's def (when the helper is its own),
    its parameters and the call's arguments and targets included."""
    names: set[str] = set()
    for stmt in body_statements(kernel):
        if stmt is not held.helper:
            names |= variable_names(stmt)
    return names | variable_names(kernel.params)


def _rebound_by_call(kernel: cst.FunctionDef, held: HeldLoop) -> set[str]:
    """The call's targets the helper may bind as locals of its own (`acc = _loop(...)`, the
    helper binding `acc` too): the kernel's value of such a name is overwritten by the call anyway,
    so only what reads it while the inlined body runs could tell: the call's arguments, or a
    function of the kernel's (which the body may call)."""
    small = held.statement.body[0]
    targets: set[str] = set()
    for t in small.targets if isinstance(small, cst.Assign) else [small] if isinstance(small, cst.AnnAssign) else []:
        targets |= target_names(t.target)
    closures = [n for s in body_statements(kernel) if s is not held.helper
                for n in walk(s) if isinstance(n, (cst.FunctionDef, cst.Lambda))]
    read = variable_names(held.call).union(*(variable_names(c) for c in closures))
    return targets - read


def _check_globals(scopes, helper: cst.FunctionDef, kernel: cst.FunctionDef) -> None:
    """A name the helper (or a function inside it) reads from the module or the builtins, which
    the kernel binds: inlined, it would read the kernel's value."""
    inner = {id(scopes[n]): scopes[n] for n in walk(helper.body) if n in scopes}
    for scope in inner.values():
        if isinstance(scope, GlobalScope):
            continue
        for access in scope.accesses:
            referents = access.referents
            if referents and not all(isinstance(r.scope, (GlobalScope, BuiltinScope)) for r in referents):
                continue
            name = access.node.value if isinstance(access.node, cst.Name) else None
            if name is not None and _bound_in_kernel(kernel, name):
                raise Refuse(f"`{helper.name.value}` reads the module's `{name}`, which `{kernel.name.value}` binds "
                             "too: inlined, the helper's body would read the kernel's value; rename one of them")


def _bound_in_kernel(kernel: cst.FunctionDef, name: str) -> bool:
    params = {p.name.value for p in [*kernel.params.posonly_params, *kernel.params.params, *kernel.params.kwonly_params]}
    for extra in (kernel.params.star_arg, kernel.params.star_kwarg):
        if isinstance(extra, cst.Param):
            params.add(extra.name.value)
    return name in params or name in set(bindings(kernel.body, nested=False))


# -- the inlined text --------------------------------------------------------------------------------
class _Renamer(cst.CSTTransformer):
    def __init__(self, renames: dict[int, str]) -> None:
        self.renames = renames

    def on_leave(self, original_node, updated_node):
        new = self.renames.get(id(original_node))
        return updated_node.with_changes(value=new) if new is not None and isinstance(updated_node, cst.Name) else updated_node


def _renamed_body(helper: cst.FunctionDef, renames: dict[int, str]) -> tuple[list, list[cst.BaseStatement], Optional[cst.Return], list]:
    """The helper's docstring as comment lines, its statements with the parameters substituted
    (its final `return` taken off), that return, and the comment lines above it."""
    renamer = _Renamer(renames)
    stmts = [s.visit(renamer) for s in body_statements(helper)]
    final, comments = None, []
    last = stmts[-1] if stmts else None
    if isinstance(last, cst.SimpleStatementLine) and isinstance(last.body[0], cst.Return):
        final = last.body[0]
        comments = [l for l in last.leading_lines if l.comment is not None]
        stmts = stmts[:-1]
    doc, stmts = _docstring(stmts)
    if stmts:
        stmts[0] = stmts[0].with_changes(leading_lines=_trimmed(stmts[0].leading_lines))
    return doc, stmts, final, comments


def _docstring(stmts: list[cst.BaseStatement]) -> tuple[list, list[cst.BaseStatement]]:
    """(the docstring as comment lines, the statements after it)."""
    first = stmts[0] if stmts else None
    if not (isinstance(first, cst.SimpleStatementLine) and isinstance(first.body[0], cst.Expr)
            and isinstance(first.body[0].value, cst.SimpleString)):
        return [], stmts
    text = str(first.body[0].value.evaluated_value).strip()
    return [cst.EmptyLine(comment=cst.Comment(f"# {l.strip()}".rstrip())) for l in text.splitlines()], stmts[1:]


def _trimmed(lines) -> list:
    lines = list(lines)
    while lines and lines[0].comment is None:
        lines.pop(0)
    return lines


def _result(statement: cst.SimpleStatementLine, value: Optional[cst.BaseExpression], helper: cst.FunctionDef) -> list:
    """The statement that hands the return value to the call's targets (none for a bare call
    whose value is plain names)."""
    small = statement.body[0]
    if isinstance(small, cst.Expr):  # the value is dropped: plain names need not be read
        plain = value is None or isinstance(value, cst.Name) or (
            isinstance(value, cst.Tuple) and all(isinstance(e.value, cst.Name) for e in value.elements))
        return [] if plain else [cst.SimpleStatementLine([cst.Expr(value)])]
    if value is None:
        raise Refuse(f"the kernel assigns what `{helper.name.value}` returns, and it returns nothing")
    if isinstance(small, cst.AnnAssign):
        return [cst.SimpleStatementLine([small.with_changes(value=value)])]
    pairs = _paired(small, value)
    if pairs is None:
        return [cst.SimpleStatementLine([small.with_changes(value=value)])]
    if not pairs:
        return []
    targets = [t for t, _ in pairs]
    values = [v for _, v in pairs]
    text = f"{', '.join(code(t) for t in targets)} = {', '.join(code(v) for v in values)}\n"
    return [cst.parse_statement(text)]


def _paired(small: cst.Assign, value: cst.BaseExpression) -> Optional[list]:
    """`a, _, _ = x, m, l` as the pairs it keeps, `(a, x)`: a value dropped into `_` goes where it
    is a plain name (reading it does nothing), and so does `acc = acc`. None where the two sides
    do not pair up."""
    if len(small.targets) != 1:
        return None
    target = small.targets[0].target
    if not (isinstance(target, cst.Tuple) and isinstance(value, cst.Tuple)) or len(target.elements) != len(value.elements):
        return None
    if any(isinstance(e, cst.StarredElement) for e in [*target.elements, *value.elements]):
        return None
    pairs = [(t.value, v.value) for t, v in zip(target.elements, value.elements)]
    kept = [(t, v) for t, v in pairs if not (isinstance(t, cst.Name) and isinstance(v, cst.Name) and t.value in ("_", v.value))]
    targets = [code(t) for t, _ in kept]
    if len(set(targets)) != len(targets) or any(variable_names(v) & set(targets) for _, v in kept[1:]):
        return None  # a target a later value reads: the tuple assignment reads every value first
    return kept


def _splice(statement: cst.SimpleStatementLine, stmts: list[cst.BaseStatement]):
    """The call's statement replaced by `stmts`, its comments above the first and its trailing
    comment on the last."""
    if not stmts:
        return lambda _n: cst.RemovalSentinel.REMOVE

    def edit(updated):
        out = list(stmts)
        out[0] = out[0].with_changes(leading_lines=[*updated.leading_lines, *out[0].leading_lines])
        if updated.trailing_whitespace.comment is not None and isinstance(out[-1], cst.SimpleStatementLine):
            out[-1] = out[-1].with_changes(trailing_whitespace=updated.trailing_whitespace)
        return cst.FlattenSentinel(out)

    return edit


def _removable(ctx: ModuleContext, helper: cst.FunctionDef) -> bool:
    """The helper's def goes with its only call, unless the module exports it by `__all__`."""
    name = helper.name.value
    exported = any(isinstance(n, cst.SimpleString) and n.evaluated_value == name for n in walk(ctx.module))
    return not exported


# -- the plan: inline, then lift ---------------------------------------------------------------------
def plan_inlined(analysis, loop: LoopInfo, uses: list, held: HeldLoop, plan: Callable) -> FixPlan:
    """`plan` (a lift's planner) asked on the module with the helper inlined, as one plan that
    does both: the inlining alone lifts nothing, so it is never offered on its own."""
    site = uses[0].kernel_site
    kernel, helper = site.kernel, held.helper.name.value
    where = f"the loop sits inside `{helper}` (line {analysis.ctx.span(held.helper).line})"
    source = inlined_source(analysis.ctx, kernel, held)
    again = analyze(source, analysis.path, analysis.config)
    expected = code(loop.call.visit(_Renamer(_call_renames(analysis.ctx, kernel, held, loop))))
    found = [(l, us) for l, us in uses_by_loop(again) if code(l.call) == expected and us[0].kernel_site is not None
             and us[0].kernel_site.kernel_name == site.kernel_name]
    if len(found) != 1:
        raise Refuse(f"{where}; pallas-fix could not find the loop again once `{helper}` is inlined")
    try:
        then = plan(again, *found[0])
    except (Refuse, CallSiteError) as why:
        raise Refuse(f"{where}; inlined into `{kernel.name.value}`, {why}") from None
    final = finished(again.ctx.module, then)
    return FixPlan(then.codemod, then.safety, uses, f"inlined `{helper}` into `{kernel.name.value}` (its only caller), "
                   f"then {then.description}", lambda _module: cst.parse_module(final), site=site, guards=then.guards,
                   pipelined=then.pipelined, divided_only=then.divided_only)


def _call_renames(ctx: ModuleContext, kernel: cst.FunctionDef, held: HeldLoop, loop: LoopInfo) -> dict[int, str]:
    """The renames `inlined_source` makes inside the loop's call (to find the loop again)."""
    scopes = MetadataWrapper(ctx.module, unsafe_skip_copy=True).resolve(ScopeProvider)
    own = scopes.get(body_statements(held.helper)[0])
    names = variable_names(held.helper)
    out: dict[int, str] = {}
    for param, arg in _bound_arguments(held.helper, held.call):
        substituted = _substitution(own, param, arg, names) if own is not None else None
        if substituted is not None:
            out.update({id(a.node): substituted for a in _reads(own, param)})
    return out


def finished(module: cst.Module, plan: FixPlan) -> str:
    """The text `plan` makes of `module`, finished as the engine finishes every plan's text
    (engine.apply_plan: dead kernel parameters dropped, new lines fitted to the file's width)."""
    new = plan.rewrite(module)
    if plan.site is not None and plan.site.kernel is not None:
        new = drop_dead_params(module, new, plan.site.kernel.name.value)
    return fit_width(module.code, new.code)
