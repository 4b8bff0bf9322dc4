"""Kernel-side edits of a block plan: a dynamic window becomes a whole-block access
(`x_ref[pl.ds(i * bs, bs), :]` -> `x_ref[...]`), and the index arithmetic nobody reads any more
goes with it."""

from __future__ import annotations

import libcst as cst

from pallas_fix.core import names as N
from pallas_fix.analysis.context import ModuleContext, walk
from pallas_fix.rewrite.edits import Edit


def kernel_subscript_edit(dims: set[int], drop: frozenset[int] = frozenset()) -> Edit:
    """Replace the elements at `dims` by full slices and remove those at `drop` (squeezed dims);
    `x[:, :]` -> `x[...]`; `x.at[...]` -> `x`."""

    def edit(node: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(node, cst.Subscript)
        elements = []
        for n, el in enumerate(node.slice):
            if n in drop:
                continue
            if n in dims:
                elements.append(el.with_changes(slice=cst.Slice(lower=None, upper=None)))
            else:
                elements.append(el)
        all_full = all(
            isinstance(e.slice, cst.Slice) and e.slice.lower is None and e.slice.upper is None and e.slice.step is None
            for e in elements
        )
        base = node.value
        if all_full:
            if isinstance(base, cst.Attribute) and base.attr.value == "at":
                return base.value
            return node.with_changes(slice=[cst.SubscriptElement(cst.Index(cst.Ellipsis()))])
        last = elements[-1]
        elements[-1] = last.with_changes(comma=cst.MaybeSentinel.DEFAULT)
        return node.with_changes(slice=elements)

    return edit


def dead_assignments(ctx: ModuleContext, functions: list[cst.CSTNode], removed: set[int]) -> list[cst.BaseStatement]:
    """Simple `name = <pure index arithmetic>` statements nobody reads once `removed` elements are
    gone (`start = pid * bs` after its window became a BlockSpec). Iterates: `pid` may die next."""
    pure_calls = N.DS | N.SLICE | N.PROGRAM_ID | N.NUM_PROGRAMS | N.MULTIPLE_OF | N.INT_DTYPES

    def pure(expr: cst.CSTNode) -> bool:
        for n in walk(expr):
            if isinstance(n, cst.Call) and not ctx.imports.is_(n.func, pure_calls):
                return False
            if isinstance(n, (cst.Lambda, cst.Await, cst.Yield, cst.NamedExpr)):
                return False
        return True

    candidates: list[tuple[cst.SimpleStatementLine, cst.Name]] = []
    nested = [n for fn in functions for n in walk(fn) if isinstance(n, cst.FunctionDef)]
    for fn in list(dict.fromkeys([*functions, *nested])):
        body = getattr(fn, "body", None)
        if not isinstance(body, cst.IndentedBlock):
            continue
        for stmt in body.body:
            if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assign):
                a = stmt.body[0]
                if len(a.targets) == 1 and isinstance(a.targets[0].target, cst.Name) and pure(a.value):
                    candidates.append((stmt, a.targets[0].target))
    dead: list[cst.BaseStatement] = []
    gone = set(removed)
    changed = True
    while changed:
        changed = False
        for stmt, target in candidates:
            if stmt in dead:
                continue
            readers = [
                n for fn in functions for n in walk(fn)
                if isinstance(n, cst.Name) and n.value == target.value and n is not target
            ]
            live = [r for r in readers if not any(id(a) in gone for a in [r, *ctx.ancestors(r)])]
            if readers and not live:
                dead.append(stmt)
                gone.add(id(stmt))
                changed = True
    return dead
