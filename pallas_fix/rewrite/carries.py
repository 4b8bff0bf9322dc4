"""A reduction loop's carry (R2): how it is packed (one value, or a tuple or list of leaves), and
for each leaf its name in the kernel, its scratch ref, initial value, shape and dtype.

The scratch buffer must have exactly the carry's dtype: `acc_ref[...] = v` rejects any other,
and a carry that would be promoted (a weakly typed `jnp.full(shape, 0.0)` meeting a bf16 body)
accumulates in another precision. So the dtype is read only from a constructor that fixes it,
and anything else is refused with the spelling that would fix it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import libcst as cst

from pallas_fix.analysis.context import walk
from pallas_fix.core.model import LoopInfo
from pallas_fix.core.plans import Refuse
from pallas_fix.rewrite.statements import body_statements, is_docstring
from pallas_fix.rewrite.syntax import code

_SHAPED_CTORS = ("jax.numpy.zeros", "jax.numpy.ones", "jax.numpy.empty")  # no dtype: float32
_FULL = "jax.numpy.full"
_DTYPE_MODULES = ("jax.numpy.", "numpy.")
# dtypes a scratch buffer keeps exactly. 64-bit ones are not among them: without
# jax_enable_x64, `jnp.zeros(s, jnp.int64)` is an int32 array while the scratch would be int64.
_EXACT_DTYPES = frozenset({
    "bool", "bool_", "int8", "int16", "int32", "uint8", "uint16", "uint32", "float16", "bfloat16", "float32",
    "float8_e4m3fn", "float8_e5m2", "float8_e4m3b11fnuz", "complex64",
})
_FIX = "write it as jnp.zeros(shape, dtype) or jnp.full(shape, value, dtype)"


@dataclass
class Leaf:
    name: str  # value name in the kernel (acc, m, l)
    ref: str  # scratch ref parameter (acc_ref)
    init: cst.BaseExpression  # kernel-side initial value
    shape: cst.BaseExpression  # call-site shape tuple
    dtype: cst.BaseExpression  # call-site dtype


@dataclass
class Carry:
    leaves: list[Leaf]
    packing: Optional[str]  # None: the carry is one value; "tuple" / "list": the init's container

    def value_text(self) -> str:
        """The carry's current value, loaded from scratch: `acc_ref[...]`, `(m_ref[...], l_ref[...])`."""
        loads = [f"{l.ref}[...]" for l in self.leaves]
        if self.packing is None:
            return loads[0]
        if self.packing == "list":
            return "[" + ", ".join(loads) + "]"
        return "(" + ", ".join(loads) + ("," if len(loads) == 1 else "") + ")"


def carry_model(analysis, region, loop: LoopInfo, translate) -> Carry:
    ctx = analysis.ctx
    env = region.env
    init = loop.init
    if init is None:
        raise Refuse("the loop has no initial carry")
    init = ctx.resolve_value(init, loop.call) if isinstance(init, cst.Name) else init
    packing = {cst.Tuple: "tuple", cst.List: "list"}.get(type(init))
    items = [e.value for e in init.elements] if packing else [init]
    if not items or any(isinstance(e, cst.StarredElement) for e in getattr(init, "elements", ())):
        raise Refuse("the initial carry is not a literal tuple of values")
    names = _leaf_names(region, len(items))
    taken = {n.value for n in walk(region.site.kernel) if isinstance(n, cst.Name)}
    leaves = []
    for name, item in zip(names, items):
        item = ctx.resolve_value(item, loop.call) if isinstance(item, cst.Name) else item
        if isinstance(item, cst.Dict):
            raise Refuse("dict carries are not lifted; carry a tuple of arrays")
        if isinstance(item, (cst.Tuple, cst.List)):
            raise Refuse("nested carry tuples are not lifted")
        shape, dtype = _shape_dtype(ctx, item)
        shape_cs = translate(shape, env)
        dtype_cs = translate(dtype, env)
        if shape_cs is None or dtype_cs is None:
            raise Refuse(f"the carry shape `{code(shape)}` cannot be written at the pallas_call")
        if isinstance(shape_cs, cst.Tuple) and not shape_cs.elements:
            raise Refuse("scalar carries are not lifted yet (give the carry a shape such as (1, 1))")
        _check_exact_dtype(ctx, dtype_cs, item)
        leaves.append(Leaf(name, _scratch_ref_name(name, taken), item, shape_cs, dtype_cs))
    return Carry(leaves, packing)


def _shape_dtype(ctx, item: cst.BaseExpression) -> tuple[cst.BaseExpression, cst.BaseExpression]:
    """(shape, dtype) of a carry built by jnp.zeros / ones / empty / full; refused otherwise."""
    q = (ctx.imports.qualify(item.func) or "") if isinstance(item, cst.Call) else ""
    if q not in _SHAPED_CTORS and q != _FULL:
        raise Refuse(f"cannot tell the shape and dtype of the carry `{code(item)}`; {_FIX}")
    pos = [a.value for a in item.args if a.keyword is None]
    kw = {a.keyword.value: a.value for a in item.args if a.keyword is not None}
    if any(a.star for a in item.args):
        raise Refuse(f"cannot tell the shape and dtype of the carry `{code(item)}`; {_FIX}")
    shape = kw.get("shape", pos[0] if pos else None)
    dtype_pos = 2 if q == _FULL else 1
    dtype = kw.get("dtype", pos[dtype_pos] if len(pos) > dtype_pos else None)
    if isinstance(dtype, cst.Name) and dtype.value == "None":
        dtype = None
    if shape is None:
        raise Refuse(f"cannot tell the shape of the carry `{code(item)}`; {_FIX}")
    if dtype is None and q == _FULL:
        # The dtype comes from the fill value; a Python number gives a weakly typed carry, which
        # fori_loop promotes to whatever the body returns (bf16 + weak f32 -> bf16).
        raise Refuse(
            f"the carry `{code(item)}` takes its dtype from the fill value (weakly typed: the loop may promote it); "
            "give it a dtype, e.g. jnp.full(shape, value, jnp.float32)"
        )
    if dtype is None:
        dtype = _default_float(ctx, item)
    if isinstance(shape, cst.Integer):
        shape = cst.Tuple([cst.Element(shape)])
    return shape, dtype


def _default_float(ctx, item: cst.Call) -> cst.BaseExpression:
    """jnp.zeros(shape) is float32 (jax's default float without jax_enable_x64), spelled through
    the module's own jax.numpy import."""
    jnp = next((k for k, v in ctx.imports.bindings.items() if v == "jax.numpy"), None)
    if jnp is None:
        raise Refuse(f"the carry `{code(item)}` has no dtype and the module does not import jax.numpy; give it one")
    return cst.parse_expression(f"{jnp}.float32")


def _check_exact_dtype(ctx, dtype: cst.BaseExpression, item: cst.BaseExpression) -> None:
    """The call-site dtype names a dtype that a scratch buffer and the carry agree on."""
    name = None
    if isinstance(dtype, cst.SimpleString):
        name = dtype.evaluated_value
    else:
        q = ctx.imports.qualify(dtype) or ""
        if q.startswith(_DTYPE_MODULES):
            name = q.rsplit(".", 1)[1]
    if name in _EXACT_DTYPES:
        return
    raise Refuse(
        f"the scratch buffer for the carry `{code(item)}` needs its exact dtype, and `{code(dtype)}` may not be it "
        "(Python types and 64-bit dtypes are canonicalised); write a 32-bit or narrower dtype such as jnp.float32"
    )


def _scratch_ref_name(name: str, taken: set[str]) -> str:
    """`acc_ref`, unless the kernel already mentions that name (a parameter, a local, a global)."""
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
    unpack = _first_unpack_names(region)
    if unpack is not None and len(unpack) == n:
        return unpack
    if n == 1 and region.carry_name:
        return [region.carry_name]
    return [f"carry{i}" for i in range(n)]


def result_target(region) -> Optional[cst.BaseExpression]:
    """What the loop's result is assigned to (`acc`, `m, l`); None for a bare loop statement."""
    stmt_ = region.statement
    small = stmt_.body[0] if isinstance(stmt_, cst.SimpleStatementLine) else None
    if isinstance(small, cst.Assign):
        return small.targets[0].target
    return None


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


def _first_unpack_names(region) -> Optional[list[str]]:
    found = first_unpack(region)
    return [e.value.value for e in found[1].elements] if found is not None else None


def first_unpack(region) -> Optional[tuple[cst.SimpleStatementLine, cst.Tuple | cst.List]]:
    """The body's first statement when it is `m, l, o = carry` (distinct plain names), with its
    target."""
    body, carry = region.body, region.carry_name
    if not isinstance(body, cst.FunctionDef) or carry is None:
        return None
    stmts = [s for s in body_statements(body) if not is_docstring(s)]
    first = stmts[0] if stmts else None
    if not (isinstance(first, cst.SimpleStatementLine) and len(first.body) == 1 and isinstance(first.body[0], cst.Assign)):
        return None
    assign = first.body[0]
    target = assign.targets[0].target
    if len(assign.targets) != 1 or not (isinstance(assign.value, cst.Name) and assign.value.value == carry):
        return None
    if not isinstance(target, (cst.Tuple, cst.List)):
        return None
    names = [e.value.value for e in target.elements if isinstance(e, cst.Element) and isinstance(e.value, cst.Name)]
    if len(names) != len(target.elements) or len(set(names)) != len(names):
        return None
    return first, target
