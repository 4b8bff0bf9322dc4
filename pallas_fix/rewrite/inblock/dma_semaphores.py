"""Which copies count on the semaphore of an output's DMA (issue 28, red team 14).

pallas-fix moves an output written by DMA into a VMEM block only when its copy lands before the
pipeline writes the block back (rewrite/inblock/dma_outputs.py proves the copy is started and
waited in the step). The wait is a count of bytes on a semaphore, and any copy on that semaphore
adds to the count, so the proof also needs every other copy on it to land in its own step. Imports
analysis and core only.
"""

from __future__ import annotations

from typing import Callable, Optional

import libcst as cst

from pallas_fix.analysis.binders import is_label
from pallas_fix.analysis.context import walk
from pallas_fix.analysis.discovery.dma_calls import MAKE_COPY, copy_argument
from pallas_fix.core.names import call_arg
from pallas_fix.core.plans import Refuse


def check_semaphore(ctx, kernel: cst.FunctionDef, call: cst.Call, where: str, waited: Callable[[cst.Call], bool]) -> None:
    """A DMA's `.wait()` waits until its semaphore has counted as many bytes as the copy moves, and
    every copy on that semaphore counts: one still in flight from another step (a prefetch for the
    next) could let the output's wait return while the output's copy runs, and the pipeline would
    write the block back without its rows. In HBM that copy still lands, so only the rewrite would
    be wrong, and no interpreter shows it (red team 14's open case). So every other DMA on the
    semaphore must land in the step that starts it: named and waited in its own block as the
    output's is, or started in place and drained by a later kernel-level `.wait()` of the buffer it
    fills, the buffer the output's DMA then copies (an original whose copy read rows still in flight
    would be wrong itself)."""
    line = ctx.span(call).line
    root = _root(call_arg(call, 2, "sem"))
    if root is None:
        raise Refuse(f"{where} and the semaphore of its DMA (line {line}) is not a name or an item of one, so "
                     "pallas-fix cannot tell which other copies count on it; pass the semaphore ref (or `sems[k]`)")
    for node in walk(kernel.body):
        if not isinstance(node, cst.Name) or node.value != root or _not_a_read(ctx, node):
            continue
        at = ctx.span(node).line
        if any(isinstance(a, cst.AssignTarget) for a in ctx.ancestors(node)):
            raise Refuse(f"{where} and its semaphore `{root}` is bound again in the kernel (line {at}); pallas-fix follows "
                         "the copies on a semaphore only through the ref the kernel receives")
        other = _semaphore_dma(ctx, node)
        if other is call or _waited_in_place(ctx, other):
            continue  # a descriptor built only to be waited moves no bytes
        if other is None:
            raise Refuse(f"{where} and its semaphore `{root}` is used other than as a DMA's semaphore (line {at}), so "
                         "pallas-fix cannot prove the output's `.wait()` counts only its own copy; give the output's DMA "
                         "a semaphore of its own")
        if not (waited(other) or _drained(ctx, kernel, other, call, root)):
            raise Refuse(f"{where} and its semaphore `{root}` is also the semaphore of the DMA at line {at}, which "
                         "pallas-fix cannot prove lands in the step that starts it: the output's `.wait()` counts that "
                         "copy's bytes too, so it could return while the output's copy still runs and the pipeline write "
                         "the block back without it; give the output's DMA a semaphore of its own")


def _root(node) -> Optional[str]:
    """`sem`, `sems[k]`, `sems.at[k]`: the name the semaphore is read from."""
    while True:
        if isinstance(node, cst.Name):
            return node.value
        if isinstance(node, cst.Subscript):
            node = node.value
        elif isinstance(node, cst.Attribute) and node.attr.value == "at":
            node = node.value
        else:
            return None


def _not_a_read(ctx, node: cst.Name) -> bool:
    """An attribute's name (`x.sem`), a keyword (`sem=...`) or a parameter: not the semaphore."""
    parent = ctx.parent(node)
    return is_label(parent, node) or isinstance(parent, cst.Param)


def _semaphore_dma(ctx, node: cst.Name) -> Optional[cst.Call]:
    """The DMA taking `node` (or `node[k]`, `node.at[k]`) as its `sem`, or None."""
    expr = node
    while True:
        parent = ctx.parent(expr)
        if isinstance(parent, cst.Subscript) and parent.value is expr:
            expr = parent
        elif isinstance(parent, cst.Attribute) and parent.value is expr and parent.attr.value == "at":
            expr = parent
        else:
            return copy_argument(ctx, expr, "sem")


def _waited_in_place(ctx, dma: Optional[cst.Call]) -> bool:
    parent = ctx.parent(dma) if dma is not None else None
    return isinstance(parent, cst.Attribute) and parent.value is dma and parent.attr.value == "wait"


def _drained(ctx, kernel: cst.FunctionDef, other: cst.Call, out: cst.Call, root: str) -> bool:
    """`make_async_copy(..., buffer.at[...], sem).start()` in place, then a kernel-level drain of
    `buffer` on the same semaphore before the statement holding the output's DMA, which copies
    from `buffer`."""
    started = ctx.parent(other)
    if not (isinstance(started, cst.Attribute) and started.attr.value == "start"):
        return False
    buffer = _root(call_arg(other, 1, "dst_ref"))
    if buffer is None or _root(call_arg(out, 0, "src_ref")) != buffer:
        return False
    body = list(kernel.body.body)
    holder = lambda n: next((k for k, s in enumerate(body) if any(a is s for a in ctx.ancestors(n))), None)  # noqa: E731
    first, last = holder(other), holder(out)
    if first is None or last is None:
        return False
    return any(_drains(ctx, s, root, buffer) for s in body[first + 1:last])


def _drains(ctx, stmt, root: str, buffer: str) -> bool:
    """`pltpu.make_async_copy(buffer, buffer, sem).wait()` as a statement: waits for the buffer's bytes."""
    if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Expr)):
        return False
    call = stmt.body[0].value
    if not (isinstance(call, cst.Call) and not call.args and isinstance(call.func, cst.Attribute)
            and call.func.attr.value == "wait" and isinstance(call.func.value, cst.Call)):
        return False
    dma = call.func.value
    return (ctx.imports.is_(dma.func, MAKE_COPY) and _root(call_arg(dma, 2, "sem")) == root
            and _root(call_arg(dma, 1, "dst_ref")) == buffer)
