"""Whether a kernel reads a window in every grid step: what lets a block read in lockstep with a
proved operand take that operand's extent (rewrite.proofs.bounds, Bounds.check_blocks).

The lockstep argument is that were the array shorter, the original would read past its end. That
holds only for a read every step makes: `@pl.when(i * BM < r_ref.shape[0])` around `r_ref[pl.ds(i *
BM, BM)]` reads a shorter `r` only where it has rows, while its BlockSpec would still fetch a block
past the end in the other steps (an out-of-bounds block on a TPU; red-team)."""

from __future__ import annotations

import libcst as cst

from pallas_fix.analysis.context import ModuleContext, walk

# Calls that run a function they are given only on some condition. Not `while_loop`: its trip count
# is most often a static bound carried as a counter (a K/V loop to `pl.cdiv(seqlen_k, kblock)`), and
# which carry counts is beyond this check; a per-step trip count there is not caught (a known gap).
_CONDITIONAL_CALLS = ("cond", "switch", "when")
# Loops whose body runs in a step only if the step's trip count is not 0: (lower, upper) positions.
_LOOP_CALLS = ("fori_loop", "loop")


def read_every_step(ctx: ModuleContext, kernel: cst.FunctionDef, env, node: cst.CSTNode, depth: int = 0) -> bool:
    """`node` runs in every grid step the kernel runs it in at all: no `pl.when` body and no
    `lax.cond` / `switch` branch, nor the body of a loop whose bounds are traced
    (`env`: the kernel's values), lies between it and the kernel. A Python `if` is decided when the
    kernel is traced, the same in every step, as is a loop over static bounds: a step reads it in
    all steps or none, and none is no read at all: a test of an extent (`if r_ref.shape[0] >=
    x_ref.shape[0]:`) may leave a shorter `r` unread, while a flag or `b_ref is not None` says
    whether the operand is given. (A flag the wrapper computes from shapes is not seen.) In a
    helper the kernel calls, every call of it must be read every step."""
    for anc in ctx.ancestors(node):
        if anc is kernel:
            return True
        if isinstance(anc, (cst.If, cst.IfExp)) and _shape_test(anc.test):
            return False
        if isinstance(anc, cst.FunctionDef) and (any(_conditional(ctx, d.decorator) for d in anc.decorators)
                                                 or _passed_to_conditional(ctx, kernel, anc.name.value)
                                                 or _maybe_empty_loop(ctx, kernel, env, anc)):
            return False
        if isinstance(anc, cst.Lambda) and isinstance(call := _call_of_arg(ctx, anc), cst.Call) and _conditional(ctx, call):
            return False
        if isinstance(anc, cst.FunctionDef) and isinstance(ctx.parent(anc), cst.Module):  # a helper
            calls = [n for n in walk(kernel) if isinstance(n, cst.Call) and isinstance(n.func, cst.Name)
                     and n.func.value == anc.name.value]
            return depth < 4 and bool(calls) and all(read_every_step(ctx, kernel, env, c, depth + 1) for c in calls)
    return False


def _shape_test(test: cst.BaseExpression) -> bool:
    """The test reads an array's extent (`r_ref.shape[0] >= n`): it may skip a shorter array."""
    return any(isinstance(n, cst.Attribute) and n.attr.value in ("shape", "size") for n in walk(test))


def _conditional(ctx: ModuleContext, node: cst.BaseExpression) -> bool:
    func = node
    while isinstance(func, cst.Call):  # `pl.when(c)(body)`: the call `pl.when(c)` makes
        func = func.func
    return _last_name(ctx, func) in _CONDITIONAL_CALLS


def _passed_to_conditional(ctx: ModuleContext, kernel: cst.FunctionDef, name: str) -> bool:
    """The def `name` is handed to a conditional call in the kernel (`lax.cond(p, branch, ...)`,
    `pl.when(p)(body)`)."""
    return any(isinstance(n, cst.Call) and _conditional(ctx, n) and any(
        isinstance(a.value, cst.Name) and a.value.value == name for a in n.args) for n in walk(kernel))


def _maybe_empty_loop(ctx: ModuleContext, kernel: cst.FunctionDef, env, fn: cst.FunctionDef) -> bool:
    """`fn` is the body of a `fori_loop` / `pl.loop` with a traced bound: a trip count a step
    computes (`jnp.where(i * BM < n, 1, 0)`) is a condition too."""
    name = fn.name.value
    loops = [d.decorator for d in fn.decorators if isinstance(d.decorator, cst.Call) and _named(ctx, d.decorator, _LOOP_CALLS)]
    loops += [n for n in walk(kernel) if isinstance(n, cst.Call) and _named(ctx, n, _LOOP_CALLS)
              and any(isinstance(a.value, cst.Name) and a.value.value == name for a in n.args)]
    return any(not _static_bounds(env, loop) for loop in loops)


def _static_bounds(env, loop: cst.Call) -> bool:
    bounds = [a.value for a in loop.args[:2] if a.keyword is None]
    return len(bounds) == 2 and not any(env.value(b).dynamic for b in bounds)


def _named(ctx: ModuleContext, call: cst.Call, names: tuple[str, ...]) -> bool:
    return _last_name(ctx, call.func) in names


def _last_name(ctx: ModuleContext, func: cst.BaseExpression) -> str:
    """`when` for `pl.when` (however imported), a bare name as written."""
    name = ctx.imports.qualify(func) or (func.value if isinstance(func, cst.Name) else "")
    return name.rsplit(".", 1)[-1]


def _call_of_arg(ctx: ModuleContext, node: cst.CSTNode):
    arg = ctx.parent(node)
    return ctx.parent(arg) if isinstance(arg, cst.Arg) else None
