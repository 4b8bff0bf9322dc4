"""Operand and spec lists a wrapper builds with code instead of writing them out.

- `f(*operands)` where `operands = (a, b, c)` is a local tuple or list literal: the operands are
  its items.
- `in_specs = [a]` then `in_specs.append(b)` / `in_specs.extend([c, d])` / `in_specs += [e]`,
  each a plain statement of the block that binds the list, before the pallas_call: the specs
  are the literal's items followed by the added ones.
- `in_specs = [a, b] + [c]` (or names bound to such lists): the items of each part in order.
- `dq_specs = in_specs.copy()` (or `list(in_specs)`), then appends: `in_specs`'s items, then the
  added ones; `in_specs` is a part the caller sees (one another copy reads is shared).
- `dq_specs[1] = spec`, a plain statement among those changes with a literal index inside the
  list built so far: that slot's spec is `spec`. It is how a lift gives a copy its own spec
  (rewrite.callsite.forwarded), so a later round reads the list the first one wrote.

- `if c: in_specs.append(spec) else: in_specs.append(None)`, or an item `None if c else spec`:
  the slot's spec is `spec` (the `None` arm goes with a `None` operand).

Each item is a node of the source, so an edit of one slot's spec lands where that spec is
written. Anything else (other conditional appends, `insert`, `pop`, a list built in a loop) is
not read, and the caller refuses as before.
"""

from __future__ import annotations

from typing import Optional

import libcst as cst

from pallas_fix.analysis.context import ModuleContext, walk
from pallas_fix.rewrite.text.syntax import elements, is_none


def starred_items(ctx: ModuleContext, star: cst.BaseExpression, at: cst.CSTNode) -> Optional[list[cst.BaseExpression]]:
    """The items of `*star`: a local tuple/list literal of names, each bound at most once in the
    scope (so it means at the call what it meant in the literal)."""
    if not isinstance(star, cst.Name):
        return None
    value = ctx.resolve_value(star, at)
    if value is star or ctx.scope_of(value) is not ctx.scope_of(at):
        return None
    items = elements(value)
    # Planning a variant against its arm (ctx.arm_pin), the arm's tuple of computed operands
    # (`jnp.ravel(grad)`) counts too: its items are matched to refs, never spelled at the call.
    if items is None or not all(isinstance(i, cst.Name) or ctx.arm_pin is not None for i in items):
        return None
    scope = ctx.scope_of(at)
    if any(isinstance(i, cst.Name) and len(ctx.assignments(i.value, scope)) > 1 for i in items):
        return None
    if _mutated(ctx, star.value, scope):
        return None
    return items


def built_items(ctx: ModuleContext, expr: cst.BaseExpression, at: cst.CSTNode):
    """The items of a list `expr` built by a literal plus appends, or by `+` of such lists:
    (items, ids of the list names the building statements read, the list names read by `expr`
    and its parts); None when it is not built so."""
    if isinstance(expr, cst.Name):
        value = ctx.resolve_value(expr, at)
        if value is expr:
            return None
        added = _appended(ctx, expr.value, value, at)
        base = built_items(ctx, value, value) if added is not None else None
        if base is None:
            return None
        items, reads, parts = base
        built = _with_sets(items, added[0])
        if built is None:
            return None
        return built, reads | added[1], [expr, *parts]
    copied = copied_list(expr)
    if copied is not None:  # `dq_specs = specs.copy()`: a new list with the items `specs` has there
        return built_items(ctx, copied, at)
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Add):
        left, right = built_items(ctx, expr.left, at), built_items(ctx, expr.right, at)
        if left is None or right is None:
            return None
        return left[0] + right[0], left[1] | right[1], left[2] + right[2]
    items = elements(expr) if isinstance(expr, cst.List) else None
    return (items, set(), []) if items is not None else None


def copied_list(expr: cst.BaseExpression) -> Optional[cst.Name]:
    """`specs.copy()` or `list(specs)`: `specs`, when it is a plain name."""
    if not isinstance(expr, cst.Call) or any(a.keyword is not None or a.star for a in expr.args):
        return None
    func = expr.func
    if isinstance(func, cst.Attribute) and func.attr.value == "copy" and not expr.args and isinstance(func.value, cst.Name):
        return func.value
    if isinstance(func, cst.Name) and func.value == "list" and len(expr.args) == 1 and isinstance(expr.args[0].value, cst.Name):
        return expr.args[0].value  # type: ignore[return-value]
    return None


def _only_copied(stmt: cst.CSTNode, name: str) -> bool:
    """Every read of `name` in `stmt` is a copy (`other = name.copy()`), which leaves it as it is."""
    copies = {id(c) for n in walk(stmt) if isinstance(n, cst.Call) for c in [copied_list(n)] if c is not None}
    return all(id(n) in copies for n in walk(stmt) if isinstance(n, cst.Name) and n.value == name)


def _with_sets(base: list, changes: list) -> Optional[list]:
    """`base` with `changes` applied in order: items appended, or `(index, item)` replacing the
    item at `index`; None for an index past the end (Python would raise there)."""
    items = list(base)
    for change in changes:
        if isinstance(change, tuple):
            index, item = change
            if index >= len(items):
                return None
            items[index] = item
        else:
            items.append(change)
    return items


def set_item(stmt: cst.CSTNode, name: str) -> Optional[tuple[int, cst.BaseExpression, int]]:
    """`name[k] = x` as a whole statement, `k` a non-negative integer literal: (k, x, id of the
    `name` it reads)."""
    if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assign)):
        return None
    assign = stmt.body[0]
    target = assign.targets[0].target if len(assign.targets) == 1 else None
    if not (isinstance(target, cst.Subscript) and isinstance(target.value, cst.Name) and target.value.value == name):
        return None
    index = target.slice[0].slice if len(target.slice) == 1 else None
    if not (isinstance(index, cst.Index) and isinstance(index.value, cst.Integer)):
        return None
    return int(index.value.value), assign.value, id(target.value)


def _appended(ctx: ModuleContext, name: str, value: cst.BaseExpression, at: cst.CSTNode) -> Optional[tuple[list, set[int]]]:
    """What the statements after `name = value` do to the list before the statement holding
    `at` (items added, or `(index, item)` for an item set: `_with_sets`); None when something
    else touches it in between or a change is not a plain statement of that block."""
    binding = ctx.statement_of(value)
    block = _block_of(ctx, binding)
    user = next((s for s in block if s is at or any(a is s for a in ctx.ancestors(at))), None)
    if binding not in block or user is None or block.index(user) < block.index(binding):
        return None
    items: list = []
    reads: set[int] = set()
    plain = list(block)
    for stmt in block[block.index(binding) + 1 : block.index(user)]:
        change = list_change(stmt, name)
        either = either_change(stmt, name) if change is None else None
        put = set_item(stmt, name) if change is None and either is None else None
        if change is not None:
            items += change[0]
            reads.add(change[1])
        elif put is not None:
            items.append((put[0], put[1]))
            reads.add(put[2])
        elif either is not None:
            items += either[0]
            reads |= either[1]
            plain += either[2]
        elif any(isinstance(n, cst.Name) and n.value == name for n in walk(stmt)) and not _only_copied(stmt, name):
            return None
    if _changed_elsewhere(ctx, name, plain, ctx.scope_of(value)):
        return None
    return items, reads


def either_change(stmt: cst.CSTNode, name: str) -> Optional[tuple[list, set[int], list]]:
    """`if c: name.append(spec) else: name.append(None)` (either way round, or `.extend` of as
    many items): each slot takes the arm's spec that is not `None`. Pallas matches in_specs
    against the operands as pytrees, so where the call runs the `None` arm its operand is `None`
    too (no ref, nothing to block) and the spec written in the other arm is the slot's only
    spec. A slot with a spec in both arms is not read. Also: the ids of the names read, and
    the two changing statements; the arms' other statements do not touch `name`."""
    if not (isinstance(stmt, cst.If) and isinstance(stmt.orelse, cst.Else)):
        return None
    arms = [[s for s in arm.body if any(isinstance(n, cst.Name) and n.value == name for n in walk(s))]
            for arm in (stmt.body, stmt.orelse.body)]
    if any(len(arm) != 1 for arm in arms):
        return None
    changes = [list_change(arm[0], name) for arm in arms]
    if changes[0] is None or changes[1] is None or len(changes[0][0]) != len(changes[1][0]):
        return None
    items = []
    for a, b in zip(changes[0][0], changes[1][0]):
        if not (is_none(a) or is_none(b)):
            return None
        items.append(b if is_none(a) else a)
    return items, {changes[0][1], changes[1][1]}, [arms[0][0], arms[1][0]]


def present_arm(item: cst.BaseExpression) -> cst.BaseExpression:
    """`None if b is None else spec` (or the other way round): `spec`, for the reason
    `either_change` gives; any other item as it is."""
    if isinstance(item, cst.IfExp) and is_none(item.body) != is_none(item.orelse):
        return item.orelse if is_none(item.body) else item.body
    return item


def list_change(stmt: cst.CSTNode, name: str) -> Optional[tuple[list, int]]:
    """`name.append(x)`, `name.extend([..])`, `name += [..]` as a whole statement: (added items,
    id of the `name` it reads)."""
    if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1):
        return None
    small = stmt.body[0]
    if isinstance(small, cst.AugAssign) and isinstance(small.operator, cst.AddAssign):
        target = small.target
        items = elements(small.value) if isinstance(small.value, cst.List) else None
        if isinstance(target, cst.Name) and target.value == name and items is not None:
            return items, id(target)
        return None
    if not (isinstance(small, cst.Expr) and isinstance(small.value, cst.Call)):
        return None
    call = small.value
    func = call.func
    if not (isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == name):
        return None
    if len(call.args) != 1 or call.args[0].keyword is not None or call.args[0].star:
        return None
    arg = call.args[0].value
    if func.attr.value == "append":
        return [arg], id(func.value)
    if func.attr.value == "extend" and isinstance(arg, (cst.List, cst.Tuple)) and elements(arg) is not None:
        return elements(arg), id(func.value)
    return None


def _block_of(ctx: ModuleContext, stmt: Optional[cst.CSTNode]) -> list:
    parent = ctx.parent(stmt) if stmt is not None else None
    return list(getattr(parent, "body", ())) if parent is not None else []


def _changed_elsewhere(ctx: ModuleContext, name: str, block: list, scope) -> bool:
    """The list is changed somewhere but a plain statement of `block` (a nested block, a helper)."""
    plain = {id(s) for s in block}
    return any(mutates(node, name) and id(ctx.statement_of(node)) not in plain for node in walk(scope))


def _mutated(ctx: ModuleContext, name: str, scope) -> bool:
    return any(mutates(node, name) for node in walk(scope))


_MUTATORS = ("append", "insert", "extend", "pop", "remove", "clear", "reverse", "sort")


def mutates(node: cst.CSTNode, name: str) -> bool:
    """`name.append(...)`, `name += ...` or `name[i] = ...`."""
    if isinstance(node, cst.Call):
        func = node.func
        return (
            isinstance(func, cst.Attribute)
            and isinstance(func.value, cst.Name)
            and func.value.value == name
            and func.attr.value in _MUTATORS
        )
    if isinstance(node, cst.AugAssign):
        return isinstance(node.target, cst.Name) and node.target.value == name
    if isinstance(node, cst.AssignTarget):
        target = node.target
        return isinstance(target, cst.Subscript) and isinstance(target.value, cst.Name) and target.value.value == name
    return False
