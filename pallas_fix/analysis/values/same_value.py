"""Does an expression written in one place mean the same in another?

`kern = functools.partial(k, bs=block); block = block * 4; pl.pallas_call(kern, ...)`: the kernel
got the `block` of the partial, so a BlockSpec written at the pallas_call must not say `block`.
An expression means the same at `at` as where it stands when every name it reads resolves to the
same scope from both places and no binding of that name can run between the two: none lies
between them in the scope's code, none sits in a loop around `at` that does not also hold the
expression, and, when `at` runs later from a nested function, none follows the expression at all.
"""

from __future__ import annotations

from typing import Optional

import libcst as cst

from pallas_fix.analysis.values.bindings import Unpack, scope_bindings
from pallas_fix.analysis.context import ModuleContext, Scope, walk

_LOOPS = (cst.For, cst.While)
_DEFERRED = (cst.FunctionDef, cst.ClassDef, cst.Lambda)


def same_value_at(ctx: ModuleContext, expr: cst.BaseExpression, at: cst.CSTNode) -> bool:
    if ctx.parent(expr) is None:
        return False  # not in the module (built by a rewrite): no place to compare from
    if _within(ctx, expr, at):
        return True  # evaluated as part of `at` itself
    return all(_same_binding(ctx, name, expr, at) for name in _names_read(ctx, expr))


def _names_read(ctx: ModuleContext, expr: cst.BaseExpression) -> list[str]:
    """Names `expr` evaluates (not attribute names, keywords or lambda parameters)."""
    out = []
    for node in walk(expr):
        if not isinstance(node, cst.Name):
            continue
        parent = ctx.parent(node)
        if isinstance(parent, cst.Attribute) and parent.attr is node:
            continue
        if isinstance(parent, cst.Param) or (isinstance(parent, cst.Arg) and parent.keyword is node):
            continue
        out.append(node.value)
    return out


def _same_binding(ctx: ModuleContext, name: str, expr: cst.BaseExpression, at: cst.CSTNode) -> bool:
    scope = _binding_scope(ctx, name, expr)
    if scope is not _binding_scope(ctx, name, at):
        return False
    if scope is None:
        return True  # a builtin, or a module name bound nowhere in this file: the same everywhere
    positions = [_position(ctx, node) for node in _binding_nodes(ctx, scope, name)]
    start, end = _position(ctx, expr), _position(ctx, at)
    holder = _holder(ctx, scope, at)
    if holder is not None and isinstance(holder, _DEFERRED) and not _within(ctx, expr, holder):
        return not any(p > start for p in positions)  # `at` runs whenever its function is called
    if end < start:
        return False
    if any(start < p < end for p in positions):
        return False
    for loop in _loops_around(ctx, scope, at):
        if not _within(ctx, expr, loop) and any(_within(ctx, node, loop) for node in _binding_nodes(ctx, scope, name)):
            return False
    return True


def _binding_scope(ctx: ModuleContext, name: str, at: cst.CSTNode) -> Optional[Scope]:
    for scope in ctx.scope_chain(at):
        if name in scope_bindings(ctx, scope) or name in _params(scope):
            return scope
    return None


def _binding_nodes(ctx: ModuleContext, scope: Scope, name: str) -> list[cst.CSTNode]:
    nodes = []
    for _how, node in scope_bindings(ctx, scope).get(name, []):
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
