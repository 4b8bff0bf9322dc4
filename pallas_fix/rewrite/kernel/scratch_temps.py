"""A scratch ref used as a per-iteration temporary: every iteration first writes the whole ref,
and only then reads it. Nothing flows through it from one iteration to the next, so it is no
dependency between iterations; lifted into a grid axis, each grid step writes it before reading
it just the same (each core has its own scratch), and it stays a scratch ref of the same shape."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from pallas_fix.analysis.binders import is_label
from pallas_fix.analysis.context import ModuleContext, walk
from pallas_fix.rewrite.text.statements import body_statements


def is_iteration_temporary(ctx: ModuleContext, region, ref: str) -> bool:
    """Every mention of `ref` in the kernel is a subscript in the loop body's own statements,
    and the first is a top-level statement `ref[...] = value` (whole ref, value not reading it)."""
    sub = first_write(ctx, region, ref)
    return sub is not None and all(whole_dim(el.slice) for el in sub.slice)


def first_write(ctx: ModuleContext, region, ref: str, *, outside: frozenset = frozenset()) -> Optional[cst.Subscript]:
    """The subscript `ref[...]` that a top-level statement `ref[...] = value` of the loop body
    writes, when every mention of `ref` in the kernel is a subscript in the body's own statements
    (mentions inside `outside`, ids of statements, aside) and that write is the first one."""
    body = region.body
    if not isinstance(body, cst.FunctionDef):
        return None
    mentions = [m for m in _mentions(ctx, region.site.kernel, ref) if not any(id(a) in outside for a in ctx.ancestors(m))]
    inside = {id(n) for n in walk(body)}
    if not mentions or any(id(m) not in inside or not _is_subscript_base(ctx, m) for m in mentions):
        return None
    first = min(mentions, key=lambda m: (ctx.span(m).line, ctx.span(m).column))
    stmt = next((s for s in body_statements(body) if any(a is s for a in ctx.ancestors(first))), None)
    return _assigned_subscript(stmt, ref) if stmt is not None else None


def _mentions(ctx: ModuleContext, kernel: cst.FunctionDef, ref: str) -> list[cst.Name]:
    """The kernel's mentions of `ref` as a variable (its parameter declaration aside)."""
    out = []
    for node in walk(kernel.body):
        if isinstance(node, cst.Name) and node.value == ref:
            if is_label(ctx.parent(node), node):
                continue
            out.append(node)
    return out


def _is_subscript_base(ctx: ModuleContext, name: cst.Name) -> bool:
    parent = ctx.parent(name)
    return isinstance(parent, cst.Subscript) and parent.value is name


def _assigned_subscript(stmt: cst.CSTNode, ref: str) -> Optional[cst.Subscript]:
    """`ref[...] = value` alone on its line, with `value` not reading `ref`: its target."""
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1 or not isinstance(stmt.body[0], cst.Assign):
        return None
    assign = stmt.body[0]
    if len(assign.targets) != 1:
        return None
    target = assign.targets[0].target
    if not (isinstance(target, cst.Subscript) and isinstance(target.value, cst.Name) and target.value.value == ref):
        return None
    if any(isinstance(n, cst.Name) and n.value == ref for n in walk(assign.value)):
        return None
    return target


def whole_dim(index: cst.BaseSlice) -> bool:
    """`...` or a bare `:`."""
    if isinstance(index, cst.Index):
        return isinstance(index.value, cst.Ellipsis)
    return isinstance(index, cst.Slice) and index.lower is None and index.upper is None and index.step is None
