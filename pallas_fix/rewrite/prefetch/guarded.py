"""A gathered window the kernel reads only under a traced condition (`@pl.when(src >= 0)`, a
branch of `lax.cond`): R6 refuses it. An index_map runs on every grid step, so the table entry
of a step whose read the kernel skips would still name the block to copy, and the guard says
such entries exist (a -1 for "no block", a page past a sequence's end): out of the array, an
IndexError in TPU interpret mode and an out-of-bounds copy on the chip, where the original ran."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from pallas_fix.analysis.context import walk
from pallas_fix.core import names as N
from pallas_fix.core.plans import Refuse
from pallas_fix.rewrite.text.syntax import code

_BRANCHING = N.COND | N.SWITCH


def check_unguarded(ctx, kernel: cst.FunctionDef, ref: str, subscripts: list[cst.Subscript]) -> None:
    for sub in subscripts:
        why = _guard_of(ctx, kernel, sub)
        if why is not None:
            raise Refuse(
                f"the window on `{ref}` (line {ctx.span(sub).line}) is read only {why}, while its index_map would run on "
                "every grid step: the table entry of a step whose read the kernel skips need not name a block (a -1 for "
                "none, a page past a sequence's end), yet the index_map would copy the block it names; pallas-fix does "
                "not clamp it, so write that index_map by hand with the entry clamped into the array, or drop the guard "
                "if every entry names a block"
            )


def _guard_of(ctx, kernel: cst.FunctionDef, node: cst.CSTNode) -> Optional[str]:
    """How `node` is guarded: `under pl.when(...)` or `in a branch of lax.cond`; None if not."""
    for anc in ctx.ancestors(node):
        if anc is kernel:
            return None
        if isinstance(anc, cst.Lambda) and _branch_lambda(ctx, anc):
            return "in a lambda branch of lax.cond / lax.switch"
        if not isinstance(anc, cst.FunctionDef):
            continue
        for dec in anc.decorators:
            d = dec.decorator
            if isinstance(d, cst.Call) and (ctx.imports.qualify(d.func) or "").endswith(".when") and d.args:
                return f"under `pl.when({code(d.args[0].value)})`"
        if _branch_function(ctx, kernel, anc.name.value):
            return f"in `{anc.name.value}`, a branch of lax.cond / lax.switch"
    return None


def _branch_function(ctx, kernel: cst.FunctionDef, name: str) -> bool:
    for n in walk(kernel):
        if isinstance(n, cst.Call) and ctx.imports.is_(n.func, _BRANCHING):
            if any(isinstance(x, cst.Name) and x.value == name for a in n.args for x in walk(a.value)):
                return True
    return False


def _branch_lambda(ctx, lam: cst.Lambda) -> bool:
    """`lam` is an argument (or inside one, a list of branches) of a lax.cond / lax.switch call."""
    for anc in ctx.ancestors(lam):
        if isinstance(anc, cst.Call):
            return ctx.imports.is_(anc.func, _BRANCHING)
        if isinstance(anc, (cst.FunctionDef, cst.Lambda)):
            return False
    return False
