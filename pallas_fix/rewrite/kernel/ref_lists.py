"""Refs a kernel walks in a comprehension over a literal list: jax-triton's LSTM cell loads four
gate weights with one subscript,

    ws = [pltriton.load(w_ref.at[pl.ds(k * bk, bk), pl.ds(pid_n * bn, bn)])
          for w_ref in [w_ii_ref, w_if_ref, w_ig_ref, w_io_ref]]

The comprehension's subscript is each listed ref's access, so a lift moves them together: one
block for each, taken from the one window, and one edit of the subscript.

Read only where that is all there is to it: the target is bound by that comprehension alone (one
`for`, no `if`), over a list or tuple literal of distinct names, each an input of the kernel
(an output would need its writes read per ref). Anything else stays the comprehension's own
name, which no operand matches, and the lift is refused as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import libcst as cst

from pallas_fix.analysis.context import ModuleContext, walk
from pallas_fix.analysis.effects.syntax import param_names

_COMPREHENSIONS = (cst.ListComp, cst.GeneratorExp, cst.SetComp)


@dataclass(frozen=True)
class RefList:
    name: str  # the comprehension's target (`w_ref`)
    refs: tuple[str, ...]  # the listed refs, in order
    mentions: frozenset[int]  # ids of the target and of the listed names: the refs' accesses, for the lift


def listed_refs(ctx: ModuleContext, kernel: Optional[cst.FunctionDef], name: str, inputs: set[str]) -> Optional[RefList]:
    """`name` as the target of a comprehension over a literal list of the kernel's `inputs`
    (the module docstring); None otherwise."""
    if kernel is None or name in param_names(kernel):
        return None
    fors = [n for n in walk(kernel) if isinstance(n, cst.CompFor) and _binds(n.target, name)]
    if len(fors) != 1 or _bound_otherwise(kernel, name):
        return None
    comp_for = fors[0]
    owner = ctx.parent(comp_for)
    items = comp_for.iter.elements if isinstance(comp_for.iter, (cst.List, cst.Tuple)) else None
    if (not isinstance(owner, _COMPREHENSIONS) or owner.for_in is not comp_for or comp_for.ifs
            or comp_for.inner_for_in is not None or not isinstance(comp_for.target, cst.Name) or not items):
        return None
    names = [e.value for e in items]
    if not all(isinstance(n, cst.Name) and not isinstance(e, cst.StarredElement) for n, e in zip(names, items)):
        return None
    refs = tuple(n.value for n in names)
    if len(set(refs)) != len(refs) or not set(refs) <= inputs:
        return None
    return RefList(name, refs, frozenset({id(comp_for.target), *(id(n) for n in names)}))


def _binds(target: cst.BaseExpression, name: str) -> bool:
    return any(isinstance(n, cst.Name) and n.value == name for n in walk(target))


def _bound_otherwise(kernel: cst.FunctionDef, name: str) -> bool:
    """Some other binding of `name` in the kernel: an assignment, a `for`, a `with ... as`, or a
    parameter of a nested function."""
    for node in walk(kernel):
        if isinstance(node, (cst.AssignTarget, cst.For, cst.AugAssign, cst.AnnAssign)):
            target = node.target
        elif isinstance(node, cst.WithItem):
            target = node.asname
        else:
            target = node.name if isinstance(node, cst.Param) else None
        if target is not None and _binds(target, name):
            return True
    return False
