"""Shape reads of a ref whose block squeezes dims out of the kernel's view.

A squeezed (`None`) block dim is gone from the kernel's ref: after `x_ref[row, :]` becomes
`x_ref[...]` with dim 0 squeezed, what was `x_ref.shape[1]` is `x_ref.shape[0]`. Every dim after a
squeezed one moves down by one (`new_dim`), `x_ref.ndim` is one less (read as `x_ref.ndim + 1`),
and `rows, cols = x_ref.shape` unpacks one name fewer. A read of a squeezed dim's own size is the
full size the kernel saw, passed in as a keyword (rewrite.extents.extent_params). What cannot be renumbered
(`x_ref.size`, the whole shape used as a value, a slice of it, a dim counted from the end of a ref
of unknown rank) is refused.
"""

from __future__ import annotations

from typing import Callable, Optional

import libcst as cst

from pallas_fix.analysis.context import walk
from pallas_fix.core.plans import Refuse
from pallas_fix.rewrite.blocks.plan import RefBlock
from pallas_fix.rewrite.text.edits import Edit

SizeOf = Callable[[int, cst.BaseExpression], Optional[str]]  # dim, unpacked target -> text; None: target is the parameter


def dropped_dims(block: RefBlock) -> set[int]:
    """The kernel dims of `block.param` its new block squeezes out of the kernel's view."""
    return set(block.squeezed) | ({block.dim} if block.squeeze else set())


def new_dim(block: RefBlock, dim: int) -> int:
    """The kernel dim `dim` of the ref, numbered in the rewritten kernel's view."""
    return dim - sum(1 for d in dropped_dims(block) if d < dim)


def unpack_edits(assign: cst.Assign, name: str, block: RefBlock, size_of: Optional[SizeOf], params) -> dict[cst.CSTNode, Edit]:
    """`a, b = x_ref.shape` for the rewritten view. `size_of`: how to write the blocked dim's full
    size, when the kernel reads it (None: its name feeds only the loop's bounds, gone with the loop)."""
    dropped = dropped_dims(block)
    targets, values = [], []
    for d, el in enumerate(assign.targets[0].target.elements):  # type: ignore[attr-defined]
        target = el.value
        if d == block.dim and size_of is not None:
            text = size_of(d, target)
        elif d == block.dim and d in dropped:
            continue  # only the vanishing loop bounds read it
        elif d in dropped:
            text = None if params.adopt(block.param, d, target) else params.name_for(block.param, d)
        else:
            text = f"{name}.shape[{new_dim(block, d)}]"
        if text is not None:
            targets.append(cst.Module([]).code_for_node(target))
            values.append(text)
    if not targets:
        params.remove_assignment(assign)
        return {}
    text = f"{', '.join(targets)} = {', '.join(values)}"
    return {assign: lambda _n, t=text: cst.parse_statement(t).body[0]}  # type: ignore[attr-defined]


def squeezed_read_edits(cs, reads: list, blocks: list[RefBlock], handled: set[int], params) -> dict[cst.CSTNode, Edit]:
    """The edits renumbering every other shape read of a ref with squeezed dims. `handled`: ids of
    the reads rewritten as full sizes already (extent_reads)."""
    kernel, ctx = cs.site.kernel, cs.ctx
    edits: dict[cst.CSTNode, Edit] = {}
    for block in blocks:
        dropped = dropped_dims(block)
        if not dropped or kernel is None:
            continue
        aliased = [r for r in reads if r.ref == block.param and r.name != block.param]
        if aliased:
            raise Refuse(f"`{aliased[0].name}.shape` (an alias of `{block.param}`) is read in the kernel (line {aliased[0].line}) "
                         "and the new block squeezes a dim out of its view; read the shape from the ref itself")
        for node in walk(kernel):
            if not isinstance(node, cst.Name) or node.value != block.param:
                continue
            attr = ctx.parent(node)
            if not (isinstance(attr, cst.Attribute) and attr.value is node) or id(attr) in handled:
                continue
            if attr.attr.value == "ndim":
                bare = isinstance(ctx.parent(attr), (cst.Assign, cst.Arg, cst.Element, cst.Return))
                text = f"{node.value}.ndim + {len(dropped)}"
                edits[attr] = lambda _n, t=text if bare else f"({text})": cst.parse_expression(t)
            elif attr.attr.value in ("shape", "size"):
                edits.update(_shape_edit(cs, block, node, attr, handled, params))
    return edits


def _shape_edit(cs, block: RefBlock, node: cst.Name, attr: cst.Attribute, handled: set[int], params) -> dict[cst.CSTNode, Edit]:
    ctx, ref = cs.ctx, node.value
    line = ctx.span(node).line
    parent = ctx.parent(attr)
    if renumberable(ctx, node) and isinstance(parent, cst.Assign):
        return unpack_edits(parent, ref, block, None, params)
    if id(parent) in handled:
        return {}  # rewritten as a full size already (extent_reads)
    dim = _static_dim(cs, ref, parent) if attr.attr.value == "shape" and isinstance(parent, cst.Subscript) else None
    if dim is None:
        raise Refuse(f"`{ref}.{attr.attr.value}` is read in the kernel (line {line}); once the new block squeezes dim "
                     f"{min(dropped_dims(block))} out of `{ref}`'s view it would mean something else: read single dims "
                     "(`x_ref.shape[1]`), or pass the size in as a static argument")
    if dim == block.dim:
        return {}  # not collected as a full-size read: the loop's bounds (which go) hold it
    if dim in dropped_dims(block):
        name = params.name_for(ref, dim)
        return {parent: lambda _n, t=name: cst.Name(t)}
    index = parent.slice[0].slice.value  # type: ignore[attr-defined]
    from_end = isinstance(index, cst.UnaryOperation)
    if (from_end and all(d < dim for d in dropped_dims(block))) or (not from_end and new_dim(block, dim) == dim):
        return {}  # the same number still names the same dim
    return {index: lambda _n, t=str(new_dim(block, dim)): cst.Integer(t)}


def _static_dim(cs, ref: str, sub: cst.Subscript) -> Optional[int]:
    """The kernel dim `x_ref.shape[d]` reads (counted from the front), or None."""
    if len(sub.slice) != 1 or not isinstance(sub.slice[0].slice, cst.Index):
        return None
    value = sub.slice[0].slice.value
    env = cs.env
    dim = env.static_int(value) if env is not None else (int(value.value) if isinstance(value, cst.Integer) else None)
    if dim is None or dim >= 0:
        return dim
    rank = cs.kernel_rank(ref)
    return rank + dim if rank is not None and rank + dim >= 0 else None


def renumberable(ctx, node: cst.Name) -> bool:
    """A mention of a ref (`node`) that squeezed_read_edits can rewrite for the squeezed view:
    `.ndim`, `.shape[d]` with one index, `.shape` unpacked into names. (A dim read through a name
    or from the end may still be refused there, with the ref's rank in hand.)"""
    attr = ctx.parent(node)
    if not (isinstance(attr, cst.Attribute) and attr.value is node):
        return False
    if attr.attr.value == "ndim":
        return True
    if attr.attr.value != "shape":
        return False
    parent = ctx.parent(attr)
    if isinstance(parent, cst.Subscript):
        return len(parent.slice) == 1 and isinstance(parent.slice[0].slice, cst.Index)
    return isinstance(parent, cst.Assign) and parent.value is attr and len(parent.targets) == 1 \
        and isinstance(parent.targets[0].target, (cst.Tuple, cst.List)) \
        and all(isinstance(e.value, cst.Name) for e in parent.targets[0].target.elements)
