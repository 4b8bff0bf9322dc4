"""A reduction loop's carry, leaf by leaf (R2): each leaf's name in the kernel, its scratch ref,
initial value, shape and dtype; and the statements that load it from scratch before the body
and store the body's result back after it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import libcst as cst

from pallas_fix.core.model import LoopInfo
from pallas_fix.core.plans import Refuse
from pallas_fix.rewrite.statements import body_statements, stmt
from pallas_fix.rewrite.syntax import code

_ZERO_CTORS = ("jax.numpy.zeros", "jax.numpy.ones", "jax.numpy.full", "jax.numpy.empty")


@dataclass
class Leaf:
    name: str  # value name in the kernel (acc, m, l)
    ref: str  # scratch ref parameter (acc_ref)
    init: cst.BaseExpression  # kernel-side initial value
    shape: cst.BaseExpression  # call-site shape tuple
    dtype: cst.BaseExpression  # call-site dtype


def carry_leaves(analysis, region, loop: LoopInfo, translate) -> list[Leaf]:
    ctx = analysis.ctx
    env = region.env
    init = loop.init
    if init is None:
        raise Refuse("the loop has no initial carry")
    init = ctx.resolve_value(init, loop.call) if isinstance(init, cst.Name) else init
    items = [e.value for e in init.elements] if isinstance(init, (cst.Tuple, cst.List)) else [init]
    names = _leaf_names(region, len(items))
    params = region.site.kernel.params
    taken = {p.name.value for p in params.params} | {p.name.value for p in params.kwonly_params}
    leaves = []
    for name, item in zip(names, items):
        item = ctx.resolve_value(item, loop.call) if isinstance(item, cst.Name) else item
        if isinstance(item, (cst.Tuple, cst.List)):
            raise Refuse("nested carry tuples are not lifted")
        shape, dtype = _shape_dtype(ctx, item)
        if shape is None:
            raise Refuse(f"cannot tell the shape and dtype of the carry `{code(item)}`; write it as jnp.zeros(shape, dtype)")
        shape_cs = translate(shape, env)
        dtype_cs = translate(dtype, env)
        if shape_cs is None or dtype_cs is None:
            raise Refuse(f"the carry shape `{code(shape)}` cannot be written at the pallas_call")
        if isinstance(shape_cs, cst.Tuple) and not shape_cs.elements:
            raise Refuse("scalar carries are not lifted yet (give the carry a shape such as (1, 1))")
        leaves.append(Leaf(name, _scratch_ref_name(name, taken), item, shape_cs, dtype_cs))
    return leaves


def _scratch_ref_name(name: str, taken: set[str]) -> str:
    ref = f"{name}_ref"
    if ref in taken:
        ref = f"{name}_scratch_ref"
    while ref in taken:
        ref = f"{ref}_"
    taken.add(ref)
    return ref


def _leaf_names(region, n: int) -> list[str]:
    names = result_names(region)
    if len(names) == n and all(names):
        return names
    unpack = _unpack_names(region)
    if unpack is not None and len(unpack) == n:
        return unpack
    if n == 1 and region.carry_name:
        return [region.carry_name]
    return [f"carry{i}" for i in range(n)]


def result_names(region) -> list[str]:
    """The names the loop's result is assigned to (`acc = ...`, `m, l = ...`)."""
    stmt_ = region.statement
    small = stmt_.body[0] if isinstance(stmt_, cst.SimpleStatementLine) else None
    if isinstance(small, cst.Assign):
        t = small.targets[0].target
        if isinstance(t, cst.Name):
            return [t.value]
        return [e.value.value for e in t.elements]  # type: ignore[union-attr]
    return []


def _unpack_names(region) -> Optional[list[str]]:
    """`m, l, o = carry` as the body's first use of its carry."""
    body = region.body
    if not isinstance(body, cst.FunctionDef) or region.carry_name is None:
        return None
    for s in body_statements(body):
        if isinstance(s, cst.SimpleStatementLine) and isinstance(s.body[0], cst.Assign):
            a = s.body[0]
            if isinstance(a.value, cst.Name) and a.value.value == region.carry_name:
                t = a.targets[0].target
                if isinstance(t, (cst.Tuple, cst.List)) and all(isinstance(e.value, cst.Name) for e in t.elements):
                    return [e.value.value for e in t.elements]
    return None


def carry_param_names(region, leaves: list[Leaf]) -> list[str]:
    """How the body refers to its carry: one name, or the names it unpacks the tuple into."""
    unpack = _unpack_names(region)
    if unpack is not None and len(unpack) == len(leaves):
        return unpack
    if len(leaves) == 1:
        return [region.carry_name or leaves[0].name]
    raise Refuse("the body uses its tuple carry without unpacking it (`a, b = carry`)")


def _shape_dtype(ctx, item: cst.BaseExpression):
    if not isinstance(item, cst.Call):
        return None, None
    q = ctx.imports.qualify(item.func) or ""
    if q not in _ZERO_CTORS:
        return None, None
    pos = [a.value for a in item.args if a.keyword is None]
    kw = {a.keyword.value: a.value for a in item.args if a.keyword is not None}
    shape = kw.get("shape", pos[0] if pos else None)
    dtype_pos = 2 if q == "jax.numpy.full" else 1
    dtype = kw.get("dtype", pos[dtype_pos] if len(pos) > dtype_pos else None)
    if shape is None:
        return None, None
    if dtype is None:
        jnp = next((k for k, v in ctx.imports.bindings.items() if v == "jax.numpy"), None)
        if jnp is None:
            return None, None
        dtype = cst.parse_expression(f"{jnp}.float32")
    if isinstance(shape, cst.Integer):
        shape = cst.Tuple([cst.Element(shape)])
    return shape, dtype


# -- the body, once per grid step ----------------------------------------------------------------
def body_and_result(body: cst.CSTNode, region):
    """(statements before the return, the returned expression) of the updated body."""
    if isinstance(body, cst.Lambda):
        return [], body.body
    assert isinstance(body, cst.FunctionDef)
    stmts = list(body.body.body)
    last = stmts[-1]
    if not (isinstance(last, cst.SimpleStatementLine) and isinstance(last.body[-1], cst.Return)):
        raise Refuse("the loop body does not end with `return`")
    ret = last.body[-1]
    rest = stmts[:-1] if len(last.body) == 1 else stmts[:-1] + [last.with_changes(body=last.body[:-1])]
    if _unpack_names(region) is not None:
        rest = [s for s in rest if not _is_unpack_of(s, region.carry_name)]
    return rest, ret.value


def _is_unpack_of(node, carry: Optional[str]) -> bool:
    return (
        isinstance(node, cst.SimpleStatementLine)
        and isinstance(node.body[0], cst.Assign)
        and isinstance(node.body[0].value, cst.Name)
        and node.body[0].value.value == carry
    )


def load(carry_names: list[str], leaves: list[Leaf]) -> list[cst.BaseStatement]:
    return [stmt(f"{n} = {l.ref}[...]") for n, l in zip(carry_names, leaves)]


def store(result: Optional[cst.BaseExpression], leaves: list[Leaf]) -> list[cst.BaseStatement]:
    if result is None:
        raise Refuse("the loop body returns nothing")
    if len(leaves) == 1:
        return [stmt(f"{leaves[0].ref}[...] = {code(result)}")]
    if isinstance(result, (cst.Tuple, cst.List)) and len(result.elements) == len(leaves):
        values = [e.value for e in result.elements]
        if all(isinstance(v, cst.Name) for v in values):
            return [stmt(f"{l.ref}[...] = {code(v)}") for l, v in zip(leaves, values)]
        targets = ", ".join(f"{l.ref}[...]" for l in leaves)
        return [stmt(f"{targets} = {', '.join(code(v) for v in values)}")]
    raise Refuse("the loop body does not return a tuple matching its carry")
