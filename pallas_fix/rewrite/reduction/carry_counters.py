"""Step counters in a reduction's carry (R2): a scalar integer leaf that starts at a constant and
grows by a constant each iteration (`(acc, jnp.int32(0))` returned as `acc, n + 1`).

Its value before grid step t is `start + step * t`, so it needs no scratch buffer: the rewrite
binds it from `pl.program_id(axis)` where the body reads it and from the step count where the code
after the loop reads it. `pl.program_id` is a strongly typed int32, exactly the type of a
`jnp.int32(c)` counter; a Python-int counter is weakly typed (it would mix differently with narrow
integer arrays), so one is replaced only when nothing reads its value."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import libcst as cst

from pallas_fix.analysis.binders import int_literal
from pallas_fix.analysis.context import walk
from pallas_fix.core.plans import Refuse
from pallas_fix.rewrite.reduction.carry_names import leaf_body_names, result_leaf_reads, returned_value
from pallas_fix.rewrite.reduction.carry_tree import literal_leaves
from pallas_fix.rewrite.text.scopes import target_names, walk_scope

_INT32 = "jax.numpy.int32"


@dataclass(frozen=True)
class Counter:
    init: str  # the initial value as written (`jnp.int32(0)`, `0`)
    start: int
    step: int
    int32: Optional[str]  # how the init spells jnp.int32; None for a Python int (weakly typed)

    def after(self, steps: str) -> str:
        """The counter's value after `steps` iterations (an int32 expression)."""
        if self.step == 0:
            return self.init
        term = steps if self.step == 1 else f"{self.step} * {steps}"
        if self.start == 0:
            return term
        return f"{term} + {self.start}" if self.start > 0 else f"{term} - {-self.start}"

    def final(self, steps: str) -> str:
        """The value after all `steps` iterations, an int32 array as the loop's was (`steps` may
        be a Python int: pl.num_programs of a static grid)."""
        value = self.after(steps)
        return value if self.int32 is None or self.step == 0 else f"{self.int32}({value})"


def carry_counters(ctx, region, flat, blocked=frozenset()) -> dict[int, tuple[Counter, bool, bool]]:
    """The carry's step counters by leaf number, each with whether the step must bind it and
    whether the code after the loop reads its final value. `blocked`: the (ref, dim) pairs the
    rewrite blocks along the new axis, whose window starts (reads of a counter among them) go."""
    returned = returned_value(region.body)
    by_leaf = literal_leaves(flat.tree, returned) if returned is not None else None
    if by_leaf is None:
        return {}
    body_names = leaf_body_names(region, flat.tree)
    after = result_leaf_reads(region, flat.tree)
    out: dict[int, tuple[Counter, bool, bool]] = {}
    for n, init in enumerate(flat.inits):
        start = initial_int(ctx, init)
        static = _static_int(region)
        step, counting = counter_step(region.body, body_names[n], by_leaf[n], static) if start is not None else (None, [])
        if step is None:
            continue
        in_body = reads_besides(region.body, body_names[n], counting + _lifted_windows(region, blocked))
        if (in_body or after[n]) and start[1] is None:
            refuse_weak_read(ctx.code(init).strip(), step)
        rebinds = any(not isinstance(c, cst.BaseExpression) for c in counting)  # `n += 1` needs `n`
        out[n] = (Counter(ctx.code(init).strip(), start[0], step, start[1]), in_body or rebinds, after[n])
    return out


def initial_int(ctx, init: cst.BaseExpression) -> Optional[tuple[int, Optional[str]]]:
    """(value, the jnp.int32 spelling) for `jnp.int32(0)`, (value, None) for a Python int `3`,
    `-1`; None for anything else."""
    if isinstance(init, cst.Call) and ctx.imports.qualify(init.func) == _INT32 and len(init.args) == 1:
        arg = init.args[0]
        value = int_literal(arg.value) if arg.keyword is None and not arg.star else None
        return None if value is None else (value, ctx.code(init.func).strip())
    value = int_literal(init)
    return None if value is None else (value, None)


def counter_step(body: cst.CSTNode, name: Optional[str], returned: cst.BaseExpression, static=None) -> tuple[Optional[int], list]:
    """(step, the nodes that only count) when the body returns its counter `name` plus a
    constant: `n + 1`, `1 + n`, `n` after a single top-level `n += 1` / `n = n + 1`, or `n`
    unchanged (step 0). (None, []) otherwise. `static`: the int a static expression (`BS`) is."""
    if name is None:
        return None, []
    static = static or _int_literal
    rebinds = _rebinding_statements(body, name, static)
    if isinstance(returned, cst.Name) and returned.value == name:
        if not rebinds:
            return 0, [returned]
        if len(rebinds) == 1 and rebinds[0][1] is not None:
            stmt_, step = rebinds[0]
            return step, [returned, stmt_]
        return None, []
    step = _plus_constant(returned, name, static)
    if step is None or rebinds:
        return None, []
    return step, [returned]


def _plus_constant(expr: cst.BaseExpression, name: str, static=None) -> Optional[int]:
    """c for `name + c`, `c + name`, `name - c` with c an integer literal (or what `static`
    says a static expression is)."""
    static = static or _int_literal
    if not isinstance(expr, cst.BinaryOperation) or not isinstance(expr.operator, (cst.Add, cst.Subtract)):
        return None
    left, right = expr.left, expr.right
    if isinstance(left, cst.Name) and left.value == name:
        c = static(right)
        return None if c is None else (c if isinstance(expr.operator, cst.Add) else -c)
    if isinstance(expr.operator, cst.Add) and isinstance(right, cst.Name) and right.value == name:
        return static(left)
    return None


def _rebinding_statements(body: cst.CSTNode, name: str, static) -> list[tuple[cst.CSTNode, Optional[int]]]:
    """Every node of the body's own scope that binds `name`, with the constant it adds when it is
    a top-level statement `name += c` / `name = name + c` (None for any other binding)."""
    top = set(map(id, getattr(getattr(body, "body", None), "body", ())))
    out: list[tuple[cst.CSTNode, Optional[int]]] = []
    root = body.body if isinstance(body, cst.FunctionDef) else body  # walk_scope does not enter a def
    for node in walk_scope(root, classes=False):
        if node is body or _unpacks_carry(body, node):
            continue
        targets = []
        if isinstance(node, cst.AugAssign):
            targets = [node.target]
        elif isinstance(node, cst.Assign):
            targets = [t.target for t in node.targets]
        elif isinstance(node, (cst.AnnAssign, cst.For, cst.CompFor, cst.NamedExpr)):
            targets = [node.target]
        elif isinstance(node, cst.AsName):
            targets = [node.name]
        if not any(name in target_names(t) for t in targets):
            continue
        out.append((node, _top_level_increment(node, name, body, top, static)))
    return out


def _unpacks_carry(body, node: cst.CSTNode) -> bool:
    """`acc, n = carry` as the body's first statement binds the leaf; it does not rebind it."""
    stmts = list(getattr(getattr(body, "body", None), "body", ()))
    first = stmts[0] if stmts and isinstance(stmts[0], cst.SimpleStatementLine) else None
    params = {p.name.value for p in body.params.params} if isinstance(body, cst.FunctionDef) else set()
    return (
        first is not None and len(first.body) == 1 and first.body[0] is node
        and isinstance(node, cst.Assign) and isinstance(node.value, cst.Name) and node.value.value in params
    )


def _top_level_increment(node: cst.CSTNode, name: str, body, top: set[int], static) -> Optional[int]:
    line = _statement_line(body, node)
    if line is None or id(line) not in top or len(line.body) != 1:
        return None
    if isinstance(node, cst.AugAssign) and isinstance(node.target, cst.Name):
        c = static(node.value)
        if c is None or not isinstance(node.operator, (cst.AddAssign, cst.SubtractAssign)):
            return None
        return c if isinstance(node.operator, cst.AddAssign) else -c
    if isinstance(node, cst.Assign) and len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name):
        return _plus_constant(node.value, name, static)
    return None


def _statement_line(body, node: cst.CSTNode) -> Optional[cst.SimpleStatementLine]:
    for line in getattr(getattr(body, "body", None), "body", ()):
        if isinstance(line, cst.SimpleStatementLine) and any(small is node for small in line.body):
            return line
    return None


def _static_int(region):
    """The int value of a static step as the body reads it (`BS`, a module constant)."""
    env = region.analysis.detection.envs.get(region.body) or region.env
    return lambda expr: int_literal(expr) if env is None else env.static_int(expr)


def _lifted_windows(region, blocked) -> list:
    """The `pl.ds(...)` elements of the loop's windows on blocked (ref, dim) pairs: the rewrite
    replaces each by the whole block dim, so a counter read in their starts is read no more."""
    return [
        u.element for u in region.analysis.detection.uses
        if u.kind == "ds" and u.provenance.loop is region.loop and (u.ref_name, u.dim) in blocked
        and any(e.slice.value is u.element for e in u.subscript.slice if isinstance(e.slice, cst.Index))
    ]


def reads_besides(body: cst.CSTNode, name: str, counting: list) -> bool:
    """Does the body read `name` anywhere but in the nodes that only count? (Parameters and
    assignment targets bind it; they do not read it.)"""
    skip = {id(n) for c in counting for n in walk(c)}
    for node in walk(body):
        if isinstance(node, cst.Param):
            skip.add(id(node.name))
        elif isinstance(node, cst.AssignTarget):
            skip |= _bound_name_ids(node.target)
    return any(isinstance(n, cst.Name) and n.value == name and id(n) not in skip for n in walk(body))


def _bound_name_ids(target: cst.CSTNode) -> set[int]:
    """The Name nodes a target binds (`a`, `a, (b, *c)`), not those it reads (`x[n]`)."""
    if isinstance(target, cst.Name):
        return {id(target)}
    if isinstance(target, (cst.Tuple, cst.List)):
        return set().union(*(_bound_name_ids(e.value) for e in target.elements))
    if isinstance(target, cst.StarredElement):
        return _bound_name_ids(target.value)
    return set()


def refuse_weak_read(leaf_code: str, step: int = 1) -> None:
    if step == 0:  # no counter: a constant the loop hands on, a weakly typed int32 array inside it
        raise Refuse(
            f"the carry `{leaf_code}` is a Python int the loop returns unchanged, and its value is read: the loop makes "
            "it a weakly typed int32 array, which the lifted kernel would replace by the literal (a Python int: no "
            "`.astype`, no `.shape`); write the initial value as jnp.int32(...), or read the constant itself instead "
            "of carrying it"
        )
    raise Refuse(
        f"the counter carry `{leaf_code}` is a Python int (weakly typed) and its value is read; the lifted kernel would "
        "read it from pl.program_id (int32), so write the initial value as jnp.int32(...)"
    )

