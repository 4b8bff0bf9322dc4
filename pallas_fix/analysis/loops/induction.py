"""Loop carries that are induction variables: `def body(i, off): ...; return off + BS` from 0.

A carry that starts at a static value and grows by a static step every iteration holds
`init + step * k` at iteration k: the same kind of value as a loop index `lower + step * k`, so
the affine reading treats it as one (windows.hooks_for gives it the loop's atom with `init` as
its lower bound and `step` as its step). The carry is one whole parameter of the body, or a leaf of a
tuple carry that the body unpacks (`acc, off = carry`) and returns as a tuple written out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import libcst as cst

from pallas_fix.analysis.loops.affine import Hooks, decompose
from pallas_fix.core import names as N
from pallas_fix.core.model import LoopInfo


@dataclass(frozen=True)
class Induction:
    loop: LoopInfo
    init: cst.BaseExpression  # the static int the carry holds before the first iteration
    step: cst.BaseExpression  # the update with the carry read as 0: what one iteration adds


def carry_induction(loop: LoopInfo, body_env, is_carry: Callable[[cst.Name], bool], leaf: Optional[int] = None) -> Optional[Induction]:
    """The induction of a carry, when the body returns it plus a static step and the loop starts
    it at a static int. `is_carry` says whether a name read in the body reads the carry (the
    body's parameter, or the name `acc, off = carry` binds); `leaf`: its position in a tuple
    carry. `body_env` is the body's environment (provenance.Env)."""
    init, returned = loop.init, _returned(loop.body)
    if isinstance(init, cst.Name):
        init = body_env.reaching_assignment(init)  # `init = (acc0, 0)` before the loop
    if leaf is not None:
        init, returned = _element(init, leaf), _element(returned, leaf)
    init = _static_init(body_env, init)
    update = _resolved(body_env, returned, is_carry) if init is not None and returned is not None else None
    if update is None:
        return None
    reads = [n for n in _names(update) if is_carry(n)]
    if len(reads) != 1:
        return None
    step = update.deep_replace(reads[0], cst.Integer("0"))
    if not isinstance(step, cst.BaseExpression):
        return None
    hooks = _hooks(body_env, reads[0])
    step_aff = decompose(step, hooks)
    if step_aff is None or not step_aff.is_static() or step_aff.as_coeff() is None:
        return None  # a traced step (data, another carry) or one pallas-fix cannot write
    whole = decompose(update, hooks)
    if whole is None or set(whole.terms) != {"carry"} or whole.terms["carry"].mult != 1 or whole.terms["carry"].factors:
        return None
    return Induction(loop, init, step)


def _element(expr: Optional[cst.BaseExpression], n: int) -> Optional[cst.BaseExpression]:
    """Element `n` of a tuple written out (`(acc0, 0)`, `return acc, off + BS`)."""
    if not isinstance(expr, (cst.Tuple, cst.List)) or any(isinstance(e, cst.StarredElement) for e in expr.elements):
        return None
    return expr.elements[n].value if n < len(expr.elements) else None


def _static_init(env, init: Optional[cst.BaseExpression]) -> Optional[cst.BaseExpression]:
    """The static int a carry starts from: `0`, `c0`, or the argument of `jnp.int32(0)`."""
    if isinstance(init, cst.Call) and env.ctx.imports.is_(init.func, N.INT_DTYPES) and len(init.args) == 1:
        init = init.args[0].value
    return init if init is not None and env.static_int(init) is not None else None


def _returned(body: cst.FunctionDef | cst.Lambda) -> Optional[cst.BaseExpression]:
    """The value a body returns from its last statement, the only return it has."""
    if isinstance(body, cst.Lambda):
        return body.body
    stmts = list(body.body.body) if isinstance(body.body, cst.IndentedBlock) else []
    returns = [n for st in stmts for n in _returns_in(st)]
    last = stmts[-1] if stmts else None
    if len(returns) != 1 or not (isinstance(last, cst.SimpleStatementLine) and returns[0] in last.body):
        return None
    return returns[0].value


def _returns_in(stmt: cst.CSTNode) -> list[cst.Return]:
    out, stack = [], [stmt]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Return):
            out.append(node)
        elif not isinstance(node, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            stack.extend(node.children)
    return out


def _resolved(env, expr: cst.BaseExpression, is_carry: Callable[[cst.Name], bool]) -> Optional[cst.BaseExpression]:
    """`expr` with a returned name followed to what it holds (`off += BS; return off`)."""
    for _ in range(8):
        if not isinstance(expr, cst.Name) or is_carry(expr):
            return expr
        expr = env.reaching_assignment(expr)
        if expr is None:
            return None
    return None


def _names(expr: cst.CSTNode) -> list[cst.Name]:
    out, stack = [], [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Name):
            out.append(node)
        elif not isinstance(node, cst.Lambda):
            stack.extend(node.children)
    return out


def _hooks(env, read: cst.Name) -> Hooks:
    """Affine hooks that see the carry read `read` as an atom of its own and nothing else
    dynamic (the update must be `carry + step`, not `2 * carry` or `carry + i`)."""

    def strip(expr: cst.BaseExpression) -> Optional[cst.BaseExpression]:
        return None

    return Hooks(
        is_dynamic=lambda e: env.value(e).dynamic,
        atom_key=lambda e: "carry" if e is read else None,
        atom_bounds=lambda e: (None, None),
        static_int=env.static_int,
        inline=env.reaching_assignment,
        strip=strip,
        code=env.ctx.code,
    )
