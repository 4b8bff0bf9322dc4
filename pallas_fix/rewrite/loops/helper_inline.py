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
twice; the helper's return value is assigned to the call's targets. The helper's def goes when the call
was its only use and no other module can import it (nested, or private and not in `__all__`).

Refused, saying why: a helper called more than once (or read other than called), recursive,
decorated, a generator, `async`, with `*args` / `**kwargs`, `global` / `nonlocal`, a `return`
other than its last statement, a non-literal default it needs, one returning a function of its
own (a closure over its locals), one reading a module name the kernel binds (inlined, it would
read the kernel's), one whose names (parameters bound to expressions, locals) the kernel also
uses, and a call that is not a whole top-level statement of the kernel (`x = f(...)`, `f(...)`).

The plans that inline and then lift are in rewrite.loops.inlined_plans.

May import core, analysis and rewrite.text."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import libcst as cst
from libcst.metadata import BuiltinScope, GlobalScope, MetadataWrapper, ScopeProvider

from pallas_fix.analysis.context import ModuleContext, walk
from pallas_fix.core.model import LoopInfo
from pallas_fix.core.plans import Refuse
from pallas_fix.rewrite.loops.inline_text import Renamer, docstring, result_statements, splice, trimmed
from pallas_fix.rewrite.text.edits import apply_edits, remove_statement
from pallas_fix.rewrite.text.scopes import bindings, target_names, walk_scope
from pallas_fix.rewrite.text.statements import body_statements, siblings_of
from pallas_fix.rewrite.text.syntax import code, variable_names


@dataclass(frozen=True)
class HeldCall:
    """A helper (holding a loop, or building a call's specs) that its caller runs once, by the
    top-level statement `statement` (`call`)."""

    helper: cst.FunctionDef
    call: cst.Call
    statement: cst.SimpleStatementLine


def held_loop(ctx: ModuleContext, kernel: cst.FunctionDef, loop: LoopInfo) -> Optional[HeldCall]:
    """The helper whose top level holds the loop, called from the kernel's top level; None where
    the loop sits elsewhere (the other nesting refusals speak for it). Raises Refuse where the
    helper is called in a way inlining cannot keep."""
    helper = ctx.parent(ctx.parent(loop.statement)) if loop.statement is not None else None
    if not isinstance(helper, cst.FunctionDef) or helper is kernel or loop.statement not in body_statements(helper):
        return None
    return _held_call(ctx, kernel, helper, f"the loop sits inside `{helper.name.value}` (line {ctx.span(helper).line})")


def held_spec_helper(ctx: ModuleContext, fn: cst.FunctionDef, name: str) -> Optional[HeldCall]:
    """The module function that builds the specs `name` the pallas_call in `fn` is passed
    (`in_specs, out_specs = get_specs(seq_len, d)`, a top-level statement of `fn`, the only
    binding of `name` there): inlined, its BlockSpecs stand in `fn`, where a lift can read and
    edit them. None where `name` is bound otherwise."""
    if sum(1 for bound in bindings(fn.body, nested=False) if bound == name) != 1:
        return None
    stmt = next((s for s in body_statements(fn) if isinstance(s, cst.SimpleStatementLine) and len(s.body) == 1
                 and isinstance(s.body[0], cst.Assign) and any(name in target_names(t.target) for t in s.body[0].targets)), None)
    call = stmt.body[0].value if stmt is not None else None
    if not (isinstance(call, cst.Call) and isinstance(call.func, cst.Name)):
        return None
    helper = ctx.resolve_def(call.func.value, call)
    if helper is None or not any(s is helper for s in ctx.module.body):
        return None
    return _held_call(ctx, fn, helper, f"`{name}` is built by `{helper.name.value}` (line {ctx.span(helper).line})")


def _held_call(ctx: ModuleContext, kernel: cst.FunctionDef, helper: cst.FunctionDef, where: str) -> Optional[HeldCall]:
    """`helper` as `kernel` runs it: once, by a whole top-level statement; None where `kernel`
    does not call it. Raises Refuse (saying `where` the code in question sits) otherwise."""
    name = helper.name.value
    uses = [n for n in walk(ctx.module) if isinstance(n, cst.Name) and n.value == name and n is not helper.name]
    calls = [n for n in uses if isinstance(ctx.parent(n), cst.Call) and ctx.parent(n).func is n]
    in_kernel = [c for c in calls if kernel in ctx.ancestors(c)]
    if not in_kernel:
        return None
    if any(helper in ctx.ancestors(n) for n in uses):
        raise Refuse(f"{where}, which calls itself: its body cannot be inlined into `{kernel.name.value}`")
    if len(uses) > 1:
        raise Refuse(f"{where}, which is used {len(uses)} times: inlined into `{kernel.name.value}` it would change "
                     f"for its other callers too; give `{kernel.name.value}` a helper of its own, or inline it")
    call = ctx.parent(in_kernel[0])
    statement = ctx.parent(ctx.parent(call))
    small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 else None
    whole = isinstance(small, (cst.Expr, cst.Assign, cst.AnnAssign)) and small.value is call
    if not whole or statement not in body_statements(kernel):
        raise Refuse(f"{where}, and `{kernel.name.value}` calls it inside a larger statement or block (line "
                     f"{ctx.span(call).line}); call it as a top-level statement of `{kernel.name.value}` (`x = {name}(...)`)")
    return HeldCall(helper, call, statement)


def inlined_source(ctx: ModuleContext, kernel: cst.FunctionDef, held: HeldCall) -> str:
    """The module's text with the helper's body in place of its call in `kernel` (or the
    wrapper, for a specs helper), as the module docstring says."""
    helper = held.helper
    _check_helper(ctx, helper)
    scopes = MetadataWrapper(ctx.module, unsafe_skip_copy=True).resolve(ScopeProvider)
    own = scopes.get(body_statements(helper)[0])
    if own is None:
        raise Refuse(f"pallas-fix cannot read the scope of `{helper.name.value}`")
    _check_globals(ctx, scopes, helper, kernel)
    binds, bound = _bindings(own, held)
    clash = sorted((set(bindings(helper.body, nested=False)) | bound) & _kernel_names(kernel, held) - _rebound_by_call(kernel, held))
    if clash:
        raise Refuse(f"inlining `{helper.name.value}` into `{kernel.name.value}` would bind `{clash[0]}`, a name "
                     f"`{kernel.name.value}` uses too; rename one of them")
    edits: dict = {held.statement: splice(held.statement, _inlined_statements(held, binds, _renames(own, held)))}
    if _removable(ctx, helper):
        remove_statement(edits, helper, siblings_of(ctx, helper))
    return apply_edits(ctx.module, edits)[0].code


def _bindings(own, held: HeldCall) -> tuple[list[cst.BaseStatement], set[str]]:
    """The assignments of the parameters not substituted by a name (`q = q_ref[...] * scale`),
    in the call's order, and the parameters they bind (locals of the caller from then on). A
    parameter passed the caller's name of the same spelling, and never rebound, needs none."""
    names = variable_names(held.helper)
    binds: list[cst.BaseStatement] = []
    bound: set[str] = set()
    for param, arg in _bound_arguments(held.helper, held.call):
        if _substitution(own, param, arg, names) is not None:
            continue
        if not (isinstance(arg, cst.Name) and arg.value == param and len(own.assignments[param]) == 1):
            binds.append(cst.parse_statement(f"{param} = {code(arg)}\n"))
            bound.add(param)
    return binds, bound


def _inlined_statements(held: HeldCall, binds: list, renames: dict[int, str]) -> list[cst.BaseStatement]:
    """What replaces the call's statement: the bindings, the renamed body, the result's
    assignment; the docstring's lines above them, the return's comments above the assignment."""
    doc, body, final, comments = _renamed_body(held.helper, renames)
    result = result_statements(held.statement, final.value if final is not None else None, held.helper)
    if result and comments:  # what was said of the return is said of the assignment that replaces it
        result[0] = result[0].with_changes(leading_lines=comments)
    stmts = [*binds, *body, *result]
    if doc and stmts:  # what the docstring says of the helper is said above its inlined body
        stmts[0] = stmts[0].with_changes(leading_lines=[*doc, *stmts[0].leading_lines])
    return stmts


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


def renamed(ctx: ModuleContext, held: HeldCall, node: cst.CSTNode) -> str:
    """The text of `node` (inside the helper) as the inlined body spells it."""
    own = MetadataWrapper(ctx.module, unsafe_skip_copy=True).resolve(ScopeProvider).get(body_statements(held.helper)[0])
    return code(node.visit(Renamer(_renames(own, held)))) if own is not None else code(node)


def _renames(own, held: HeldCall) -> dict[int, str]:
    """id of each read of a parameter passed a plain name -> that name (`_substitution`)."""
    names = variable_names(held.helper)
    out: dict[int, str] = {}
    for param, arg in _bound_arguments(held.helper, held.call):
        substituted = _substitution(own, param, arg, names)
        if substituted is not None:
            out.update({id(access.node): substituted for access in _reads(own, param)})
    return out


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


def _kernel_names(kernel: cst.FunctionDef, held: HeldCall) -> set[str]:
    """Every name the kernel mentions outside the helper's def (when the helper is its own),
    its parameters and the call's arguments and targets included."""
    names: set[str] = set()
    for stmt in body_statements(kernel):
        if stmt is not held.helper:
            names |= variable_names(stmt)
    return names | variable_names(kernel.params)


def _rebound_by_call(kernel: cst.FunctionDef, held: HeldCall) -> set[str]:
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


def _check_globals(ctx: ModuleContext, scopes, helper: cst.FunctionDef, kernel: cst.FunctionDef) -> None:
    """A name the helper (or a function inside it) reads from the module or the builtins, which
    the kernel (or a function around it: a factory) binds: inlined, it would read that value."""
    around = [kernel, *(a for a in ctx.ancestors(kernel) if isinstance(a, cst.FunctionDef))]
    inner = {id(scopes[n]): scopes[n] for n in walk(helper.body) if n in scopes}
    for scope in inner.values():
        if isinstance(scope, GlobalScope):
            continue
        for access in scope.accesses:
            referents = access.referents
            if referents and not all(isinstance(r.scope, (GlobalScope, BuiltinScope)) for r in referents):
                continue
            name = access.node.value if isinstance(access.node, cst.Name) else None
            binder = next((fn for fn in around if _bound_in_kernel(fn, name)), None) if name is not None else None
            if binder is not None:
                raise Refuse(f"`{helper.name.value}` reads the module's `{name}`, which `{binder.name.value}` binds "
                             f"too: inlined into `{kernel.name.value}`, the helper's body would read that value; rename "
                             "one of them")


def _bound_in_kernel(kernel: cst.FunctionDef, name: str) -> bool:
    params = {p.name.value for p in [*kernel.params.posonly_params, *kernel.params.params, *kernel.params.kwonly_params]}
    for extra in (kernel.params.star_arg, kernel.params.star_kwarg):
        if isinstance(extra, cst.Param):
            params.add(extra.name.value)
    return name in params or name in set(bindings(kernel.body, nested=False))


# -- the inlined text --------------------------------------------------------------------------------
def _renamed_body(helper: cst.FunctionDef, renames: dict[int, str]) -> tuple[list, list[cst.BaseStatement], Optional[cst.Return], list]:
    """The helper's docstring as comment lines, its statements with the parameters substituted
    (its final `return` taken off), that return, and the comment lines above it."""
    renamer = Renamer(renames)
    stmts = [s.visit(renamer) for s in body_statements(helper)]
    final, comments = None, []
    last = stmts[-1] if stmts else None
    if isinstance(last, cst.SimpleStatementLine) and isinstance(last.body[0], cst.Return):
        final = last.body[0]
        comments = [l for l in last.leading_lines if l.comment is not None]
        stmts = stmts[:-1]
    doc, stmts = docstring(stmts)
    if stmts:
        stmts[0] = stmts[0].with_changes(leading_lines=trimmed(stmts[0].leading_lines))
    return doc, stmts, final, comments


def _removable(ctx: ModuleContext, helper: cst.FunctionDef) -> bool:
    """The helper's def goes with its only call where no other module can import it: a function
    nested in another, or a module-level one whose name is private (`_kv_loop`) and that the
    module does not export by `__all__`. A public module-level helper stays: pallas-fix sees one
    file, and another may import it."""
    name = helper.name.value
    if ctx.scope_of(helper) is not ctx.module:
        return True
    exported = any(isinstance(n, cst.SimpleString) and n.evaluated_value == name for n in walk(ctx.module))
    return name.startswith("_") and not exported
