"""The kernel statements before a loop that is lifted into a grid axis: those would then run on
every grid step. Which only feed the loop (its bounds, its initial carry) and go with it, which
have effects (R1 refuses them; R2 moves them to the first step), and that nothing follows the
loop (R1)."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from pallas_fix.analysis.context import ModuleContext, walk
from pallas_fix.core import names as N
from pallas_fix.core.model import LoopInfo
from pallas_fix.core.plans import Refuse
from pallas_fix.rewrite.scopes import walk_scope
from pallas_fix.rewrite.syntax import code


def _single_assign(stmt: cst.BaseStatement) -> Optional[cst.Assign]:
    if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assign):
        return stmt.body[0]
    return None


def _only_read_within(ctx: ModuleContext, kernel, name: cst.Name, within: list) -> bool:
    """Every other mention of `name` in the kernel sits inside one of `within`."""
    readers = [n for n in walk(kernel) if isinstance(n, cst.Name) and n.value == name.value and n is not name]
    return bool(readers) and all(any(a is b for a in [r, *ctx.ancestors(r)] for b in within) for r in readers)


def bound_only_statements(ctx: ModuleContext, kernel, loop: LoopInfo, before) -> list[cst.BaseStatement]:
    """`n = x_ref.shape[0] // bs` whose only reader is the loop's bound: it goes with the loop."""
    bounds = [loop.lower, loop.upper] + ([loop.step] if loop.step is not None else [])
    names = {n.value for b in bounds for n in walk(b) if isinstance(n, cst.Name)}
    found = []
    for stmt in before:
        assign = _single_assign(stmt)
        if assign is None or len(assign.targets) != 1 or not isinstance(assign.targets[0].target, cst.Name):
            continue
        target = assign.targets[0].target
        if target.value in names and _only_read_within(ctx, kernel, target, bounds):
            found.append(stmt)
    return found


def init_only_statements(ctx: ModuleContext, kernel, before, loop: LoopInfo) -> list[cst.BaseStatement]:
    """`acc = jnp.zeros(...)` before the loop whose only reader is the loop's init: the value moves
    into `_init`, so the statement would be dead."""
    if loop.init is None:
        return []
    # Only the init itself may read it (`(o, m, l)`), not arithmetic that builds it.
    init_leaves = [loop.init] + [e.value for e in getattr(loop.init, "elements", [])]
    found = []
    for stmt in before:
        assign = _single_assign(stmt)
        if assign is None:
            continue
        targets = assign.targets[0].target if len(assign.targets) == 1 else None
        names = [targets] if isinstance(targets, cst.Name) else [e.value for e in getattr(targets, "elements", [])]
        if not names or not all(isinstance(n, cst.Name) for n in names):
            continue
        if all(_read_only_as(kernel, n, init_leaves) for n in names):
            found.append(stmt)
    return found


def _read_only_as(kernel, name: cst.Name, exprs: list) -> bool:
    readers = [x for x in walk(kernel) if isinstance(x, cst.Name) and x.value == name.value and x is not name]
    return bool(readers) and all(any(r is e for e in exprs) for r in readers)


def _ref_writes(node: cst.CSTNode) -> list[cst.Subscript]:
    """The ref subscripts an assignment node writes (`x_ref[...] = v`, `o_ref[i] += v`)."""
    if isinstance(node, cst.Assign):
        targets = [t.target for t in node.targets]
    elif isinstance(node, (cst.AugAssign, cst.AnnAssign)):
        targets = [node.target]
    else:
        return []
    return [t for t in targets if isinstance(t, cst.Subscript)]


def _is_copy_call(ctx: ModuleContext, call: cst.Call) -> bool:
    q = ctx.imports.qualify(call.func) or ""
    return q in N.COPIES or (isinstance(call.func, cst.Attribute) and call.func.attr.value in ("start", "wait"))


def check_before_loop(ctx: ModuleContext, before: list, bound_stmts: list, after: list) -> None:
    """R1: statements before the loop will run on every grid step, so they must not have effects."""
    for stmt in before:
        if stmt in bound_stmts or isinstance(stmt, cst.FunctionDef) and not stmt.decorators:
            continue
        for node in walk_scope(stmt, classes=True):
            if _ref_writes(node):
                raise Refuse(
                    f"the kernel writes a ref before the loop (line {ctx.span(node).line}); "
                    "after lifting it would run on every grid step"
                )
            if isinstance(node, cst.Call):
                q = ctx.imports.qualify(node.func) or ""
                if q in N.COPIES or q in N.FORI_LOOP or q in N.PL_LOOP or q.endswith(".when") or q.endswith("run_scoped"):
                    raise Refuse(
                        f"the kernel runs `{code(node.func)}` before the loop (line {ctx.span(node).line}); "
                        "after lifting it would run on every grid step"
                    )
                if isinstance(node.func, cst.Attribute) and node.func.attr.value in ("start", "wait"):
                    raise Refuse(f"the kernel starts or waits on a copy before the loop (line {ctx.span(node).line})")
            _refuse_decorated(node)
    if after:
        raise Refuse(
            f"the kernel has code after the loop (line {ctx.span(after[0]).line}); "
            "after lifting it would run on every grid step"
        )


def _refuse_decorated(node: cst.CSTNode) -> None:
    if isinstance(node, cst.FunctionDef) and node.decorators:
        raise Refuse(f"the kernel runs decorated `{node.name.value}` before the loop")


def side_effect_statements(ctx: ModuleContext, before: list, bound_stmts: list) -> list[cst.BaseStatement]:
    """R2: statements before the loop that write refs or copy: they must run once, on the first step."""
    out = []
    for n, stmt in enumerate(before):
        if stmt in bound_stmts:
            continue
        effect = False
        for node in walk_scope(stmt, classes=True):
            if _ref_writes(node) or (isinstance(node, cst.Call) and _is_copy_call(ctx, node)):
                effect = True
            _refuse_decorated(node)
        if effect:
            _check_movable(stmt, before[n + 1 :])
            out.append(stmt)
    return out


def _check_movable(stmt: cst.BaseStatement, later: list) -> None:
    """Moving `stmt` to the first grid step keeps its order with the statements after it."""
    nodes = list(walk_scope(stmt, classes=True))
    written = {_base_name(t) for node in nodes for t in _ref_writes(node)}
    for other in later:
        names = {x.value for x in walk(other) if isinstance(x, cst.Name)}
        clash = sorted(w for w in written if w and w in names)
        if clash:
            raise Refuse(
                f"`{clash[0]}` is written before the loop and read again before it; moving the write to the "
                "first grid step would reorder them"
            )
    assigned = {t.target.value for n in nodes if isinstance(n, cst.Assign) for t in n.targets if isinstance(t.target, cst.Name)}
    if assigned:
        raise Refuse(f"a statement before the loop both writes a ref and defines {sorted(assigned)}")


def _base_name(target: cst.BaseExpression) -> Optional[str]:
    base = target.value if isinstance(target, cst.Subscript) else target
    if isinstance(base, cst.Attribute) and base.attr.value == "at":
        base = base.value
    return base.value if isinstance(base, cst.Name) else None
