"""Kernel-side edits of a block plan: a dynamic window becomes a whole-block access
(`x_ref[pl.ds(i * bs, bs), :]` -> `x_ref[...]`), and the index arithmetic nobody reads any more
goes with it."""

from __future__ import annotations

from typing import Optional, Sequence

import libcst as cst

from pallas_fix.core import names as N
from pallas_fix.analysis.binders import sole_return
from pallas_fix.analysis.in_place import inlinable_tuple
from pallas_fix.analysis.context import ModuleContext, walk
from pallas_fix.rewrite.text.edits import Edit


def kernel_subscript_edit(dims: set[int], drop: frozenset[int] = frozenset(), packed: Optional[cst.Tuple] = None) -> Edit:
    """Replace the elements at `dims` by full slices and remove those at `drop` (squeezed dims);
    `x[:, :]` -> `x[...]`; `x.at[...]` -> `x`. A subscript whose dims are packed in one tuple,
    written in place or (`packed`) bound to the name it holds, is first spelled out:
    `k_ref[(0, pl.ds(t, bt), slice(None))]` is `k_ref[0, pl.ds(t, bt), :]`."""

    def edit(node: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(node, cst.Subscript)
        elements = []
        for n, el in enumerate(_spelled_out(node, packed)):
            if n in drop:
                continue
            if n in dims:
                elements.append(el.with_changes(slice=cst.Slice(lower=None, upper=None)))
            else:
                elements.append(el)
        all_full = all(_full(e.slice) for e in elements)
        base = node.value
        if all_full:
            if isinstance(base, cst.Attribute) and base.attr.value == "at":
                return base.value
            return node.with_changes(slice=[cst.SubscriptElement(cst.Index(cst.Ellipsis()))])
        last = elements[-1]
        elements[-1] = last.with_changes(comma=cst.MaybeSentinel.DEFAULT)
        return node.with_changes(slice=elements)

    return edit


def _full(index: cst.BaseSlice) -> bool:
    """`:`, or a slice spelled `pl.dslice(None)` / `pl.ds(None)` / `slice(None)` (a Triton port's
    `q_ref.at[pl.dslice(start, bq), pl.dslice(None)]`): once the other dims are whole the access
    is the whole block, `q_ref`, as an expert would write it."""
    if isinstance(index, cst.Slice):
        return index.lower is None and index.upper is None and index.step is None
    call = index.value
    if not isinstance(call, cst.Call) or len(call.args) != 1 or call.args[0].keyword is not None:
        return False
    func = call.func
    named = (isinstance(func, cst.Attribute) and func.attr.value in ("ds", "dslice")) or (
        isinstance(func, cst.Name) and func.value == "slice")
    arg = call.args[0].value
    return named and isinstance(arg, cst.Name) and arg.value == "None"


def _spelled_out(node: cst.Subscript, packed: Optional[cst.Tuple]) -> Sequence[cst.SubscriptElement]:
    """The subscript's elements, one per dim: a packed tuple's elements become the subscript's own
    (`slice(None)` written `:`)."""
    if len(node.slice) != 1 or not isinstance(node.slice[0].slice, cst.Index):
        return node.slice
    value = node.slice[0].slice.value
    tuple_ = value if isinstance(value, cst.Tuple) else packed if isinstance(value, cst.Name) else None
    if tuple_ is None:
        return node.slice
    return [cst.SubscriptElement(_as_slice(e.value)) for e in tuple_.elements]


def _as_slice(expr: cst.BaseExpression) -> cst.BaseSlice:
    whole = (
        isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name) and expr.func.value == "slice"
        and len(expr.args) == 1 and isinstance(expr.args[0].value, cst.Name) and expr.args[0].value.value == "None"
    )
    return cst.Slice(lower=None, upper=None) if whole else cst.Index(expr)


def packed_tuple(analysis, sub: cst.Subscript, dims: set[int]) -> Optional[cst.Tuple]:
    """The tuple `sub`'s one name stands for, when it can be spelled out in the subscript with
    `dims` rewritten (analysis.accesses.inlinable_tuple)."""
    env = analysis.detection.envs.get(analysis.ctx.scope_of(sub))
    return inlinable_tuple(analysis.ctx, env, sub, frozenset(dims))


def touched_element_ids(sub: cst.Subscript, dims: set[int]) -> set[int]:
    """The subscript elements a rewrite of `dims` removes: those at `dims`, or, for a tuple packed
    in place, its elements at `dims`, or, for a name packing one, the name itself."""
    if len(sub.slice) == 1 and isinstance(sub.slice[0].slice, cst.Index) and dims:
        value = sub.slice[0].slice.value
        if isinstance(value, cst.Tuple):
            return {id(e) for n, e in enumerate(value.elements) if n in dims}
        return {id(sub.slice[0])}
    return {id(el) for n, el in enumerate(sub.slice) if n in dims}


def dead_assignments(ctx: ModuleContext, functions: list[cst.CSTNode], removed: set[int]) -> list[cst.BaseStatement]:
    """Simple `name = <pure index arithmetic>` statements nobody reads once `removed` elements are
    gone (`start = pid * bs` after its window became a BlockSpec). Iterates: `pid` may die next."""
    pure_calls = N.DS | N.SLICE | N.PROGRAM_ID | N.NUM_PROGRAMS | N.MULTIPLE_OF | N.INT_DTYPES | N.INDEX_FOLDS

    def pure(expr: cst.CSTNode, depth: int = 0) -> bool:
        for n in walk(expr):
            builtin_slice = isinstance(n, cst.Call) and isinstance(n.func, cst.Name) and n.func.value in ("slice", "divmod")
            if isinstance(n, cst.Call) and not builtin_slice and not ctx.imports.is_(n.func, pure_calls) and not (
                    depth < 4 and isinstance(n.func, cst.Name) and _returns_pure(ctx, n, lambda e: pure(e, depth + 1))):
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
                elif len(a.targets) == 1 and _names_unpacked(a.targets[0].target) and pure(a.value):
                    candidates += [(stmt, t) for t in _names_unpacked(a.targets[0].target)]  # `i, j = pid0, pid1`
            elif isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.AugAssign):
                aug = stmt.body[0]  # `start *= bs`: dead with the other bindings of its name
                if isinstance(aug.target, cst.Name) and pure(aug.value):
                    candidates.append((stmt, aug.target))
            elif isinstance(stmt, cst.If):  # `if BIG: start = ...`: dead with every name its arms bind
                candidates += [(stmt, t) for t in _arm_targets(stmt, pure)]
    dead: list[cst.BaseStatement] = []
    gone = set(removed)
    unread: dict[int, bool] = {}
    changed = True
    while changed:
        changed = False
        for stmt, target in candidates:
            if stmt in dead:
                continue
            readers = [
                n for fn in functions for n in walk(fn)
                if isinstance(n, cst.Name) and n.value == target.value and n is not target
                and not isinstance(ctx.parent(n), cst.AssignTarget)  # a store, not a read
            ]
            # `off = pl.multiple_of(off, bs)` reads the binding before it, not its own.
            live = [
                r for r in readers
                if not any(id(a) in gone or a is stmt for a in [r, *ctx.ancestors(r)]) and not _read_before(ctx, r, stmt)
            ]
            if live:
                continue
            unread[id(target)] = bool(readers)  # True: its readers are gone; False: never read
            # a tuple unpacking dies with every name it binds, one of them read before the rewrite
            names = [t for s, t in candidates if s is stmt]
            if all(id(t) in unread for t in names) and any(unread[id(t)] for t in names):
                dead.append(stmt)
                gone.add(id(stmt))
                changed = True
    return dead


def _returns_pure(ctx: ModuleContext, call: cst.Call, pure) -> bool:
    """`_queries(bq)` where `def _queries(bq): return pl.ds(pl.program_id(0) * bq, bq)`: a function
    whose body (past a docstring) only returns pure index arithmetic; a call of it is pure too."""
    fn = ctx.resolve_def(call.func.value, call)  # type: ignore[attr-defined]
    if fn is None or fn.asynchronous is not None:
        return False
    value = sole_return(fn)
    return value is not None and pure(value)


def _arm_targets(stmt: cst.If, pure) -> list[cst.Name]:
    """The names an `if` with pure tests binds when its arms hold nothing but `name = <pure>` and
    `name op= <pure>` lines; [] otherwise."""
    out: list[cst.Name] = []
    arm: object = stmt
    while arm is not None:
        if isinstance(arm, cst.If) and not pure(arm.test):
            return []
        block = arm.body  # type: ignore[attr-defined]
        if not isinstance(block, cst.IndentedBlock):
            return []
        for line in block.body:
            small = line.body[0] if isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1 else None
            if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name):
                target, value = small.targets[0].target, small.value
            elif isinstance(small, cst.AugAssign) and isinstance(small.target, cst.Name):
                target, value = small.target, small.value
            else:
                return []
            if not pure(value):
                return []
            out.append(target)
        arm = arm.orelse if isinstance(arm, cst.If) else None
    return out


def _read_before(ctx: ModuleContext, reader: cst.Name, stmt: cst.CSTNode) -> bool:
    """A read in an earlier statement of the body holding `stmt`, outside any nested function:
    it runs before `stmt` binds the name, so it cannot see that binding (`row = row * bs` after
    `row = pid` does not keep `row = pid` alive)."""
    body = ctx.parent(stmt)
    if not isinstance(body, cst.IndentedBlock) or ctx.scope_of(reader) is not ctx.scope_of(stmt):
        return False
    position = {id(s): n for n, s in enumerate(body.body)}
    top = next((position[id(a)] for a in ctx.ancestors(reader) if id(a) in position), None)
    return top is not None and top < position[id(stmt)]


def _names_unpacked(target: cst.BaseExpression) -> list[cst.Name]:
    """The names of a tuple target made of plain names only, else []."""
    if not isinstance(target, (cst.Tuple, cst.List)):
        return []
    names = [e.value for e in target.elements if not isinstance(e, cst.StarredElement)]
    return names if len(names) == len(target.elements) and all(isinstance(n, cst.Name) for n in names) else []
