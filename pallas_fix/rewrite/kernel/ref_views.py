"""Names that stand for a kernel ref: plain aliases (`r = x_ref`) and views
(`xb = x_ref.at[pl.ds(i * bm, bm)]`, views of views).

A lift turns the ref into its block. An alias is the ref itself, so an access through it is an
access of the ref, lifted like one. A view whose window is the lifted one becomes the whole block
(`xb = x_ref`): an access through it is relative to the view, the same before and after, so it
stays as written. An access through a view that the lift does not rewrite (a fixed window, or a
view bound outside the loop) is an access of the ref at a place that does not follow the loop
index.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import libcst as cst

from pallas_fix.analysis.context import walk
from pallas_fix.analysis.discovery.varargs import star_bound_in
from pallas_fix.core.plans import Refuse


@dataclass(frozen=True)
class RefName:
    """What a name used as a ref stands for."""

    root: str  # the kernel's ref parameter
    view: Optional[cst.Subscript]  # the `root.at[...]` the chain starts from; None: a plain alias


def resolve_ref_name(env, name: str, kernel, depth: int = 0) -> Optional[RefName]:
    """`name` as the kernel ref parameter it aliases or views, or None when it is not bound
    once to one (a helper's parameter, a ref picked from a list, a rebound name)."""
    owner = env.owner(name)
    if owner is None or depth > 8:
        return None
    if (owner.scope is kernel and name in owner.params) or (name not in owner.params and star_bound_in(owner.ctx, kernel, name, owner.scope)):
        return RefName(name, None)  # a ref parameter, or a name bound from `*refs` (analysis.discovery.varargs)
    if name in owner.params:
        return None  # a helper's or a loop body's parameter
    value = env.single_assignment(name)
    if isinstance(value, cst.Name):
        return resolve_ref_name(owner, value.value, kernel, depth + 1)
    base = _view_base(value)
    if base is None:
        return None
    inner = resolve_ref_name(owner, base.value, kernel, depth + 1)
    if inner is None:
        return None
    return RefName(inner.root, inner.view if inner.view is not None else value)


def _view_base(value) -> Optional[cst.Name]:
    """`x.at[...]` -> `x`."""
    if not isinstance(value, cst.Subscript):
        return None
    base = value.value
    if isinstance(base, cst.Attribute) and base.attr.value == "at" and isinstance(base.value, cst.Name):
        return base.value
    return None


def through_view_refusal(name: str, root: str) -> Refuse:
    return Refuse(
        f"`{name}` is a view of `{root}` that is sliced again by the loop index; pallas-fix lifts a window "
        f"written on `{root}` itself or in the view's own `.at[...]`"
    )


def alias_bindings(kernel, env_of, refs: set[str]) -> tuple[dict[str, str], set[int]]:
    """Plain aliases of `refs` bound in the kernel (`r = x_ref`), each with the ref it names, and
    the ids of the names in their bindings: a use check treats an alias like its ref and its
    binding as no use of it."""
    roots: dict[str, str] = {}
    mentions: set[int] = set()
    for node in walk(kernel):
        if not (isinstance(node, cst.Assign) and len(node.targets) == 1 and isinstance(node.value, cst.Name)):
            continue
        target = node.targets[0].target
        env = env_of(node)
        if not isinstance(target, cst.Name) or env is None:
            continue
        found = resolve_ref_name(env, target.value, kernel)
        if found is not None and found.view is None and found.root in refs:
            roots[target.value] = found.root
            mentions |= {id(node.value), id(target)}
    return roots, mentions
