"""Kernel arguments of a pallas_call that name a def other than by its name or a
functools.partial of it: a factory's call (`make_kernel(tile)`, the def it returns) and a lambda
that forwards every ref (`lambda *refs: kernel(*refs, bs=8)`, a partial in effect). Imports only
the context."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from pallas_fix.analysis.context import ModuleContext, walk


def forwarded_call(expr: cst.BaseExpression) -> Optional[cst.Call]:
    """The call a lambda forwards its refs to, `kernel(*refs, bs=8)` in `lambda *refs: kernel(*refs,
    bs=8)` (or `lambda a, b: kernel(a, b, bs=8)`): every parameter passed on in order, then keywords
    only; None for any other lambda."""
    if not isinstance(expr, cst.Lambda) or not isinstance(expr.body, cst.Call):
        return None
    ps, call = expr.params, expr.body
    if ps.kwonly_params or ps.star_kwarg is not None or ps.posonly_params or any(p.default for p in ps.params):
        return None
    names = [p.name.value for p in ps.params]
    star = ps.star_arg.name.value if isinstance(ps.star_arg, cst.Param) else None
    passed = [a for a in call.args if a.keyword is None]
    want = [(n, "") for n in names] + ([(star, "*")] if star else [])
    got = [(a.value.value if isinstance(a.value, cst.Name) else None, a.star) for a in passed]
    if not want or got != want or any(a.star == "**" for a in call.args):
        return None
    if any(isinstance(n, cst.Name) and n.value in names + [star] for a in call.args if a.keyword is not None for n in walk(a.value)):
        return None  # a keyword computed from a ref
    return call


def factory_kernel(ctx: ModuleContext, factory: Optional[cst.FunctionDef]) -> Optional[cst.FunctionDef]:
    """The def a kernel factory returns (`def make_kernel(tile): def kernel(...): ...; return
    kernel`): every `return` of the factory's own body names one def nested directly in it."""
    if factory is None or not isinstance(factory.body, cst.IndentedBlock):
        return None
    nested = {s.name.value: s for s in factory.body.body if isinstance(s, cst.FunctionDef)}
    returned = {
        node.value.value if isinstance(node.value, cst.Name) else None
        for node in walk(factory.body)
        if isinstance(node, cst.Return) and ctx.enclosing_function(node) is factory
    }
    if len(returned) != 1:
        return None
    (name,) = returned
    return nested.get(name) if name is not None else None
