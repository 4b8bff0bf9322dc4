"""The names a reduction's carry goes by around the loop (R2): what the loop's result is assigned
to, the body's first unpacking of its carry, what the body returns, and which of those names the
code after the loop reads."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from pallas_fix.analysis.context import walk
from pallas_fix.rewrite.reduction.carry_tree import Tree, leaves_of, mirror
from pallas_fix.analysis.binders import is_docstring
from pallas_fix.rewrite.text.statements import body_statements


def result_target(region) -> Optional[cst.BaseExpression]:
    """What the loop's result is assigned to (`acc`, `m, l`); None for a bare loop statement.
    `@pl.loop(..., init_carry=c) def acc(i, carry)` binds the decorated name to the final carry
    (jax/_src/pallas/helpers.py: the decorator returns fori_loop's result)."""
    stmt_ = region.statement
    if isinstance(stmt_, cst.FunctionDef) and region.loop.kind == "pl.loop":
        return stmt_.name if region.loop.carries else None
    small = stmt_.body[0] if isinstance(stmt_, cst.SimpleStatementLine) else None
    if isinstance(small, cst.Assign) and small.value is region.loop.call and names_only(small.targets[0].target):
        return small.targets[0].target
    return None


def names_only(target: cst.BaseExpression) -> bool:
    """`acc`, `m, l`, `(m, l), acc`, `a, *rest`: a target that binds the result to names (a
    subscript or an attribute target is a use inside a larger statement: loop_result_use)."""
    if isinstance(target, cst.Name):
        return True
    if isinstance(target, (cst.Tuple, cst.List)):
        return all(names_only(e.value) for e in target.elements)
    return False


def result_bound_names(region) -> set[str]:
    """Every name the loop's result target binds (`acc`; `m`, `l`; `a`, `rest` of `a, *rest`)."""
    target = result_target(region)
    return {n.value for n in walk(target) if isinstance(n, cst.Name)} if target is not None else set()


def result_names(region) -> list[str]:
    """The plain names the loop's result is assigned to, in order (`acc = ...`, `m, l = ...`)."""
    target = result_target(region)
    if isinstance(target, cst.Name):
        return [target.value]
    elements = getattr(target, "elements", ())
    return [e.value.value for e in elements if isinstance(e, cst.Element) and isinstance(e.value, cst.Name)]


def body_unpack(region) -> Optional[tuple[cst.SimpleStatementLine, cst.BaseExpression]]:
    """The body's first statement when it is `<target> = carry`, with its target."""
    body, carry = region.body, region.carry_name
    if not isinstance(body, cst.FunctionDef) or carry is None:
        return None
    stmts = [s for s in body_statements(body) if not is_docstring(s)]
    first = stmts[0] if stmts else None
    if not (isinstance(first, cst.SimpleStatementLine) and len(first.body) == 1 and isinstance(first.body[0], cst.Assign)):
        return None
    assign = first.body[0]
    if len(assign.targets) != 1 or not (isinstance(assign.value, cst.Name) and assign.value.value == carry):
        return None
    return first, assign.targets[0].target


def returned_value(body: cst.CSTNode) -> Optional[cst.BaseExpression]:
    """What the body returns at its end (a lambda's expression); None without a final return."""
    if isinstance(body, cst.Lambda):
        return body.body
    stmts = body_statements(body) if isinstance(body, cst.FunctionDef) else []
    last = stmts[-1] if stmts else None
    if isinstance(last, cst.SimpleStatementLine) and isinstance(last.body[-1], cst.Return):
        return last.body[-1].value
    return None


def leaf_body_names(region, tree: Tree) -> list[Optional[str]]:
    """The name the body reads each leaf by: the carry parameter of a one-leaf carry, the names of
    a first unpacking that mirrors the carry; None where it reads the leaf through the whole."""
    n = len(leaves_of(tree))
    if tree.is_leaf:
        return [region.carry_name]
    found = body_unpack(region)
    names = mirror(tree, found[1]) if found is not None else None
    return [names.get(i) if names and names.get(i) != "_" else None for i in range(n)]


def deleted_results(region) -> list[cst.SimpleStatementLine]:
    """`del acc` after the loop, deleting only names its result bound: it just unbinds them, and
    after the rewrite nothing binds them where it runs, so it goes."""
    bound = result_bound_names(region)
    out = []
    for s in region.after:
        if isinstance(s, cst.SimpleStatementLine) and len(s.body) == 1 and isinstance(s.body[0], cst.Del):
            target = s.body[0].target
            names = [e.value for e in target.elements] if isinstance(target, (cst.Tuple, cst.List)) else [target]
            if all(isinstance(x, cst.Name) and x.value in bound for x in names):
                out.append(s)
    return out


def names_read_after(region) -> set[str]:
    """The names the code after the loop mentions (not counting the `del`s that go)."""
    dropped = set(map(id, deleted_results(region)))
    return {n.value for s in region.after if id(s) not in dropped for n in walk(s) if isinstance(n, cst.Name)}


def result_leaf_reads(region, tree: Tree) -> list[bool]:
    """Does the code after the loop read each leaf of the result?"""
    n = len(leaves_of(tree))
    target = result_target(region)
    if target is None:
        return [False] * n
    read = names_read_after(region)
    names = mirror(tree, target)
    if names is not None:
        return [names[i] in read for i in range(n)]
    return [bool({x.value for x in walk(target) if isinstance(x, cst.Name)} & read)] * n
