"""A loop whose carry is only threaded through a nested loop: `def row(i, c): ...; return
lax.fori_loop(lo, hi, col, c)` where `col` hands its carry back unchanged (nested tile loops
written in the functional style). The outer carry always holds the initial value, so lifting the
outer loop keeps the inner loop as a statement that starts from that initial value."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from pallas_fix.analysis.context import ModuleContext
from pallas_fix.analysis.loops.loops import threads_carry
from pallas_fix.core.model import LoopInfo
from pallas_fix.core.names import call_arg
from pallas_fix.core.plans import Refuse
from pallas_fix.rewrite.text.statements import body_statements


def threaded_return(ctx: ModuleContext, body, carry: Optional[str]) -> Optional[cst.Return]:
    """The body's last statement, when it is `return <nested loop threading the carry>`."""
    if carry is None or not isinstance(body, cst.FunctionDef):
        return None
    stmts = body_statements(body)
    last = stmts[-1] if stmts else None
    if not isinstance(last, cst.SimpleStatementLine) or not isinstance(last.body[-1], cst.Return):
        return None
    ret = last.body[-1]
    return ret if threads_carry(ctx, ret.value, carry) else None


def threaded_carry_name(ctx: ModuleContext, ret: cst.Return) -> cst.Name:
    """The carry name the nested loop receives as its initial value."""
    init = call_arg(ret.value, 3, "init_val")  # type: ignore[arg-type]
    assert isinstance(init, cst.Name)
    return init


def check_threaded_init(loop: LoopInfo) -> None:
    """The nested loop will start from the outer loop's initial value, written where the outer
    loop was: only a constant keeps its meaning there without further checks."""
    init = loop.init
    constant = isinstance(init, (cst.Integer, cst.Float)) or (isinstance(init, cst.Name) and init.value in ("None", "True", "False"))
    if not constant:
        raise Refuse(
            "the loop threads its carry into the nested loop starting from a computed value; "
            "pass a constant (`0` or `None`) as the loops' initial carry"
        )


def as_statement(updated_return: cst.Return, init: cst.BaseExpression, carry: str) -> cst.SmallStatement:
    """`return lax.fori_loop(lo, hi, col, c)` -> `lax.fori_loop(lo, hi, col, <init>)`."""
    call = updated_return.value
    assert isinstance(call, cst.Call)
    args = [
        a.with_changes(value=init) if isinstance(a.value, cst.Name) and a.value.value == carry and (n == 3 or (a.keyword and a.keyword.value == "init_val")) else a
        for n, a in enumerate(call.args)
    ]
    return cst.Expr(call.with_changes(args=args))
