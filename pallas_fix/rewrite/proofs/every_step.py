"""Whether a kernel reads a window in every grid step: what lets a block read in lockstep with a
proved operand take that operand's extent (rewrite.proofs.bounds, Bounds.check_blocks).

The lockstep argument is that were the array shorter, the original would read past its end. That
holds only for a read every step makes: `@pl.when(i * BM < r_ref.shape[0])` around `r_ref[pl.ds(i *
BM, BM)]` reads a shorter `r` only where it has rows, while its BlockSpec would still fetch a block
past the end in the other steps (an out-of-bounds block on a TPU; red-team)."""

from __future__ import annotations

import libcst as cst

from pallas_fix.analysis.context import ModuleContext, walk

# Calls that run a function they are given only on some condition (or some number of times, maybe none).
_CONDITIONAL_CALLS = ("cond", "switch", "while_loop", "when")


def read_every_step(ctx: ModuleContext, kernel: cst.FunctionDef, node: cst.CSTNode, depth: int = 0) -> bool:
    """`node` runs in every grid step the kernel runs it in at all: no `pl.when` body and no
    `lax.cond` / `switch` / `while_loop` branch lies between it and the kernel. A Python `if` is
    decided when the kernel is traced, the same in every step (`if b_ref is not None:`). In a
    helper the kernel calls, every call of it must be read every step."""
    for anc in ctx.ancestors(node):
        if anc is kernel:
            return True
        if isinstance(anc, cst.FunctionDef) and (any(_conditional(ctx, d.decorator) for d in anc.decorators)
                                                 or _passed_to_conditional(ctx, kernel, anc.name.value)):
            return False
        if isinstance(anc, cst.Lambda) and isinstance(call := _call_of_arg(ctx, anc), cst.Call) and _conditional(ctx, call):
            return False
        if isinstance(anc, cst.FunctionDef) and isinstance(ctx.parent(anc), cst.Module):  # a helper
            calls = [n for n in walk(kernel) if isinstance(n, cst.Call) and isinstance(n.func, cst.Name)
                     and n.func.value == anc.name.value]
            return depth < 4 and bool(calls) and all(read_every_step(ctx, kernel, c, depth + 1) for c in calls)
    return False


def _conditional(ctx: ModuleContext, node: cst.BaseExpression) -> bool:
    func = node
    while isinstance(func, cst.Call):  # `pl.when(c)(body)`: the call `pl.when(c)` makes
        func = func.func
    name = ctx.imports.qualify(func) or (func.value if isinstance(func, cst.Name) else "")
    return name.rsplit(".", 1)[-1] in _CONDITIONAL_CALLS


def _passed_to_conditional(ctx: ModuleContext, kernel: cst.FunctionDef, name: str) -> bool:
    """The def `name` is handed to a conditional call in the kernel (`lax.cond(p, branch, ...)`,
    `pl.when(p)(body)`)."""
    return any(isinstance(n, cst.Call) and _conditional(ctx, n) and any(
        isinstance(a.value, cst.Name) and a.value.value == name for a in n.args) for n in walk(kernel))


def _call_of_arg(ctx: ModuleContext, node: cst.CSTNode):
    arg = ctx.parent(node)
    return ctx.parent(arg) if isinstance(arg, cst.Arg) else None
