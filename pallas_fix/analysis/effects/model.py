"""One model of what a kernel writes: every ref write and accumulation a piece of kernel code
performs, through any call. The planners ask it instead of looking for `ref[...] = ...`
statements.

A write is an assignment or augmented assignment to a subscript of a ref (`o_ref[...] = v`,
`s_ref[...] += v`, also through a view `o_ref.at[k][...]` or an alias), a library store, copy,
DMA, atomic or semaphore operation whose destination is a ref (analysis.effects.calls), or a ref
handed to a call the model cannot see into (a function imported from elsewhere, a callback
passed in): "unknown", which may write anything it is given. Helpers are followed wherever they
are defined (the kernel, the module, a lambda, a closure, a `functools.partial`), with their
parameters bound to the refs they are called with; see analysis.effects.evaluator.

Queries (each runs the model afresh on the current tree):
- `statement_writes(analysis, site, stmts)`: what running these kernel-level statements writes;
- `loop_body_writes(analysis, site, loop)`: what one iteration of a kernel-level loop writes;
- `kernel_writes(analysis, site)`: what one run of the whole kernel body writes (one grid step).
"""

from __future__ import annotations

from typing import Iterable, Optional

import libcst as cst

from pallas_fix.analysis.effects.evaluator import Interp
from pallas_fix.analysis.effects.values import NOTHING, AbsVal, Fn, Frame, Root, Write
from pallas_fix.analysis.discovery.roles import kernel_params
from pallas_fix.analysis.discovery.varargs import bound_names
from pallas_fix.core.model import KernelSite, LoopInfo
from pallas_fix.core.names import call_arg

__all__ = ["Write", "kernel_writes", "loop_body_writes", "statement_writes", "write_words"]


def kernel_frame(interp: Interp, site: KernelSite) -> Frame:
    """The kernel running under its pallas_call: ref parameters are themselves; parameters bound
    by functools.partial or a default take those values; the wrappers around it are Python code
    the model knows nothing about."""
    kernel = site.kernel
    assert kernel is not None
    ctx = interp.ctx
    outer = ctx.scope_of(kernel)
    params, exprs = kernel_params(site)
    values: dict[str, AbsVal] = {}
    for name, val in params.items():
        if name in exprs:
            scope = ctx.scope_of(exprs[name])
            values[name] = interp.value(interp.static_frame(outer if scope is kernel else scope), exprs[name])
        elif val.vtype == "reflist":
            values[name] = AbsVal(lists=frozenset({Root(name)}))
        elif val.is_ref:
            values[name] = AbsVal(refs=frozenset({Root(name)}))
        else:
            values[name] = NOTHING
    for name in bound_names(ctx, kernel):
        values[name] = AbsVal(refs=frozenset({Root(name)}))  # `x_ref, o_ref = refs`: one ref each (analysis.discovery.varargs)
    return Frame(kernel, values, interp.static_frame(outer))


def statement_writes(analysis, site: KernelSite, statements: Iterable[cst.CSTNode]) -> list[Write]:
    """Every ref write that running these statements of the kernel's body performs."""
    interp = Interp(analysis.ctx)
    interp.run(kernel_frame(interp, site), list(statements))
    return interp.writes


def kernel_writes(analysis, site: KernelSite) -> list[Write]:
    """Every ref write one run of the kernel body performs (one grid step)."""
    assert site.kernel is not None
    return statement_writes(analysis, site, analysis.ctx.body_statements(site.kernel))


def loop_body_writes(analysis, site: KernelSite, loop: LoopInfo) -> list[Write]:
    """Every ref write one iteration of `loop` (a statement of the kernel's body) performs:
    the body run with an unknown index and the loop's initial carry."""
    return _iteration_writes(analysis, site, loop)[0]


def seen_loop_body_writes(analysis, site: KernelSite, loop: LoopInfo) -> Optional[list[Write]]:
    """`loop_body_writes`, or None where the model does not see the body the loop runs (a loop
    not in the kernel's own body, or a body it cannot resolve): no writes is then no answer."""
    if site.kernel is None or analysis.ctx.enclosing_function(loop.call) is not site.kernel:
        return None
    writes, resolved = _iteration_writes(analysis, site, loop)
    return writes if resolved else None


def _iteration_writes(analysis, site: KernelSite, loop: LoopInfo) -> tuple[list[Write], bool]:
    interp = Interp(analysis.ctx)
    frame = kernel_frame(interp, site)
    init = interp.value(frame, loop.init) if loop.init is not None else NOTHING
    if loop.kind == "fori_loop":
        body = interp.value(frame, call_arg(loop.call, 2, "body_fun"))
        args = [(NOTHING, False), (init, False)]
    else:
        body = AbsVal(fns=frozenset({Fn(loop.body, frame)}))
        args = [(NOTHING, False)] + ([(init, False)] if loop.carries else [])
    interp.call_fns(body.fns, (args, {}, NOTHING), None)
    return interp.writes, bool(body.fns)


def write_words(ctx, write: Write) -> str:
    """How a write happens, for a message: "`bump()`", or "`run(x)`, which hands it to `ext`,
    a function pallas-fix cannot see into"."""
    entry = f"`{_short(ctx.code(write.entry))}`"
    if not write.opaque:
        return entry
    callee = f"`{_short(ctx.code(write.callee))}`" if write.callee is not None else "a call"
    if write.path:
        return f"{entry}, which hands it to {callee}, a function pallas-fix cannot see into"
    return f"{entry}, a call pallas-fix cannot see into"


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= 60 else text[:57] + "..."
