"""A reduction loop's carry (R2): how its leaves nest (one value, or tuples, lists, dicts and
NamedTuples of leaves: carry_tree), and for each leaf its name in the kernel, its scratch ref,
initial value, shape and dtype, or, for a step counter, how it follows from the step number
(carry_counters). A 0-d leaf (`jnp.float32(0)`) lives in a (1,) scalar-memory buffer.

The scratch buffer must have exactly the carry's dtype: `acc_ref[...] = v` rejects any other,
and a carry that would be promoted (a weakly typed `jnp.full(shape, 0.0)` meeting a bf16 body)
accumulates in another precision. So the dtype is read only from a constructor that fixes it, or
from the ref a carry is read whole from (`h = h0_ref[:, :]`: the ref's block shape and exactly its
dtype, written at the call site as the operand's, rewrite.callsite.dtypes), and anything else is
refused with the spelling that would fix it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import libcst as cst

from pallas_fix.analysis.context import walk
from pallas_fix.core.model import LoopInfo
from pallas_fix.core.plans import Refuse
from pallas_fix.rewrite.kernel.scratch_temps import whole_dim
from pallas_fix.rewrite.reduction.carry_counters import Counter, carry_counters
from pallas_fix.rewrite.reduction.carry_shapes import call_site_shape
from pallas_fix.rewrite.reduction.carry_names import body_unpack, result_target
from pallas_fix.rewrite.reduction.carry_tree import Flat, Tree, flatten, mirror, render
from pallas_fix.rewrite.text.scopes import bindings
from pallas_fix.rewrite.text.syntax import code

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
    ref: Optional[str]  # scratch ref parameter (acc_ref); None for a step counter
    init: cst.BaseExpression  # kernel-side initial value
    shape: Optional[cst.BaseExpression] = None  # call-site shape tuple (scratch leaves)
    dtype: Optional[cst.BaseExpression] = None  # call-site dtype (scratch leaves)
    counter: Optional[Counter] = None  # a step counter: its value follows from the step number
    bound_in_body: bool = True  # the step must bind it (a counter the body never mentions need not)
    read_after: bool = False  # a counter whose final value the code after the loop reads
    scalar: bool = False  # a 0-d carry, kept in a (1,) buffer in scalar memory

    @property
    def place(self) -> str:
        """Where the leaf's value lives between steps: `acc_ref[...]`, or `total_ref[0]`."""
        return f"{self.ref}[0]" if self.scalar else f"{self.ref}[...]"

    def load(self, steps: str, final: bool = False) -> str:
        """The leaf's value after `steps` iterations: its scratch buffer, or the counter's value
        (`final`: after the last step, where `steps` may be a Python int, pl.num_programs)."""
        if self.counter is None:
            return self.place
        return self.counter.final(steps) if final else self.counter.after(steps)


@dataclass
class Carry:
    leaves: list[Leaf]
    tree: Optional[Tree]  # how the leaves nest (carry_tree); None when the loop carries nothing

    @property
    def scratch(self) -> list[Leaf]:
        return [l for l in self.leaves if l.ref is not None]

    def value_text(self, steps: str, final: bool = False) -> str:
        """The carry's value after `steps` iterations, rebuilt from its leaves:
        `acc_ref[...]`, `(m_ref[...], l_ref[...])`, `{"acc": acc_ref[...], "n": k}`."""
        assert self.tree is not None
        return render(self.tree, lambda i: self.leaves[i].load(steps, final))


def carry_model(analysis, region, loop: LoopInfo, translate, blocked: set[tuple[str, int]]) -> Carry:
    """`blocked`: the (ref, dim) pairs the rewrite blocks along the new axis (carry_shapes)."""
    ctx = analysis.ctx
    env = region.env
    if loop.init is None:
        raise Refuse("the loop has no initial carry")
    flat = flatten(ctx, loop.init, loop.call, lambda name: _value_at_loop(region, name))
    names = _leaf_names(region, flat)
    taken = {n.value for n in walk(region.site.kernel) if isinstance(n, cst.Name)}
    counters = carry_counters(ctx, region, flat, blocked)
    leaves = []
    for n, (name, item) in enumerate(zip(names, flat.inits)):
        if n in counters:
            counter, bound, after = counters[n]
            leaves.append(Leaf(name, None, item, counter=counter, bound_in_body=bound, read_after=after))
            continue
        whole = _whole_ref_read(region, item)
        shape, dtype = (cst.Attribute(whole, cst.Name("shape")), cst.Attribute(whole, cst.Name("dtype"))) if whole else _shape_dtype(ctx, item)
        shape_cs = call_site_shape(ctx, region, shape, translate, blocked)
        dtype_cs = translate(dtype, env)
        if shape_cs is None or dtype_cs is None:
            raise Refuse(f"the carry shape `{code(shape)}` cannot be written at the pallas_call")
        scalar = isinstance(shape_cs, cst.Tuple) and not shape_cs.elements
        if whole is None or not _is_operand_dtype(dtype_cs):  # an operand's array dtype is exact
            _check_exact_dtype(ctx, dtype_cs, item)
        shape_cs = cst.parse_expression("(1,)") if scalar else shape_cs
        leaves.append(Leaf(name, _scratch_ref_name(name, taken), item, shape_cs, dtype_cs, scalar=scalar))
    return Carry(leaves, flat.tree)


def _value_at_loop(region, name: str) -> Optional[cst.BaseExpression]:
    """The value of the kernel's last top-level statement before the loop that binds `name`,
    when that statement is a plain `name = value` and nothing between it and the loop rebinds
    a name the value reads (`_init` evaluates it again where the loop was)."""
    before = [s for s in region.before if name in set(bindings(s, nested=True))]
    last = before[-1] if before else None
    small = last.body[0] if isinstance(last, cst.SimpleStatementLine) and len(last.body) == 1 else None
    if not (isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name)):
        return None
    between = region.before[region.before.index(last) + 1 :]
    reads = {n.value for n in walk(small.value) if isinstance(n, cst.Name)}
    if any(reads & set(bindings(s, nested=True)) for s in between):
        return None
    return small.value


def _shape_dtype(ctx, item: cst.BaseExpression) -> tuple[cst.BaseExpression, cst.BaseExpression]:
    """(shape, dtype) of a carry built by jnp.zeros / ones / empty / full; refused otherwise."""
    q = (ctx.imports.qualify(item.func) or "") if isinstance(item, cst.Call) else ""
    if _is_number(item):
        raise Refuse(
            f"the carry `{code(item)}` is a Python number: weakly typed, it takes the dtype of what the loop adds to it, "
            "which its scratch buffer must know; write it with its dtype, e.g. jnp.float32(0)"
        )
    if q.startswith("jax.numpy.") and q.rsplit(".", 1)[1] in _EXACT_DTYPES and len(item.args) == 1 and item.args[0].keyword is None:
        return cst.Tuple([]), item.func  # `jnp.float32(0)`: a 0-d array of that dtype
    literal = _array_of_number(q, item)
    if literal is not None:
        return cst.Tuple([]), literal  # `jnp.array(0, dtype=jnp.int32)`: a 0-d array of that dtype
    if q not in _SHAPED_CTORS and q != _FULL or any(a.star for a in item.args):
        raise Refuse(f"cannot tell the shape and dtype of the carry `{code(item)}`; {_FIX}")
    pos = [a.value for a in item.args if a.keyword is None]
    kw = {a.keyword.value: a.value for a in item.args if a.keyword is not None}
    shape = built_shape(ctx, item)
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


def built_shape(ctx, item: cst.BaseExpression) -> Optional[cst.BaseExpression]:
    """The shape a carry built by jnp.zeros / ones / empty / full is given (first positional or
    `shape=`), as written; None for any other expression or a shape not written there."""
    q = (ctx.imports.qualify(item.func) or "") if isinstance(item, cst.Call) else ""
    if q not in _SHAPED_CTORS and q != _FULL or any(a.star for a in item.args):  # type: ignore[union-attr]
        return None
    assert isinstance(item, cst.Call)
    pos = [a.value for a in item.args if a.keyword is None]
    kw = {a.keyword.value: a.value for a in item.args if a.keyword is not None}
    return kw.get("shape", pos[0] if pos else None)


def _whole_ref_read(region, item: cst.BaseExpression) -> Optional[cst.Name]:
    """The ref of a carry that is a whole read of a kernel ref (`h_ref[...]`, `h_ref[:, :]`): its
    shape is the ref's (the block's) and its dtype exactly the ref's."""
    if not (isinstance(item, cst.Subscript) and isinstance(item.value, cst.Name)):
        return None
    if item.value.value not in {p.name.value for p in region.site.kernel.params.params}:
        return None
    return item.value if all(whole_dim(element.slice) for element in item.slice) else None


def _is_operand_dtype(dtype: cst.BaseExpression) -> bool:
    """`x.dtype` written at the call site for an input (rewrite.callsite.dtypes)."""
    return isinstance(dtype, cst.Attribute) and dtype.attr.value == "dtype"


def _array_of_number(q: str, item: cst.BaseExpression) -> Optional[cst.BaseExpression]:
    """The dtype of `jnp.array(0, dtype=jnp.int32)` / `jnp.asarray(0, jnp.int32)`: a number
    literal and a dtype (not None), nothing else; None for anything else."""
    if q not in ("jax.numpy.array", "jax.numpy.asarray") or any(a.star for a in item.args):
        return None
    pos = [a.value for a in item.args if a.keyword is None]
    kw = {a.keyword.value: a.value for a in item.args if a.keyword is not None}
    dtype = kw.get("dtype", pos[1] if len(pos) > 1 else None)
    if len(pos) + len(kw) != 2 or not pos or not _is_number(pos[0]) or dtype is None:
        return None
    return None if isinstance(dtype, cst.Name) and dtype.value == "None" else dtype


def _is_number(expr: cst.BaseExpression) -> bool:
    if isinstance(expr, (cst.Integer, cst.Float)):
        return True
    return isinstance(expr, cst.UnaryOperation) and isinstance(expr.expression, (cst.Integer, cst.Float))


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


def _leaf_names(region, flat: Flat) -> list[str]:
    """A name for each leaf: the names the loop's result or the body's first unpacking give it
    (for a flat carry, whichever names every leaf; `_` names none), a dict key or NamedTuple
    field, the carry parameter of a one-leaf carry."""
    n = len(flat.inits)
    from_result = mirror(flat.tree, result_target(region)) or {}
    found = body_unpack(region)
    from_body = (mirror(flat.tree, found[1]) if found is not None else None) or {}
    if flat.tree.is_leaf or flat.tree.is_flat():
        for names in (from_result, from_body):
            if len(names) == n and len(set(names.values())) == n and "_" not in names.values():
                return [names[i] for i in range(n)]
    if n == 1 and region.carry_name:
        return [region.carry_name]

    def named(i: int) -> Optional[str]:
        return next((m[i] for m in (from_result, from_body) if m.get(i, "_") != "_"), None)

    names = [named(i) or hint or f"carry{i}" for i, hint in enumerate(flat.hints)]
    return names if len(set(names)) == n else [f"carry{i}" for i in range(n)]
