"""The syntax the effects model (analysis.effects.evaluator) walks: the nodes that run when some
statements run in their own scope, the subscripts an assignment writes, a function's
parameters, and the names comprehensions bind."""

from __future__ import annotations

from typing import Iterable, Iterator

import libcst as cst

from pallas_fix.analysis.binders import positional_names
from pallas_fix.analysis.context import ModuleContext


def param_names(fn: cst.FunctionDef | cst.Lambda) -> list[str]:
    ps = fn.params
    names = [*positional_names(fn), *(p.name.value for p in ps.kwonly_params)]
    if isinstance(ps.star_arg, cst.Param):
        names.append(ps.star_arg.name.value)
    if ps.star_kwarg is not None:
        names.append(ps.star_kwarg.name.value)
    return names


def subscript_targets(target: cst.CSTNode) -> Iterator[cst.Subscript]:
    """The subscripts an assignment target writes: `x_ref[...]`, or those inside `a[...], b = ...`."""
    if isinstance(target, cst.Subscript):
        yield target
    elif isinstance(target, (cst.Tuple, cst.List)):
        for el in target.elements:
            yield from subscript_targets(el.value)
    elif isinstance(target, cst.StarredElement):
        yield from subscript_targets(target.value)


def own_scope_nodes(ctx: ModuleContext, roots: Iterable[cst.CSTNode]) -> Iterator[cst.CSTNode]:
    """The nodes that run when `roots` run in their scope: nested defs and lambdas are yielded
    but not entered (their bodies run when called); class bodies run in place."""
    stack = list(reversed(list(roots)))
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, (cst.FunctionDef, cst.Lambda)):
            continue
        stack.extend(reversed(ctx.kids(node)))


def comprehension_targets(ctx: ModuleContext, scope: cst.CSTNode) -> Iterator[tuple[str, cst.BaseExpression]]:
    """(name, iterable) for each comprehension variable in the scope's own body: the model
    gives comprehensions their enclosing function's scope."""
    roots = ctx.body_statements(scope) if not isinstance(scope, cst.Lambda) else [scope.body]  # type: ignore[arg-type]
    for node in own_scope_nodes(ctx, roots):
        if isinstance(node, cst.CompFor):
            for name in _target_names(node.target):
                yield name, node.iter


def _target_names(target: cst.CSTNode) -> Iterator[str]:
    if isinstance(target, cst.Name):
        yield target.value
    elif isinstance(target, (cst.Tuple, cst.List)):
        for el in target.elements:
            yield from _target_names(el.value)
    elif isinstance(target, cst.StarredElement):
        yield from _target_names(target.value)
