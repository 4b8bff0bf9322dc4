"""Whether a kernel reads a window in every grid step: what lets a block read in lockstep with a
proved operand take that operand's extent (rewrite.proofs.bounds, Bounds.check_blocks).

The lockstep argument is that were the array shorter, the original would read past its end. That
holds only for a read every step makes: `@pl.when(i * BM < r_ref.shape[0])` around `r_ref[pl.ds(i *
BM, BM)]` reads a shorter `r` only where it has rows, while its BlockSpec would still fetch a block
past the end in the other steps (an out-of-bounds block on a TPU; red-team)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import libcst as cst

from pallas_fix.analysis.binders import none_tested
from pallas_fix.analysis.context import ModuleContext, walk

# Calls that run a function they are given only on some condition. `while_loop` among them: which
# carry counts, and whether its first test passes in every step, is beyond this check (red-team: a
# trip count a step computes skipped a shorter array's rows).
_CONDITIONAL_CALLS = ("cond", "switch", "when", "while_loop")
# Loops whose body runs in a step only if the step's trip count is not 0: (lower, upper) positions.
_LOOP_CALLS = ("fori_loop", "loop")


@dataclass(frozen=True)
class Reader:
    """Whose read is asked about: the kernel's ref `param`, the array the call passes for it
    (`operand`), and the names the call binds in the kernel (functools.partial keywords)."""

    param: str = ""
    operand: Optional[cst.BaseExpression] = None
    bound: dict = field(default_factory=dict)


def read_every_step(ctx: ModuleContext, kernel: cst.FunctionDef, env, node: cst.CSTNode, depth: int = 0,
                    reader: Reader = Reader()) -> bool:
    """`node` runs in every grid step the kernel runs it in at all: no `pl.when` body and no
    `lax.cond` / `switch` branch, nor the body of a loop whose bounds are traced
    (`env`: the kernel's values), lies between it and the kernel. A Python `if` is decided when the
    kernel is traced, the same in every step, as is a loop over static bounds: a step reads it in
    all steps or none, and none is no read at all: a test of an extent (`if r_ref.shape[0] >=
    x_ref.shape[0]:`) may leave a shorter `r` unread, and so may a flag the wrapper computes from
    shapes (`has_r = r.shape[0] >= m`, bound with functools.partial or closed over), a flag the
    caller passes (`use_r=False` with a short stand-in array), or a static loop bound read from the
    reader's own extent (`r_ref.shape[0] // BM` trips, 0 for a short `r`; red-team), while
    `b_ref is not None` says whether the operand is passed at all. In a helper the kernel calls,
    every call of it must be read every step."""
    for anc in ctx.ancestors(node):
        if anc is kernel:
            return True
        if isinstance(anc, (cst.If, cst.IfExp)) and (_reads_extent(ctx, kernel, reader, anc.test, None)
                                                     or not _none_test(ctx, kernel, reader, anc.test)):
            return False
        if isinstance(anc, cst.While) or isinstance(anc, cst.For) and _reads_extent(ctx, kernel, reader, anc.iter, reader):
            return False
        if isinstance(anc, cst.FunctionDef) and (any(_conditional(ctx, d.decorator) for d in anc.decorators)
                                                 or _passed_to_conditional(ctx, kernel, anc.name.value)
                                                 or _maybe_empty_loop(ctx, kernel, env, anc, reader)):
            return False
        if isinstance(anc, cst.Lambda) and isinstance(call := _call_of_arg(ctx, anc), cst.Call) and _conditional(ctx, call):
            return False
        if isinstance(anc, cst.FunctionDef) and isinstance(ctx.parent(anc), cst.Module):  # a helper
            calls = [n for n in walk(kernel) if isinstance(n, cst.Call) and isinstance(n.func, cst.Name)
                     and n.func.value == anc.name.value]
            return depth < 4 and bool(calls) and all(read_every_step(ctx, kernel, env, c, depth + 1, reader) for c in calls)
    return False


def _reads_extent(ctx: ModuleContext, kernel: cst.FunctionDef, reader: Reader, expr: cst.CSTNode,
                  whose: Optional[Reader], depth: int = 0) -> bool:
    """`expr` reads an array's extent (`.shape`, `.size`, `len(...)`), directly or through the
    names it reads: a partial keyword's value at the call, or a binding in the wrapper the kernel
    closes over. With `whose`, only the extent of that reader's ref or operand counts (a loop
    bound: a trip count read from another array's extent is no test of this one)."""
    for n in walk(expr):
        if isinstance(n, cst.Attribute) and n.attr.value in ("shape", "size") and _whose(n.value, whose):
            return True
        if whose is None and isinstance(n, cst.Call) and isinstance(n.func, cst.Name) and n.func.value == "len":
            return True
        if isinstance(n, cst.Name) and depth < 3 and any(
                _reads_extent(ctx, kernel, reader, value, whose, depth + 1) for value in _bindings(ctx, kernel, reader, n)):
            return True
    return False


def _none_test(ctx: ModuleContext, kernel: cst.FunctionDef, reader: Reader, test: cst.BaseExpression,
               depth: int = 0) -> bool:
    """`b_ref is not None` (or `is None`; directly or as a flag bound to one: `has_bias=bias is not
    None`): whether the operand is passed at all. Any other flag the caller passes may be off while
    the call still passes an array, a short stand-in (`use_r=False` with `jnp.zeros((8, n))`;
    red-team), which the original leaves unread and a BlockSpec would not."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return _none_test(ctx, kernel, reader, test.expression, depth)
    if isinstance(test, cst.Name) and depth < 3:
        values = _bindings(ctx, kernel, reader, test)
        return bool(values) and all(_none_test(ctx, kernel, reader, v, depth + 1) for v in values)
    return none_tested(test) is not None


def _whose(array: cst.BaseExpression, whose: Optional[Reader]) -> bool:
    if whose is None:
        return True
    names = {whose.param} | ({whose.operand.value} if isinstance(whose.operand, cst.Name) else set())
    return isinstance(array, cst.Name) and array.value in names


def _bindings(ctx: ModuleContext, kernel: cst.FunctionDef, reader: Reader, name: cst.Name) -> list[cst.BaseExpression]:
    """The values `name` may hold where it is bound outside the kernel: the partial keyword the
    call passes for a kernel parameter, or assignments in the functions around a name read there
    (the wrapper's locals a nested kernel or a keyword's value reads)."""
    if name.value in _param_names(kernel) and any(a is kernel for a in ctx.ancestors(name)):
        return [reader.bound[name.value]] if name.value in reader.bound else []
    scope = ctx.enclosing_function(name)
    values = []
    while scope is not None:
        for n in walk(scope):
            if isinstance(n, (cst.Assign, cst.AnnAssign, cst.AugAssign)) and ctx.enclosing_function(n) is scope:
                targets = [t.target for t in n.targets] if isinstance(n, cst.Assign) else [n.target]
                if n.value is not None and any(isinstance(m, cst.Name) and m.value == name.value
                                               for t in targets for m in walk(t)):
                    values.append(n.value)
        scope = ctx.enclosing_function(scope)
    return values


def _param_names(fn: cst.FunctionDef) -> set[str]:
    p = fn.params
    return {x.name.value for x in (*p.posonly_params, *p.params, *p.kwonly_params)}


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


def _maybe_empty_loop(ctx: ModuleContext, kernel: cst.FunctionDef, env, fn: cst.FunctionDef, reader: Reader) -> bool:
    """`fn` is the body of a `fori_loop` / `pl.loop` with a traced bound (a trip count a step
    computes, `jnp.where(i * BM < n, 1, 0)`, is a condition too) or a bound read from the reader's
    extent."""
    name = fn.name.value
    loops = [d.decorator for d in fn.decorators if isinstance(d.decorator, cst.Call) and _named(ctx, d.decorator, _LOOP_CALLS)]
    loops += [n for n in walk(kernel) if isinstance(n, cst.Call) and _named(ctx, n, _LOOP_CALLS)
              and any(isinstance(a.value, cst.Name) and a.value.value == name for a in n.args)]
    return any(not _static_bounds(env, loop) or any(_reads_extent(ctx, kernel, reader, a.value, reader)
                                                    for a in loop.args[:2] if a.keyword is None) for loop in loops)


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
