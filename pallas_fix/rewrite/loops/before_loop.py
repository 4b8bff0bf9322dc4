"""The kernel statements before a loop that is lifted into a grid axis: those would then run on
every grid step. Which only feed the loop (its bounds, its initial carry) and go with it, which
have effects (R1 refuses them; R2 moves them to the first step, asking analysis.effects.model which
write), and that nothing follows the loop (R1)."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from pallas_fix.analysis.context import ModuleContext, walk
from pallas_fix.analysis.effects.model import statement_writes
from pallas_fix.analysis.discovery.varargs import binds_from_star
from pallas_fix.core import names as N
from pallas_fix.core.model import LoopInfo
from pallas_fix.core.plans import Refuse
from pallas_fix.rewrite.text.scopes import bindings, param_names, walk_scope
from pallas_fix.rewrite.text.statements import body_statements
from pallas_fix.rewrite.text.syntax import code


def _single_assign(stmt: cst.BaseStatement) -> Optional[cst.Assign]:
    if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assign):
        return stmt.body[0]
    return None


def _only_read_within(ctx: ModuleContext, kernel, name: cst.Name, within: list) -> bool:
    """Every other mention of `name` in the kernel sits inside one of `within`."""
    readers = _readers_of(kernel, name)
    return bool(readers) and all(any(a is b for a in [r, *ctx.ancestors(r)] for b in within) for r in readers)


def bound_only_statements(ctx: ModuleContext, kernel, loop: LoopInfo, before) -> list[cst.BaseStatement]:
    """`n = x_ref.shape[0] // bs` (or `m, n = x_ref.shape`) whose only reader is the loop's bound:
    it goes with the loop. Each name it binds is read by the bound only, or by nothing."""
    bounds = [loop.lower, loop.upper] + ([loop.step] if loop.step is not None else [])
    names = {n.value for b in bounds for n in walk(b) if isinstance(n, cst.Name)}
    found = []
    for stmt in before:
        assign = _single_assign(stmt)
        targets = _target_names(assign.targets[0].target) if assign is not None and len(assign.targets) == 1 else None
        if not targets or not any(t.value in names for t in targets):
            continue
        if all(_only_read_within(ctx, kernel, t, bounds) or not _readers_of(kernel, t) for t in targets):
            found.append(stmt)
    return found


def _target_names(target: cst.BaseExpression) -> Optional[list[cst.Name]]:
    """`n` or `m, n` (plain names only), else None."""
    if isinstance(target, cst.Name):
        return [target]
    if isinstance(target, (cst.Tuple, cst.List)) and all(isinstance(e, cst.Element) and isinstance(e.value, cst.Name) for e in target.elements):
        return [e.value for e in target.elements]  # type: ignore[misc]
    return None


def _readers_of(kernel, name: cst.Name) -> list[cst.Name]:
    return [n for n in walk(kernel) if isinstance(n, cst.Name) and n.value == name.value and n is not name]


def init_only_statements(before: list, loop: LoopInfo, after: list, result: set[str]) -> list:
    """`acc = jnp.zeros(...)` before the loop whose only reader is the loop's initial carry: the
    value moves into `_init`, so the statement would be dead. The body reads its own `acc` when
    it binds one, and the code after the loop reads the result when the loop rebinds the name
    (`o, m, l = fori_loop(..., (o, m, l))`); any other mention keeps the statement."""
    if loop.init is None:
        return []
    # Only the init itself may read it (`(o, m, l)`), not arithmetic that builds it.
    init_leaves = [loop.init] + [e.value for e in getattr(loop.init, "elements", [])]
    body_own = param_names(loop.body) | (
        {n for s in body_statements(loop.body) for n in bindings(s, nested=False)} if isinstance(loop.body, cst.FunctionDef) else set()
    )
    found = []
    for stmt in before:
        assign = _single_assign(stmt)
        if assign is None:
            continue
        targets = assign.targets[0].target if len(assign.targets) == 1 else None
        names = [targets] if isinstance(targets, cst.Name) else [e.value for e in getattr(targets, "elements", [])]
        if not names or not all(isinstance(n, cst.Name) for n in names):
            continue
        if all(_read_only_by_init(loop, n.value, init_leaves, _readers(stmt, n.value, before, loop, body_own, after, result))
               for n in names):
            found.append(stmt)
    return found


def _readers(stmt, name: str, before: list, loop: LoopInfo, body_own: set[str], after: list, result: set[str]) -> list:
    """Where a mention of `name` would read what `stmt` bound: the other statements before the
    loop, the body unless it binds its own `name`, the code after unless the result rebinds it."""
    out = [s for s in before if s is not stmt]
    if name not in body_own:
        out.append(loop.body)
    if name not in result:
        out += after
    return out


def _read_only_by_init(loop: LoopInfo, name: str, init_leaves: list, others: list) -> bool:
    """The loop call reads `name` only as a leaf of its init, and no node of `others` mentions it."""
    body = {id(n) for n in walk(loop.body)}
    in_call = [x for x in walk(loop.call) if isinstance(x, cst.Name) and x.value == name and id(x) not in body]
    if not in_call or not all(any(r is e for e in init_leaves) for r in in_call):
        return False
    return not any(isinstance(x, cst.Name) and x.value == name for o in others for x in walk(o))


def _ref_writes(node: cst.CSTNode) -> list[cst.Subscript]:
    """The ref subscripts an assignment node writes (`x_ref[...] = v`, `o_ref[i] += v`)."""
    if isinstance(node, cst.Assign):
        targets = [t.target for t in node.targets]
    elif isinstance(node, (cst.AugAssign, cst.AnnAssign)):
        targets = [node.target]
    else:
        return []
    return [t for t in targets if isinstance(t, cst.Subscript)]


def check_before_loop(ctx: ModuleContext, before: list, bound_stmts: list, after: list, functions: list = ()) -> None:
    """R1: statements before the loop will run on every grid step, so they must not have effects.
    `functions`: the loop's body and helpers, to name a first pass whose result they read."""
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
                if q in N.FORI_LOOP or q in N.PL_LOOP:
                    _refuse_first_pass(ctx, stmt, node, functions)
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


def _refuse_first_pass(ctx: ModuleContext, stmt: cst.BaseStatement, call: cst.Call, functions) -> None:
    """A loop before the loop whose result the loop reads (statistics, then normalisation): name
    that dependence, which no grid axis over the second loop can keep."""
    if not isinstance(stmt, cst.SimpleStatementLine):
        return  # a `@pl.loop` body's own names are no result
    bound = set(bindings(stmt, nested=False))
    read = next((
        n for f in functions for n in walk(f)
        if isinstance(n, cst.Name) and n.value in bound
        and not (isinstance(ctx.parent(n), cst.Attribute) and ctx.parent(n).attr is n)  # type: ignore[union-attr]
    ), None)
    if read is None:
        return
    raise Refuse(
        f"the loop reads `{read.value}` (line {ctx.span(read).line}), the result of the loop before it "
        f"(`{code(call.func)}`, line {ctx.span(call).line}), which needs every iteration of that first pass; "
        "a grid axis over this loop would run the first pass again in every step. Keep both loops in the kernel, "
        "or split them into two pallas_calls (the first computing the result, the second reading it)"
    )


def _refuse_decorated(node: cst.CSTNode) -> None:
    if isinstance(node, cst.FunctionDef) and node.decorators:
        raise Refuse(f"the kernel runs decorated `{node.name.value}` before the loop")


def side_effect_statements(analysis, site, before: list) -> list[cst.BaseStatement]:
    """R2: the statements before the loop that write a ref, directly or through any call (the
    effects model, analysis.effects.model): they move into `_init` and run once, on the first grid step.
    The others stay where they are and run on every step, which only a statement without effects
    may."""
    ctx: ModuleContext = analysis.ctx
    written: dict[int, set[str]] = {}
    for write in statement_writes(analysis, site, before):
        stmt = _statement_holding(ctx, write.entry, before)
        written.setdefault(id(stmt), set()).add(write.ref)
    moved = [s for s in before if id(s) in written]
    kept = [s for s in before if id(s) not in written]
    for stmt in moved:
        for node in walk_scope(stmt, classes=True):
            _refuse_decorated(node)
        _check_movable(ctx, stmt, written[id(stmt)], before, kept)
    return moved


def _statement_holding(ctx: ModuleContext, node: cst.CSTNode, before: list) -> cst.CSTNode:
    for stmt in before:
        if node is stmt or any(a is stmt for a in ctx.ancestors(node)):
            return stmt
    raise Refuse(f"cannot tell which statement before the loop writes at line {ctx.span(node).line}")


def _check_movable(ctx: ModuleContext, stmt, written: set[str], before: list, kept: list) -> None:
    """`stmt` can run at the loop's place, inside `_init`, with the same outcome: it binds nothing
    later code would miss, no statement that stays reads what it writes (those run before `_init`
    now, on every step), and nothing after it rebinds a name it reads."""
    line = ctx.span(stmt).line
    bound = sorted(set(bindings(stmt, nested=False)))
    if bound:
        raise Refuse(
            f"a statement before the loop (line {line}) both writes a ref and defines {bound}; "
            "it cannot move to the first grid step"
        )
    for other in kept:
        clash = sorted(written & _touched_names(ctx, other))
        if clash:
            raise Refuse(
                f"`{clash[0]}` is written before the loop (line {line}) and used at line {ctx.span(other).line}, "
                "which stays in place; moving the write to the first grid step would reorder them"
            )
    reads = {n.value for n in walk(stmt) if isinstance(n, cst.Name)}
    for other in before[before.index(stmt) + 1 :]:
        rebound = sorted(reads & set(bindings(other, nested=False)))
        if rebound:
            raise Refuse(
                f"`{rebound[0]}` is rebound (line {ctx.span(other).line}) after a statement before the loop "
                f"reads it (line {line}); moving that statement to the first grid step would read the new value"
            )


def _touched_names(ctx: ModuleContext, stmt: cst.CSTNode) -> set[str]:
    """Every name `stmt` mentions when it runs, and every name in the bodies of the functions it
    calls by name (transitively): a superset of the refs it reads or writes. A plain def runs
    only its parameters' defaults; `x_ref.shape` reads no data."""
    if isinstance(stmt, cst.FunctionDef) and not stmt.decorators:
        return {n.value for n in walk(stmt.params) if isinstance(n, cst.Name)}
    found: set[str] = set()
    seen: set[int] = set()
    frontier = [stmt]
    while frontier:
        node = frontier.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        for n in walk(node):
            if isinstance(n, cst.Name) and not _is_metadata_read(ctx, n) and not binds_from_star(ctx, n):  # `o_ref = refs[-1]` touches no data
                found.add(n.value)
            if isinstance(n, cst.Call) and isinstance(n.func, cst.Name):
                fn = _called_function(ctx, n.func)
                if fn is not None:
                    frontier.append(fn)
    return found


def _called_function(ctx: ModuleContext, name: cst.Name):
    """The def, or the lambda assigned once, that `name` calls (through `f = bump`)."""
    value = ctx.resolve_value(name, name)
    target = value if isinstance(value, cst.Name) else name
    fn = ctx.resolve_def(target.value, target)
    return fn if fn is not None else (value if isinstance(value, cst.Lambda) else None)


def _is_metadata_read(ctx: ModuleContext, name: cst.Name) -> bool:
    parent = ctx.parent(name)
    return isinstance(parent, cst.Attribute) and parent.value is name and parent.attr.value in ("shape", "dtype", "ndim")
