"""Grid axes the kernel counts from the end: `pl.program_id(-1)`, `pl.num_programs(-1)`.

A plan that appends a grid axis changes what a negative axis names: `-1` was the last existing
axis and would become the new one. In the kernel itself each such axis is renumbered to the
non-negative axis it meant; a function outside the kernel (a helper it calls) may serve other
kernels too, and an axis pallas-fix cannot compute cannot be renumbered: both are refused.
"""

from __future__ import annotations

from typing import Optional

import libcst as cst

from pallas_fix.analysis.context import ModuleContext, walk
from pallas_fix.analysis.loops.symbolic import Symbols
from pallas_fix.core import names as N
from pallas_fix.core.names import call_arg
from pallas_fix.rewrite.text.edits import Edit
from pallas_fix.rewrite.callsite.spelling.operands import CallSiteError
from pallas_fix.rewrite.text.syntax import code


def renumber_negative_axes(ctx: ModuleContext, kernel: cst.FunctionDef, ngrid: int) -> dict[cst.CSTNode, Edit]:
    """Edits that keep every grid axis the kernel (and what it calls) reads pointing where it did
    once the grid grows past its `ngrid` axes."""
    symbols = Symbols(ctx)
    edits: dict[cst.CSTNode, Edit] = {}
    for fn in _reachable(ctx, kernel):
        for node in walk(fn):
            if not (isinstance(node, cst.Call) and ctx.imports.is_(node.func, N.PROGRAM_ID | N.NUM_PROGRAMS)):
                continue
            axis_expr = call_arg(node, 0, "axis")
            axis = symbols.poly(axis_expr, axis_expr).constant() if axis_expr is not None else None
            if axis is None:
                raise CallSiteError(f"`{code(node)}` names a grid axis pallas-fix cannot compute, and the grid gains an axis")
            if axis >= 0:
                continue
            if fn is not kernel:
                raise CallSiteError(
                    f"`{fn.name.value}` reads `{code(node)}`, counted from the end of the grid, which gains an axis; "
                    "write the axis as a non-negative number"
                )
            if ngrid + axis < 0:
                raise CallSiteError(f"`{code(node)}` names an axis the {ngrid}-axis grid does not have")
            edits[axis_expr] = _integer(ngrid + axis)
    return edits


def _integer(value: int) -> Edit:
    return lambda node: cst.Integer(str(value), lpar=getattr(node, "lpar", ()), rpar=getattr(node, "rpar", ()))


def _inside(ctx: ModuleContext, node: cst.CSTNode, outer: cst.CSTNode) -> bool:
    return any(a is outer for a in ctx.ancestors(node))


def _reachable(ctx: ModuleContext, kernel: cst.FunctionDef) -> list[cst.FunctionDef]:
    """The kernel and every function of this module its body names, transitively."""
    found: list[cst.FunctionDef] = [kernel]
    seen = {id(kernel)}
    for fn in found:
        for node in walk(fn):
            target: Optional[cst.FunctionDef] = None
            if isinstance(node, cst.Name):
                target = ctx.resolve_def(node.value, node)
            if target is not None and id(target) not in seen and not _inside(ctx, target, kernel):
                seen.add(id(target))
                found.append(target)
    return found
