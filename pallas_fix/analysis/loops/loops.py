"""Find the `lax.fori_loop` / `pl.loop` bodies of a module and what each loop looks like.

A body is a def or lambda; `functools.partial(body, ...)` may bind its leading parameters, so the
loop's index is the first parameter the partial leaves free. A loop "carries" a value when its
body returns something other than the carry it was given.
"""

from __future__ import annotations

from typing import Iterator, Optional

import libcst as cst

from pallas_fix.core import names as N
from pallas_fix.analysis.context import ModuleContext, walk
from pallas_fix.core.model import LoopInfo
from pallas_fix.core.names import call_arg


def find_loops(ctx: ModuleContext) -> dict[cst.CSTNode, LoopInfo]:
    """Every fori_loop / pl.loop body (def or lambda) in the module, mapped to its loop."""
    loops: dict[cst.CSTNode, LoopInfo] = {}
    for node in ctx.nodes_of(cst.Call, cst.FunctionDef):  # from the index: no walk over every node
        if isinstance(node, cst.Call) and ctx.imports.is_(node.func, N.FORI_LOOP):
            info = _fori_loop(ctx, node)
            if info is not None:
                loops[info.body] = info
        elif isinstance(node, cst.FunctionDef):
            for dec in node.decorators:
                if isinstance(dec.decorator, cst.Call) and ctx.imports.is_(dec.decorator.func, N.PL_LOOP):
                    info = _pl_loop(node, dec.decorator)
                    if info is not None:
                        loops[node] = info
    return loops


def describe_loop(ctx: ModuleContext, loop: LoopInfo) -> str:
    head = "pl.loop" if loop.kind == "pl.loop" else "lax.fori_loop"
    line = ctx.span(loop.call).line
    carry = "carries a value (a reduction)" if loop.carries else "carries nothing"
    return (
        f"the index `{loop.index_name}` of {head}({ctx.code(loop.lower)}, {ctx.code(loop.upper)}) "
        f"on line {line}, which {carry}"
    )


def _params(fn: cst.FunctionDef | cst.Lambda) -> list[str]:
    return [p.name.value for p in fn.params.params]


def _fori_body(ctx: ModuleContext, call: cst.Call, body_expr: cst.BaseExpression):
    """(body def or lambda, parameters functools.partial fills before the loop's (i, carry))."""
    if isinstance(body_expr, cst.Lambda):
        return body_expr, set()
    if isinstance(body_expr, cst.Name):
        return ctx.resolve_def(body_expr.value, call), set()
    if isinstance(body_expr, cst.Call) and ctx.imports.is_(body_expr.func, N.PARTIAL) and body_expr.args:
        inner = body_expr.args[0].value
        body = ctx.resolve_def(inner.value, call) if isinstance(inner, cst.Name) else None
        if body is None:
            return None, set()
        n_pos = sum(1 for a in body_expr.args[1:] if a.keyword is None and not a.star)
        keywords = {a.keyword.value for a in body_expr.args[1:] if a.keyword is not None}
        return body, set(_params(body)[:n_pos]) | keywords
    return None, set()


def _fori_loop(ctx: ModuleContext, call: cst.Call) -> Optional[LoopInfo]:
    lower, upper = call_arg(call, 0, "lower"), call_arg(call, 1, "upper")
    body_expr, init = call_arg(call, 2, "body_fun"), call_arg(call, 3, "init_val")
    if lower is None or upper is None or body_expr is None:
        return None
    body, bound = _fori_body(ctx, call, body_expr)
    if body is None:
        return None
    free = [p for p in _params(body) if p not in bound]
    if not free:
        return None
    parent = ctx.parent(call)
    single_target = isinstance(parent, cst.Assign) and len(parent.targets) == 1
    return LoopInfo(
        "fori_loop", call, body, free[0], lower, upper, None,
        carries=_body_carries(ctx, body, init, free) and not _dead_carry(body, free, isinstance(parent, cst.Expr)),
        statement=ctx.statement_of(call),
        init=init,
        result_target=parent.targets[0].target if single_target else None,
    )


def _pl_loop(fn: cst.FunctionDef, dec: cst.Call) -> Optional[LoopInfo]:
    lower, upper = call_arg(dec, 0, "lower"), call_arg(dec, 1, "upper")
    if lower is None or upper is None or not _params(fn):
        return None
    init = call_arg(dec, 99, "init_carry")
    return LoopInfo(
        "pl.loop", dec, fn, _params(fn)[0], lower, upper, call_arg(dec, 99, "step"),
        carries=not _is_none(init),
        statement=fn,
        init=init,
    )


def _is_none(expr: Optional[cst.BaseExpression]) -> bool:
    return expr is None or (isinstance(expr, cst.Name) and expr.value == "None")


def _body_carries(ctx: ModuleContext, body: cst.FunctionDef | cst.Lambda, init, params: list[str]) -> bool:
    if _is_none(init):
        return False
    if len(params) < 2:
        return True
    carry = params[1]
    if isinstance(body, cst.Lambda):
        return not (isinstance(body.body, cst.Name) and body.body.value == carry)
    returns = [n for n in own_nodes(body) if isinstance(n, cst.Return)]
    if not returns:
        return True
    if len(returns) == 1 and threads_carry(ctx, returns[0].value, carry):
        return False
    if not all(isinstance(r.value, cst.Name) and r.value.value == carry for r in returns):
        return True
    # `acc += x; return acc` returns the carry's name but a new value.
    return any(_rebinds(n, carry) for n in own_nodes(body))


def _dead_carry(body: cst.FunctionDef | cst.Lambda, params: list[str], discarded: bool) -> bool:
    """`def body(i, _): ...; return 0` run as a statement: the carry is never read, by the body or
    after the loop, and each step hands back a constant. Nothing flows from one step to the next
    (a loop run for its effects, written in the only form `fori_loop` takes), so the loop carries
    nothing. A return computing something (a call, which may write refs) keeps it a carry."""
    if not discarded or len(params) < 2 or not isinstance(body, cst.FunctionDef):
        return False
    carry = params[1]
    # Any read, a nested function's too: the first step sees `init`, the others the constant.
    if any(isinstance(n, cst.Name) and n.value == carry for n in walk(body.body)):
        return False
    returns = [n for n in own_nodes(body) if isinstance(n, cst.Return)]
    return bool(returns) and all(returns_constant(r) for r in returns)


def returns_constant(ret: cst.Return) -> bool:
    """`return 0`, `return -1.0`, `return None`, `return`: a value fixed before the loop runs."""
    value = ret.value
    if isinstance(value, cst.UnaryOperation) and isinstance(value.operator, cst.Minus):
        value = value.expression
    return value is None or isinstance(value, (cst.Integer, cst.Float)) or (isinstance(value, cst.Name) and value.value in ("None", "True", "False"))


def threads_carry(ctx: ModuleContext, value: Optional[cst.BaseExpression], carry: str) -> bool:
    """`return lax.fori_loop(lo, hi, inner, carry)` whose inner loop hands its own carry back
    unchanged: the outer carry is only threaded through (nested tile loops), not a reduction."""
    if not isinstance(value, cst.Call) or not ctx.imports.is_(value.func, N.FORI_LOOP):
        return False
    init = call_arg(value, 3, "init_val")
    if not (isinstance(init, cst.Name) and init.value == carry):
        return False
    body_expr = call_arg(value, 2, "body_fun")
    inner, bound = _fori_body(ctx, value, body_expr) if body_expr is not None else (None, set())
    free = [p for p in _params(inner) if p not in bound] if inner is not None else []
    return len(free) == 2 and not _body_carries(ctx, inner, init, free)


def _rebinds(node: cst.CSTNode, name: str) -> bool:
    if isinstance(node, cst.AugAssign):
        return isinstance(node.target, cst.Name) and node.target.value == name
    if isinstance(node, (cst.Assign, cst.AnnAssign)):
        targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
        for t in targets:
            names = [t] if isinstance(t, cst.Name) else [e.value for e in getattr(t, "elements", [])]
            if any(isinstance(x, cst.Name) and x.value == name for x in names):
                return True
    return False


def own_nodes(fn: cst.FunctionDef) -> Iterator[cst.CSTNode]:
    """The nodes of `fn`'s body, not entering nested functions or lambdas."""
    stack = list(reversed(fn.body.children))
    while stack:
        cur = stack.pop()
        yield cur
        if isinstance(cur, (cst.FunctionDef, cst.Lambda)):
            continue
        stack.extend(reversed(cur.children))
