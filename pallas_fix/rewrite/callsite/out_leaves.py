"""The size of an output whose out_shape the call site names but does not spell out.

`pl.pallas_call(kernel, out_shape=kwargs['outs'], ...)`: the caller built the structs from the
inputs' shapes, and no line of the wrapper says how large output k is. Yet its size is fixed at
the call: `jax.tree.leaves(kwargs['outs'])[k].shape[d]` (the out_shape's leaves are the outputs,
in order, whether it is one struct or a list of them). That expression is what the bounds proofs
reason about, and a guard written with it (rewrite.guards.shape_guards) reads the same value before
the call, as long as nothing rebinds its names between the two (rewrite.guards.unchanged).
Only for an out_shape that is a plain read: names, attributes, constant subscripts. One that
code builds (a builder def's list, a generator over arrays) is read as its structs instead
(`built_structs`).
"""

from __future__ import annotations

from typing import Optional

import libcst as cst

from pallas_fix.analysis.context import plain_read
from pallas_fix.analysis.discovery.operand_refs import scratch_count
from pallas_fix.rewrite.callsite.spelling.built_structs import read_structs
from pallas_fix.rewrite.callsite.spelling.grafts import grafted_ids
from pallas_fix.rewrite.callsite.spelling.operands import CallSiteError
from pallas_fix.rewrite.text.imports import module_alias


def leaf_dim(cs, slot, dim: int) -> Optional[cst.BaseExpression]:
    """`jax.tree.leaves(<out_shape>)[k].shape[dim]` for output slot k, one node per (slot, dim)
    (so every proof that reads it reads one atom); None when the out_shape is not a plain read,
    the module has no `import jax`, or the rank says there is no such dim."""
    written = cs.site.kw("out_shape")
    jax = module_alias(cs.ctx, "jax")
    rank = cs.rank(slot.param)
    if written is None or jax is None or not plain(written) or rank is None or not 0 <= dim < rank:
        return None
    cache = cs.__dict__.setdefault("_leaf_dims", {})
    key = (slot.index, dim)
    if key not in cache:
        text = f"{jax}.tree.leaves({cs.ctx.code(written)})[{slot.index}].shape[{dim}]"
        cache[key] = cst.parse_expression(text)
    return cache[key]


def plain(expr: cst.CSTNode) -> bool:
    """Names, attributes and constant (integer or string) subscripts: one value read twice."""
    return not isinstance(expr, cst.Integer) and plain_read(expr, keys=True)


def leaf_parts(expr: cst.CSTNode) -> Optional[cst.BaseExpression]:
    """The out_shape inside a `jax.tree.leaves(E)[k].shape[d]` that leaf_dim built; None otherwise."""
    try:
        call = expr.value.value.value  # `[d]` of `.shape` of `[k]` of `leaves(E)`
    except AttributeError:
        return None
    if (isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute) and call.func.attr.value == "leaves"
            and len(call.args) == 1 and plain(call.args[0].value)):
        return call.args[0].value
    return None


def mirrored_spec(cs, spec: str) -> str:
    """The out_specs for the one output of a call whose out_shape the call site names without
    spelling it (`kwargs['outs']`: one struct or a list of one): the spec mapped over that
    out_shape, so the two pytrees match whichever it is; `spec` itself when the out_shape is a
    struct the code builds (`jax.ShapeDtypeStruct(...)`) or is not a plain read."""
    written = cs.site.kw("out_shape")
    jax = module_alias(cs.ctx, "jax")
    if written is None or jax is None or not plain(written) or isinstance(cs.out_shapes[0], cst.Call):
        return spec
    return f"{jax}.tree.map(lambda _: {spec}, {cs.ctx.code(written)})"


def one_named_output(cs, rest: int) -> list:
    """No refs to add (a kernel without `*refs`); an out_shape the call site names without
    spelling it is read as one output, so this raises CallSiteError unless the kernel's `rest` refs after its inputs are that output and the scratch
    refs. A list of two structs there would make the second output a scratch ref, and one spec
    mapped over both (mirrored_spec)."""
    if not cs.single_output or isinstance(cs.out_shapes[0], cst.Call):
        return []
    scratch = scratch_count(cs.site, lambda e: cs.ctx.resolve_value(e, cs.site.call))
    if scratch is None or rest != 1 + scratch:
        tail = f" and {scratch} scratch ref{'s' if scratch != 1 else ''}" if scratch else ""
        raise CallSiteError(
            f"`{cs.ctx.code(cs.site.kw('out_shape'))}` (out_shape) does not say how many outputs the call has, and the "
            f"kernel takes {rest} refs after its inputs, not one output{tail}; spell the out_shape out at the "
            "pallas_call (a list of `jax.ShapeDtypeStruct`s)")
    return []


def built_structs(cs, out: cst.BaseExpression) -> Optional[tuple[list[cst.BaseExpression], bool]]:
    """The structs of an out_shape that code builds (a generator over a tuple of arrays, `+` of
    such parts, `[s] * 3`, the list a builder def returns: spelling.built_structs), in the call
    site's names, and whether it is one struct (not a list); None when it is not so built. The nodes the reading built are recorded
    (`cs.grafted`): a size copied from them is checked part by part (CallTiming.same_at_call)."""
    found = read_structs(cs.ctx, out, cs.anchor(out))
    for struct in found[0] if found is not None else []:
        cs.grafted |= grafted_ids(struct, cs.in_tree)
    return found
