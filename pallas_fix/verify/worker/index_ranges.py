"""Which integer inputs of an entry are indices, and the largest value each may take.

Verification fills integer arrays with random values. An operand whose values the kernel uses
as a slice start or an index (an index table, a page table, scalar-prefetched block indices) must
stay in its valid range, or every interpreter just clamps (or rejects) and the part of the kernel
that matters is never exercised; any other integer operand gets a wide signed range
(:mod:`pallas_fix.verify.worker.calls`).

:func:`index_bounds` reads the traced jaxpr of the original entry: an integer input passed
straight to a ``pallas_call`` (through ``jit`` wrappers), loaded in the kernel (``get``), and used
- possibly converted, squeezed or multiplied by a positive constant - as a slice start, a scalar
index or an integer-array index of a ref, or returned by a BlockSpec index_map (scalar prefetch),
is bounded by that ref's (or array's) extent: ``0 <= v <= bound``. Values computed by the entry
before the pallas_call (``jnp.abs(t) % n``) are the entry's own business and get no bound.
Imports nothing from jax itself; the jaxpr helpers duck-type.
"""

from __future__ import annotations

from typing import Any, Optional

from pallas_fix.verify.judge.jaxprs import as_jaxprs, open_jaxpr
from pallas_fix.verify.judge.ref_indexers import find_indexers, is_slice, is_var, operands

# Equations whose output is their first operand's value (an index keeps its range through them).
_SAME_VALUE = frozenset({"convert_element_type", "squeeze", "reshape", "copy", "copy_p"})
# Wrappers whose sub-jaxpr binders are their operands, one to one.
_CALLS = frozenset({"pjit", "jit", "closed_call", "core_call", "remat", "checkpoint", "custom_jvp_call",
                    "custom_vjp_call", "custom_vjp_call_jaxpr"})

# var -> (input position, scale): the var holds that input's values times `scale`
_Loaded = dict


def index_bounds(jaxpr) -> dict[int, int]:
    """Input position (in the flattened arguments of the traced entry) -> the largest value that
    position may hold to stay a valid index everywhere the kernels use it."""
    top = open_jaxpr(jaxpr)
    bounds: dict[int, int] = {}
    _walk_outer(top, {v: i for i, v in enumerate(top.invars)}, bounds)
    return bounds


def _note(bounds: dict[int, int], position: int, bound: int) -> None:
    if bound >= 0:
        bounds[position] = min(bound, bounds.get(position, bound))


def _walk_outer(jaxpr, inputs: dict, bounds: dict[int, int]) -> None:
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "pallas_call":
            _pallas_call(eqn, inputs, bounds)
        elif eqn.primitive.name in _CALLS:
            for sub in _subs(eqn):
                inner = {b: inputs[o] for b, o in zip(sub.invars, eqn.invars) if is_var(o) and o in inputs}
                if inner and len(sub.invars) == len(eqn.invars):
                    _walk_outer(sub, inner, bounds)


def _subs(eqn) -> list:
    return [open_jaxpr(s) for v in eqn.params.values() for s in as_jaxprs(v)]


def _pallas_call(eqn, inputs: dict, bounds: dict[int, int]) -> None:
    kernel = open_jaxpr(eqn.params["jaxpr"])
    # kernel binders: scalar-prefetch refs, input refs (both in operand order), outputs, scratch
    refs = {b: inputs[o] for b, o in zip(kernel.invars, eqn.invars) if is_var(o) and o in inputs}
    if refs:
        _walk_kernel(kernel, refs, {}, bounds)
    grid_mapping = eqn.params.get("grid_mapping")
    n_prefetch = int(getattr(grid_mapping, "num_index_operands", 0) or 0)
    prefetch = {k: inputs[o] for k, o in enumerate(eqn.invars[:n_prefetch]) if is_var(o) and o in inputs}
    if prefetch:
        for mapping in getattr(grid_mapping, "block_mappings", ()):
            _index_map(mapping, len(getattr(grid_mapping, "grid", ())), prefetch, bounds)


def _index_map(mapping, n_grid: int, prefetch: dict[int, int], bounds: dict[int, int]) -> None:
    """A scalar-prefetched value returned by an index_map is a block index of that operand."""
    index_map = open_jaxpr(mapping.index_map_jaxpr)
    refs = {b: prefetch[k] for k, b in enumerate(index_map.invars[n_grid:]) if k in prefetch}
    loaded = _walk_kernel(index_map, refs, {}, bounds)
    shape = getattr(getattr(mapping, "array_aval", None), "shape", None)
    if shape is None:
        shape = getattr(getattr(mapping, "array_shape_dtype", None), "shape", ())
    for out, dim, block in zip(index_map.outvars, shape, mapping.block_shape):
        size = getattr(block, "block_size", None)
        n_blocks = -(-int(dim) // size) if isinstance(size, int) and size > 0 else int(dim)
        _bound_use(loaded, out, n_blocks - 1, bounds)


def _walk_kernel(jaxpr, refs: dict, loaded: _Loaded, bounds: dict[int, int]) -> _Loaded:
    """Follow loads from the input refs in ``refs`` through ``jaxpr`` and its sub-jaxprs; returns
    the values known to be loaded ones."""
    loaded = dict(loaded)
    for eqn in jaxpr.eqns:
        _track(eqn, refs, loaded)
        _uses(eqn, loaded, bounds)
        for sub, pairs in _binders(eqn):
            inner_refs = {b: refs[o] for b, o in pairs if o in refs}
            inner_loaded = {b: loaded[o] for b, o in pairs if o in loaded}
            if inner_refs or inner_loaded:
                _walk_kernel(sub, inner_refs, inner_loaded, bounds)
    return loaded


def _track(eqn, refs: dict, loaded: _Loaded) -> None:
    name = eqn.primitive.name
    ins = list(eqn.invars)
    if not eqn.outvars or not ins:
        return
    out = eqn.outvars[0]
    if name == "get" and is_var(ins[0]) and ins[0] in refs:
        loaded[out] = (refs[ins[0]], 1)
    elif name in _SAME_VALUE and is_var(ins[0]) and ins[0] in loaded:
        loaded[out] = loaded[ins[0]]
    elif name == "mul" and len(ins) == 2:
        for a, b in (ins, ins[::-1]):
            factor = _positive_literal(b)
            if is_var(a) and a in loaded and factor is not None:
                position, scale = loaded[a]
                loaded[out] = (position, scale * factor)


def _positive_literal(x) -> Optional[int]:
    value = getattr(x, "val", None)
    try:
        number = int(value)
    except (TypeError, ValueError):
        return None
    return number if number > 0 and number == value else None


def _uses(eqn, loaded: _Loaded, bounds: dict[int, int]) -> None:
    """A loaded value used to index the ref of a get / swap / addupdate (the first indexer)."""
    if eqn.primitive.name not in ("get", "swap", "addupdate") or not loaded:
        return
    shape = getattr(getattr(eqn.invars[0], "aval", None), "shape", None)
    try:
        indexers = [i for _, obj in operands(eqn) for i in find_indexers(obj)]
    except Exception:
        return
    if shape is None or not indexers:
        return
    for dim, index in zip(shape, indexers[0].indices):
        if is_slice(index):
            size = index.size if isinstance(index.size, int) else None
            if size is not None:
                _bound_use(loaded, index.start, int(dim) - size, bounds)
        else:
            _bound_use(loaded, index, int(dim) - 1, bounds)


def _bound_use(loaded: _Loaded, value: Any, limit: int, bounds: dict[int, int]) -> None:
    if is_var(value) and value in loaded:
        position, scale = loaded[value]
        _note(bounds, position, limit // scale)


def _binders(eqn) -> list[tuple[Any, list]]:
    """(sub-jaxpr, [(binder, operand)]) for the sub-jaxprs whose binders take the operands' values.
    Through a loop only refs are followed: a carried value is not its initial value (and jax 0.12's
    scan no longer says which operands are consts), but a ref stays the same ref."""
    name = eqn.primitive.name
    ops = list(eqn.invars)
    out = []
    for sub in _subs(eqn):
        if name == "while":
            n_cond, n_body = int(eqn.params.get("cond_nconsts", 0)), int(eqn.params.get("body_nconsts", 0))
            body = sub is open_jaxpr(eqn.params["body_jaxpr"])
            outer = ops[n_cond:] if body else ops[:n_cond] + ops[n_cond + n_body:]
            pairs = [(b, o) for b, o in zip(sub.invars, outer) if _is_ref(b)]
        elif name == "scan":
            pairs = [(b, o) for b, o in zip(sub.invars, ops) if _is_ref(b)] if len(sub.invars) == len(ops) else []
        elif name == "cond":
            pairs = list(zip(sub.invars, ops[1:]))
        elif name == "run_scoped":
            pairs = list(zip((list(getattr(sub, "constvars", ())) + list(sub.invars))[:len(ops)], ops))
        elif name in _CALLS and len(sub.invars) == len(ops):
            pairs = list(zip(sub.invars, ops))
        else:
            pairs = []
        out.append((sub, [(b, o) for b, o in pairs if is_var(o)]))
    return out


def _is_ref(var) -> bool:
    return hasattr(getattr(var, "aval", None), "inner_aval")
