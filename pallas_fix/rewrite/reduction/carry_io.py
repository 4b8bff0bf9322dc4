"""Moving a reduction's carry between its scratch refs and the names the kernel reads it by (R2):
the loads that bind the body's carry parameter at the top of each grid step, the store of the
body's result, and the loads that bind the loop's result for the code after the loop.

Each binding means what the original binding meant: a name bound to the whole carry gets the
whole carry (a tuple when the carry is one, the dict or NamedTuple rebuilt from its leaves), and
a target that unpacks it unpacks the same value, so `carry[1]`, a second unpacking,
`res = fori_loop(...)` read as `res[0]`, and `a, b =` over a single array carry all keep their
meaning. A step counter (carry_counters) is bound from the step number and never stored."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from pallas_fix.analysis.context import walk
from pallas_fix.analysis.loops.loops import returns_constant
from pallas_fix.core.plans import Refuse
from pallas_fix.rewrite.reduction.carries import Carry
from pallas_fix.rewrite.reduction.carry_names import body_unpack, result_target
from pallas_fix.rewrite.reduction.carry_tree import leaf_paths, literal_leaves, mirror
from pallas_fix.analysis.binders import is_docstring
from pallas_fix.rewrite.text.statements import body_statements, stmt
from pallas_fix.rewrite.text.syntax import code


def unpack_to_drop(region, carry: Carry) -> Optional[cst.SimpleStatementLine]:
    """`m, l = carry` (or `(m, l), acc = carry`, mirroring the carry's structure) as the body's
    first statement, when `carry` is read nowhere else: the step loads bind `m` and `l` directly
    and the statement goes. None: the body keeps its carry."""
    found = body_unpack(region)
    tree = carry.tree
    if found is None or tree is None or tree.is_leaf:
        return None
    unpack, target = found
    names = mirror(tree, target)
    if names is None:
        return None
    plain = [n for n in names.values() if n != "_"]
    if len(set(plain)) != len(plain) or (len(plain) < len(names) and _reads(region.body, "_", target)):
        return None
    value = unpack.body[0].value  # type: ignore[attr-defined]
    param = region.body.params.params[1].name
    others = [n for n in walk(region.body) if isinstance(n, cst.Name) and n.value == region.carry_name]
    if any(n is not value and n is not param for n in others):
        return None
    return unpack


def _reads(body: cst.CSTNode, name: str, besides: cst.CSTNode) -> bool:
    skip = {id(n) for n in walk(besides)}
    return any(isinstance(n, cst.Name) and n.value == name and id(n) not in skip for n in walk(body))


def unpacked_names(carry: Carry, unpack: cst.SimpleStatementLine) -> dict[int, str]:
    """Leaf number -> the name the dropped unpacking bound it to (`_` left out)."""
    assert carry.tree is not None
    names = mirror(carry.tree, unpack.body[0].targets[0].target) or {}  # type: ignore[attr-defined]
    return {n: name for n, name in names.items() if name != "_"}


def step_loads(region, carry: Carry, unpack: Optional[cst.SimpleStatementLine], step: str) -> list[cst.BaseStatement]:
    """The statements that bind the body's carry at the top of grid step `step`."""
    if unpack is not None:
        names = unpacked_names(carry, unpack)
        return [stmt(f"{names[n]} = {leaf.load(step)}") for n, leaf in enumerate(carry.leaves) if n in names and leaf.bound_in_body]
    if region.carry_name is None:
        raise Refuse("the loop body takes no carry parameter")
    leaf = carry.leaves[0] if len(carry.leaves) == 1 else None
    if leaf is not None and carry.tree is not None and carry.tree.is_leaf and not leaf.bound_in_body:
        return []  # a counter the body never reads
    return [stmt(f"{region.carry_name} = {carry.value_text(step)}")]


def step_bound_names(region, carry: Carry, unpack: Optional[cst.SimpleStatementLine]) -> set[str]:
    """The names `step_loads` binds in the kernel's scope."""
    if unpack is not None:
        return set(unpacked_names(carry, unpack).values())
    return {region.carry_name} if region.carry_name else set()


def body_and_result(body: cst.CSTNode, drop_unpack: bool) -> tuple[list[cst.BaseStatement], cst.BaseExpression]:
    """(the statements before the return, the returned expression) of the updated body; the
    leading `m, l = carry` goes when the step loads replace it."""
    if isinstance(body, cst.Lambda):
        return [], body.body
    assert isinstance(body, cst.FunctionDef)
    stmts = body_statements(body)
    last = stmts[-1] if stmts else None
    if not (isinstance(last, cst.SimpleStatementLine) and isinstance(last.body[-1], cst.Return)):
        raise Refuse("the loop body does not end with `return`")
    ret = last.body[-1]
    if ret.value is None:
        raise Refuse("the loop body returns nothing")
    rest = stmts[:-1] if len(last.body) == 1 else stmts[:-1] + [last.with_changes(body=last.body[:-1])]
    if drop_unpack:
        first = next(n for n, s in enumerate(rest) if not is_docstring(s))
        rest = rest[:first] + rest[first + 1 :]
    return rest, ret.value


def body_without_return(body: cst.CSTNode) -> list[cst.BaseStatement]:
    """The updated body of a loop that carries nothing: its statements, less a final `return`
    of the (unused) carry or of None."""
    if isinstance(body, cst.Lambda):
        raise Refuse("a lambda body carries its value; it has no statements to run on each step")
    assert isinstance(body, cst.FunctionDef)
    stmts = body_statements(body)
    last = stmts[-1] if stmts else None
    if isinstance(last, cst.SimpleStatementLine) and isinstance(last.body[-1], cst.Return):
        ret = last.body[-1]
        if not (returns_constant(ret) or isinstance(ret.value, cst.Name)):
            raise Refuse("the loop body returns a computed value, although the loop carries nothing")
        return stmts[:-1] if len(last.body) == 1 else stmts[:-1] + [last.with_changes(body=last.body[:-1])]
    return stmts


def store(result: cst.BaseExpression, carry: Carry) -> list[cst.BaseStatement]:
    """`acc_ref[...] = result`, leaf by leaf for a structured carry; counters are not stored."""
    tree, leaves = carry.tree, carry.leaves
    assert tree is not None
    if tree.is_leaf:
        return [stmt(f"{leaves[0].place} = {code(result)}")] if leaves[0].ref else []
    by_leaf = literal_leaves(tree, result)
    if by_leaf is not None:
        pairs = [(leaves[n], by_leaf[n]) for n in range(len(leaves)) if leaves[n].ref is not None]
        values = [v for _, v in pairs]
        if len(pairs) == len(leaves) and tree.is_flat() and len(values) > 1 and not all(isinstance(v, cst.Name) for v in values):
            targets = ", ".join(l.place for l, _ in pairs)
            return [stmt(f"{targets} = {', '.join(code(v) for v in values)}")]
        return [stmt(f"{l.place} = {code(v)}") for l, v in pairs]
    if isinstance(result, (cst.Tuple, cst.List, cst.Dict)):
        raise Refuse("the loop body returns a value whose structure does not match its carry")
    if isinstance(result, cst.Name):  # reading it again costs nothing
        paths = leaf_paths(tree, result.value)
        return [stmt(f"{l.place} = {paths[n]}") for n, l in enumerate(leaves) if l.ref is not None]
    if tree.is_flat() and all(l.ref is not None for l in leaves):
        targets = ", ".join(l.place for l in leaves) + ("," if len(leaves) == 1 else "")
        return [stmt(f"{targets} = {code(result)}")]  # unpacks the returned tuple, as fori_loop did
    raise Refuse("the loop body returns its structured carry as a computed value; return it written out")


def result_loads(region, carry: Carry, used: set[str], steps: str) -> list[cst.BaseStatement]:
    """The loop's result bound as the original bound it, for the code after the loop (only the
    names that code reads); `steps`: the number of iterations the loop ran."""
    target = result_target(region)
    if target is None:
        return []
    names = mirror(carry.tree, target) if carry.tree is not None and not carry.tree.is_leaf else None
    if names is not None:
        return [stmt(f"{names[n]} = {leaf.load(steps, final=True)}") for n, leaf in enumerate(carry.leaves) if names[n] in used]
    bound = {n.value for n in walk(target) if isinstance(n, cst.Name)}
    return [stmt(f"{code(target)} = {carry.value_text(steps, final=True)}")] if bound & used else []
