"""Whether a kernel tests the program id a squeezed row moves along, in a load or store mask or a
`pl.when` / `lax.cond` condition: then the original may skip a row past its array's end, and a
check on the row count (rewrite.proofs.bounds) would reject calls it handles."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from pallas_fix.analysis.context import walk
from pallas_fix.core import names as N


def row_guarded_access(ctx, kernel: Optional[cst.FunctionDef], axes: frozenset) -> Optional[int]:
    """The line of the kernel's first mask or `pl.when` / `lax.cond` condition that reads a program
    id of the grid `axes` the row moves along, directly or through names the kernel computes from
    one (`mask = b < nb`, `pl.when(b < n)` with `b = pid // H`): such a test may skip a row past
    its array's end, so the original handles a call with fewer rows and a check on the row count
    would reject it. None when no mask or condition reads those program ids (a mask over the
    sequence, or over another axis's block, covers the window's dims only)."""
    if kernel is None:
        return None
    nodes = list(walk(kernel))
    tainted = _program_id_names(ctx, nodes, axes)

    def reads_pid(expr: cst.CSTNode) -> bool:
        return any((isinstance(n, cst.Name) and n.value in tainted) or _row_pid(ctx, n, axes) for n in walk(expr))

    for node in nodes:
        if not isinstance(node, cst.Call):
            continue
        name = ctx.imports.qualify(node.func) or ""
        tests = [a.value for a in node.args if a.keyword is not None and a.keyword.value == "mask"]
        if name in N.PL_WHEN or name.endswith("lax.cond"):
            tests += [node.args[0].value] if node.args else []
        if any(reads_pid(t) for t in tests):
            return ctx.span(node).line
    return None


def _row_pid(ctx, node: cst.CSTNode, axes: frozenset) -> bool:
    """`pl.program_id(k)` for k in `axes`, or with an axis not written as a literal."""
    if not (isinstance(node, cst.Call) and (ctx.imports.qualify(node.func) or "") in N.PROGRAM_ID):
        return False
    axis = node.args[0].value if node.args else None
    return not isinstance(axis, cst.Integer) or int(axis.value) in axes


def _program_id_names(ctx, nodes: list, axes: frozenset) -> set[str]:
    """Names any assignment in the kernel binds from a program id of `axes` or from such a name
    (to a fixed point; `a, b = x, y` pairs its parts, another tuple target takes the taint of its
    whole value)."""
    assigns = []
    for n in nodes:
        if not isinstance(n, (cst.Assign, cst.AugAssign, cst.AnnAssign)) or n.value is None:
            continue
        target = n.targets[0].target if isinstance(n, cst.Assign) else n.target
        if (isinstance(target, cst.Tuple) and isinstance(n.value, cst.Tuple)
                and len(target.elements) == len(n.value.elements)):
            assigns += [(t.value, v.value) for t, v in zip(target.elements, n.value.elements)]
        else:
            assigns.append((target, n.value))
    tainted: set[str] = set()
    while True:
        before = len(tainted)
        for target, value in assigns:
            if any((isinstance(v, cst.Name) and v.value in tainted) or _row_pid(ctx, v, axes) for v in walk(value)):
                tainted |= {t.value for t in walk(target) if isinstance(t, cst.Name)}
        if len(tainted) == before:
            return tainted
