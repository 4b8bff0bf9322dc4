"""Moving a reduction's carry between its scratch refs and the names the kernel reads it by (R2):
the loads that bind the body's carry parameter at the top of each grid step, the store of the
body's result, and the loads that bind the loop's result for the code after the loop.

Each binding means what the original binding meant: a name bound to the whole carry gets the
whole carry (a tuple when the carry is one), and a target that unpacks it unpacks the same value,
so `carry[1]`, a second unpacking, `res = fori_loop(...)` read as `res[0]`, and `a, b =` over a
single array carry all keep their meaning."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from pallas_fix.analysis.context import walk
from pallas_fix.core.plans import Refuse
from pallas_fix.rewrite.carries import Carry, first_unpack, result_target
from pallas_fix.rewrite.statements import body_statements, is_docstring, stmt
from pallas_fix.rewrite.syntax import code


def unpack_to_drop(region, carry: Carry) -> Optional[cst.SimpleStatementLine]:
    """`m, l = carry` as the body's first statement, when `carry` is read nowhere else: the step
    loads bind `m` and `l` directly and the statement goes. None: the body keeps its carry."""
    found = first_unpack(region)
    if found is None or carry.packing is None or len(found[1].elements) != len(carry.leaves):
        return None
    unpack, _ = found
    value = unpack.body[0].value  # type: ignore[attr-defined]
    param = region.body.params.params[1].name
    others = [n for n in walk(region.body) if isinstance(n, cst.Name) and n.value == region.carry_name]
    if any(n is not value and n is not param for n in others):
        return None
    return unpack


def step_loads(region, carry: Carry, unpack: Optional[cst.SimpleStatementLine]) -> list[cst.BaseStatement]:
    """The statements that bind the body's carry at the top of a step."""
    if unpack is not None:
        names = [e.value.value for e in unpack.body[0].targets[0].target.elements]  # type: ignore[attr-defined]
        return [stmt(f"{n} = {leaf.ref}[...]") for n, leaf in zip(names, carry.leaves)]
    if region.carry_name is None:
        raise Refuse("the loop body takes no carry parameter")
    return [stmt(f"{region.carry_name} = {carry.value_text()}")]


def step_bound_names(region, unpack: Optional[cst.SimpleStatementLine]) -> set[str]:
    """The names `step_loads` binds in the kernel's scope."""
    if unpack is not None:
        return {e.value.value for e in unpack.body[0].targets[0].target.elements}  # type: ignore[attr-defined]
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
        if ret.value is not None and not isinstance(ret.value, cst.Name):
            raise Refuse("the loop body returns a computed value, although the loop carries nothing")
        return stmts[:-1] if len(last.body) == 1 else stmts[:-1] + [last.with_changes(body=last.body[:-1])]
    return stmts


def store(result: cst.BaseExpression, carry: Carry) -> list[cst.BaseStatement]:
    """`acc_ref[...] = result`, leaf by leaf for a tuple carry."""
    leaves = carry.leaves
    if carry.packing is None:
        return [stmt(f"{leaves[0].ref}[...] = {code(result)}")]
    targets = ", ".join(f"{l.ref}[...]" for l in leaves) + ("," if len(leaves) == 1 else "")
    literal = isinstance(result, (cst.Tuple, cst.List)) and all(isinstance(e, cst.Element) for e in result.elements)
    if literal and len(result.elements) == len(leaves):  # type: ignore[union-attr]
        values = [e.value for e in result.elements]  # type: ignore[union-attr]
        if len(values) == 1 or all(isinstance(v, cst.Name) for v in values):
            return [stmt(f"{l.ref}[...] = {code(v)}") for l, v in zip(leaves, values)]
        return [stmt(f"{targets} = {', '.join(code(v) for v in values)}")]
    if literal:
        raise Refuse("the loop body returns a tuple that does not match its carry")
    return [stmt(f"{targets} = {code(result)}")]  # unpacks the returned tuple, as fori_loop did


def result_loads(region, carry: Carry, used: set[str]) -> list[cst.BaseStatement]:
    """The loop's result bound as the original bound it, for the code after the loop (only the
    names that code reads)."""
    target = result_target(region)
    if target is None:
        return []
    elements = getattr(target, "elements", None)
    if (
        carry.packing is not None
        and elements is not None
        and len(elements) == len(carry.leaves)
        and all(isinstance(e, cst.Element) and isinstance(e.value, cst.Name) for e in elements)
    ):
        return [stmt(f"{e.value.value} = {leaf.ref}[...]") for e, leaf in zip(elements, carry.leaves) if e.value.value in used]
    names = {n.value for n in walk(target) if isinstance(n, cst.Name)}
    return [stmt(f"{code(target)} = {carry.value_text()}")] if names & used else []

