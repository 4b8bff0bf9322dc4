"""Does an expression written in one place mean the same in another?

`kern = functools.partial(k, bs=block); block = block * 4; pl.pallas_call(kern, ...)`: the kernel
got the `block` of the partial, so a BlockSpec written at the pallas_call must not say `block`.
An expression means the same at `at` as where it stands when every name it reads resolves to the
same scope from both places and no binding of that name can run between the two: none lies
between them in the scope's code, none sits in a loop around `at` that does not also hold the
expression, and, when `at` runs later from a nested function, none follows the expression at all.

The same question runs the other way round where the place that reads the value runs first: a
pallas_call built as `call = pl.pallas_call(...)` gets its operands where `call(x)` runs, so a
size written at the pallas_call as `x.shape[1]` means the operand's only when no binding of `x`
can run between the two (`x = jnp.pad(x, ...)` there makes it the unpadded width).
`value_change` says which binding, for a refusal that names it.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Optional

import libcst as cst

from pallas_fix.analysis.values.bindings import Unpack, scope_bindings
from pallas_fix.analysis.context import ModuleContext, Scope, walk

_LOOPS = (cst.For, cst.While)
_DEFERRED = (cst.FunctionDef, cst.ClassDef, cst.Lambda)
# Each scope's bindings, per context (a context's tree never changes): rewrites ask about the
# same operand and sizes many times per plan.
_BINDINGS: "weakref.WeakKeyDictionary[ModuleContext, dict]" = weakref.WeakKeyDictionary()


def same_value_at(ctx: ModuleContext, expr: cst.BaseExpression, at: cst.CSTNode) -> bool:
    return value_change(ctx, expr, at) is None


@dataclass(frozen=True)
class Change:
    """A name an expression reads that may hold another value at the other place: `line` is a
    binding of it that can run in between, None when the two places do not even see the same
    variable (or the expression is not in the module)."""

    name: str
    line: Optional[int]


def value_change(ctx: ModuleContext, expr: cst.BaseExpression, at: cst.CSTNode, *, either_order: bool = False) -> Optional[Change]:
    """None when `expr` means at `at` what it means where it stands; else the first name it reads
    whose value may differ. `either_order`: `at` may run first (a pallas_call built before the
    invocation that passes it `expr`); the code between the two must then not rebind the names."""
    if ctx.parent(expr) is None:
        return Change("", None)  # not in the module (built by a rewrite): no place to compare from
    if _within(ctx, expr, at):
        return None  # evaluated as part of `at` itself
    first, then = (at, expr) if either_order and _position(ctx, at) < _position(ctx, expr) else (expr, at)
    for name in _names_read(ctx, expr):
        change = name_change(ctx, name, first, then)
        if change is not None:
            return change
    return None


def _names_read(ctx: ModuleContext, expr: cst.BaseExpression) -> list[str]:
    """Names `expr` evaluates (not attribute names, keywords, or the parameters of a lambda in
    it, read in its body: an index_map's `i`)."""
    out = []
    for node in walk(expr):
        if not isinstance(node, cst.Name):
            continue
        parent = ctx.parent(node)
        if isinstance(parent, cst.Attribute) and parent.attr is node:
            continue
        if isinstance(parent, cst.Param) or (isinstance(parent, cst.Arg) and parent.keyword is node):
            continue
        if _lambda_param(ctx, node, expr):
            continue
        out.append(node.value)
    return out


def _lambda_param(ctx: ModuleContext, name: cst.Name, expr: cst.BaseExpression) -> bool:
    for anc in ctx.ancestors(name):
        if isinstance(anc, cst.Lambda) and name.value in _params(anc):
            return True
        if anc is expr:
            return False
    return False


def name_change(ctx: ModuleContext, name: str, first: cst.CSTNode, then: cst.CSTNode) -> Optional[Change]:
    """None when `name` holds at `then` the value it holds at `first`, which runs before it;
    else the binding that may run in between (analysis.same_value.Change)."""
    scope = _binding_scope(ctx, name, first)
    if scope is not _binding_scope(ctx, name, then):
        return Change(name, None)
    if scope is None:
        return None  # a builtin, or a module name bound nowhere in this file: the same everywhere
    nodes = _binding_nodes(ctx, scope, name)
    start, end = _position(ctx, first), _position(ctx, then)
    holder = _holder(ctx, scope, then)
    if holder is not None and isinstance(holder, _DEFERRED) and not _within(ctx, first, holder):
        return _first_line(ctx, name, [n for n in nodes if _position(ctx, n) > start])  # `then` runs whenever its function is called
    if end < start:
        return Change(name, None)
    # Planning one kernel variant (analysis.discovery.variants.ArmPin), the other arms of the `if`
    # that picks it do not run on its path.
    between = [n for n in nodes if start < _position(ctx, n) < end and not (ctx.arm_pin and ctx.arm_pin.elsewhere(ctx, n))]
    if between:
        return _first_line(ctx, name, between)
    for loop in _loops_around(ctx, scope, then):
        inside = [n for n in nodes if _within(ctx, n, loop)]
        if not _within(ctx, first, loop) and inside:
            return _first_line(ctx, name, inside)
    return None


def bound_after(ctx: ModuleContext, name: str, first: cst.CSTNode) -> Optional[Change]:
    """The first binding of `name` that follows `first`, in the scope `first` sees it from: code
    that runs after that scope's statements are done (a function it returns) sees the last one."""
    scope = _binding_scope(ctx, name, first)
    if scope is None:
        return None
    start = _position(ctx, first)
    return _first_line(ctx, name, [n for n in _binding_nodes(ctx, scope, name) if _position(ctx, n) > start])


def _first_line(ctx: ModuleContext, name: str, nodes: list[cst.CSTNode]) -> Optional[Change]:
    """The earliest of the bindings `nodes` of `name`, None when there is none."""
    if not nodes:
        return None
    return Change(name, ctx.span(min(nodes, key=lambda n: _position(ctx, n))).line)


def _bindings(ctx: ModuleContext, scope: Scope) -> dict:
    per_scope = _BINDINGS.setdefault(ctx, {})
    if id(scope) not in per_scope:
        per_scope[id(scope)] = (scope, scope_bindings(ctx, scope))  # the scope kept: its id stays unique
    return per_scope[id(scope)][1]


def _binding_scope(ctx: ModuleContext, name: str, at: cst.CSTNode) -> Optional[Scope]:
    for scope in ctx.scope_chain(at):
        if name in _bindings(ctx, scope) or name in _params(scope):
            return scope
    return None


def _binding_nodes(ctx: ModuleContext, scope: Scope, name: str) -> list[cst.CSTNode]:
    nodes = []
    for _how, node in _bindings(ctx, scope).get(name, []):
        nodes.append(node.value if isinstance(node, Unpack) else node)
    return [n for n in nodes if isinstance(n, cst.CSTNode)]


def _params(scope: Scope) -> set[str]:
    if not isinstance(scope, (cst.FunctionDef, cst.Lambda)):
        return set()
    p = scope.params
    names = {x.name.value for x in [*p.posonly_params, *p.params, *p.kwonly_params]}
    names |= {s.name.value for s in (p.star_arg, p.star_kwarg) if isinstance(s, cst.Param)}
    return names


def _holder(ctx: ModuleContext, scope: Scope, node: cst.CSTNode) -> Optional[cst.CSTNode]:
    """The statement of `scope`'s own body that holds `node`."""
    below: list[cst.CSTNode] = []
    for anc in [node, *ctx.ancestors(node)]:
        if anc is scope:
            depth = 1 if isinstance(scope, cst.Module) else 2  # a def's statements sit in its block
            return below[-depth] if len(below) >= depth else None
        below.append(anc)
    return None


def _loops_around(ctx: ModuleContext, scope: Scope, node: cst.CSTNode) -> list[cst.CSTNode]:
    loops = []
    for anc in ctx.ancestors(node):
        if anc is scope:
            break
        if isinstance(anc, _LOOPS):
            loops.append(anc)
    return loops


def _within(ctx: ModuleContext, node: cst.CSTNode, outer: cst.CSTNode) -> bool:
    return node is outer or any(a is outer for a in ctx.ancestors(node))


def _position(ctx: ModuleContext, node: cst.CSTNode) -> tuple[int, int]:
    span = ctx.span(node)
    return span.line, span.column
