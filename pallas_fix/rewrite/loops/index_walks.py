"""Two readings the strip-mine screen (rewrite.loops.strip_mines) needs beyond what a lift reads:
the block index an index_map def with branches returns along one dim (`if causal: nxt = ...;
return (b, h, nxt, 0)`, or `return lax.cond(p, below, above)` over local defs), and the array dim
of a window written after a starred index (`k_ref[(*batch_idx, pl.ds(s, bk), :)]`, `batch_idx` a
tuple literal at every call of the function holding the access: JAX's flash attention)."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from pallas_fix.analysis.binders import positional_names
from pallas_fix.analysis.context import ModuleContext, walk
from pallas_fix.analysis.discovery.forwarded_refs import callees
from pallas_fix.core import names as N
from pallas_fix.core.model import IndexUse, KernelSite
from pallas_fix.rewrite.text.syntax import is_zero


def returned_entry(ctx: ModuleContext, spec, dim: int) -> Optional[cst.BaseExpression]:
    """Entry `dim` of what the spec's index_map def returns, when every return writes a non-zero
    entry there (the grid moves the block along that dim on some steps); None when a return is
    neither a tuple literal nor `lax.cond(pred, f, g)` over defs local to the index_map."""
    if not isinstance(spec.index_map, cst.Name) or spec.node is None:
        return None
    fn = ctx.resolve_def(spec.index_map.value, spec.node)
    entries = _returned(ctx, fn, dim, depth=0) if fn is not None else None
    if not entries or any(is_zero(e) for e in entries):
        return None
    return entries[0]


def _returned(ctx: ModuleContext, fn: cst.FunctionDef, dim: int, depth: int) -> Optional[list[cst.BaseExpression]]:
    local = {d.name.value: d for d in walk(fn.body) if isinstance(d, cst.FunctionDef)}
    entries: list[cst.BaseExpression] = []
    for node in _own_returns(fn):
        value = node.value
        if isinstance(value, cst.Tuple):
            items = value.elements
            if dim >= len(items) or any(isinstance(e, cst.StarredElement) for e in items):
                return None
            entries.append(items[dim].value)
        elif isinstance(value, cst.Call) and ctx.imports.is_(value.func, N.COND) and depth < 2 and len(value.args) == 3:
            for branch in value.args[1:]:
                inner = local.get(branch.value.value) if isinstance(branch.value, cst.Name) else None
                found = _returned(ctx, inner, dim, depth + 1) if inner is not None and not inner.params.params else None
                if not found:
                    return None
                entries.extend(found)
        else:
            return None
    return entries


def _own_returns(fn: cst.FunctionDef) -> list[cst.Return]:
    """The returns of `fn` itself (not of defs inside it)."""
    out: list[cst.Return] = []
    stack = list(fn.body.children)
    while stack:
        node = stack.pop()
        if isinstance(node, (cst.FunctionDef, cst.Lambda)):
            continue
        if isinstance(node, cst.Return) and node.value is not None:
            out.append(node)
        stack.extend(node.children)
    return out


def starred_dim(ctx: ModuleContext, use: IndexUse, site: KernelSite) -> Optional[int]:
    """The dim of `use`'s window when its index tuple unpacks names before it (`(*batch_idx,
    pl.ds(s, bk), :)`): each `*name` counts the length of the tuple literal every call of the
    function binding `name` passes for it; None when a length is not that plain."""
    items = _index_items(use.subscript)
    if items is None or site.kernel is None:
        return None
    dim = 0
    for item in items:
        if any(n is use.element for n in walk(item)) or item is use.element:
            return dim
        if isinstance(item, cst.StarredElement):
            n = _passed_length(ctx, item.value, use, site.kernel) if isinstance(item.value, cst.Name) else None
            if n is None:
                return None
            dim += n
        else:
            dim += 1
    return None


def _index_items(sub: cst.Subscript) -> Optional[list[cst.CSTNode]]:
    if len(sub.slice) == 1 and isinstance(sub.slice[0].slice, cst.Index) and isinstance(sub.slice[0].slice.value, cst.Tuple):
        return [e if isinstance(e, cst.StarredElement) else e.value for e in sub.slice[0].slice.value.elements]
    return None


def _passed_length(ctx: ModuleContext, name: cst.Name, use: IndexUse, kernel: cst.FunctionDef) -> Optional[int]:
    """The length of the tuple literal bound to parameter `name` at every call of its def."""
    fn = next((s for s in ctx.scope_chain(use.subscript) if isinstance(s, cst.FunctionDef)
               and name.value in positional_names(s)), None)
    if fn is None or ctx.assignments(name.value, fn):
        return None
    position = positional_names(fn).index(name.value)
    lengths = set()
    for call in walk(kernel):
        if not (isinstance(call, cst.Call) and isinstance(call.func, cst.Name) and fn in callees(ctx, kernel, call)):
            continue
        args = [a for a in call.args if a.keyword is None]
        if position >= len(args) or args[position].star or not isinstance(args[position].value, cst.Tuple):
            return None
        if any(isinstance(e, cst.StarredElement) for e in args[position].value.elements):
            return None
        lengths.add(len(args[position].value.elements))
    return lengths.pop() if len(lengths) == 1 else None
