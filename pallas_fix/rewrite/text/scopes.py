"""Walking one function's own scope, the names a scope binds, and fresh names.

Python gives nested functions and lambdas scopes of their own (and comprehensions, for the names
they bind); a class body runs in place when its statement runs but binds names of its own. The
callers differ in which of these they must see, so each says so:

- `walk_scope(root, classes=True)` enters class bodies: their statements run when the
  enclosing statement runs (a ref write or a copy in them is an effect of that statement);
- `walk_scope(root, classes=False)` stops at classes too: for what belongs to the function
  itself (its returns, `global` declarations, local names).
"""

from __future__ import annotations

from typing import Callable, Iterator, Optional

import libcst as cst

from pallas_fix.analysis.context import walk
from pallas_fix.analysis.effects.syntax import param_names as declared_params

_FUNCTIONS = (cst.FunctionDef, cst.Lambda)
_FUNCTIONS_AND_CLASSES = (cst.FunctionDef, cst.Lambda, cst.ClassDef)


def walk_pruned(root: cst.CSTNode, stop: Callable[[cst.CSTNode], bool]) -> Iterator[cst.CSTNode]:
    """`root` and the nodes below it; a node for which `stop` holds is yielded but not entered
    (`root` too: a def statement's body is not part of the scope the def is in)."""
    stack = [root]
    while stack:
        cur = stack.pop()
        yield cur
        if stop(cur):
            continue
        stack.extend(cur.children)


def walk_scope(root: cst.CSTNode, *, classes: bool) -> Iterator[cst.CSTNode]:
    """`root` and the nodes below it that belong to the scope `root` is in; nested scopes (a
    `root` def or class included) are yielded, not entered."""
    stop = _FUNCTIONS if classes else _FUNCTIONS_AND_CLASSES
    return walk_pruned(root, lambda n: isinstance(n, stop))


def _target(node: cst.CSTNode) -> Optional[cst.CSTNode]:
    """What a binding node writes: assignment, `for`, comprehension, walrus and `as` targets."""
    if isinstance(node, cst.AssignTarget):
        return node.target
    if isinstance(node, (cst.AugAssign, cst.AnnAssign, cst.For, cst.CompFor, cst.NamedExpr)):
        return node.target
    if isinstance(node, cst.AsName):
        return node.name
    return None


def bindings(root: cst.CSTNode, *, nested: bool) -> Iterator[str]:
    """Each name a binding below `root` writes (once per binding), def and class names included.

    nested=False: `root`'s own scope only; comprehension variables are the comprehension's own.
    nested=True: every binding anywhere below `root`, nested functions included (a conservative
    "might this name mean something else here" test)."""
    nodes = walk(root) if nested else walk_scope(root, classes=False)
    for node in nodes:
        if isinstance(node, (cst.FunctionDef, cst.ClassDef)) and node is not root:
            yield node.name.value
            continue
        if not nested and isinstance(node, cst.CompFor):
            continue
        target = _target(node)
        if target is not None:
            yield from target_names(target)


def param_names(fn: cst.FunctionDef | cst.Lambda) -> set[str]:
    """Every parameter a function declares: positional-only, plain, `*args`, keyword-only, `**kw`."""
    return set(declared_params(fn))


def target_names(target: cst.CSTNode) -> set[str]:
    """Names a target binds: `a`, `a, (b, *c)`; not `x_ref[...]` or `obj.attr`."""
    if isinstance(target, cst.Name):
        return {target.value}
    if isinstance(target, (cst.Tuple, cst.List)):
        return set().union(*(target_names(e.value) for e in target.elements)) if target.elements else set()
    if isinstance(target, cst.StarredElement):
        return target_names(target.value)
    return set()


def underscored(base: str, taken: set[str]) -> str:
    """`base`, else `base_`, `base__`, ... the first not in `taken` (one name; `taken` is left
    as it is): a name the rewrite adds beside the user's."""
    name = base
    while name in taken:
        name += "_"
    return name


def fresh_namer(taken: set[str]) -> Callable[[str], str]:
    """`fresh(base)`: `base`, else `base_1`, `base_2`, ... whichever is not in `taken` (it is then
    taken too, so names handed out stay distinct)."""

    def fresh(base: str) -> str:
        name, k = base, 1
        while name in taken:
            name = f"{base}_{k}"
            k += 1
        taken.add(name)
        return name

    return fresh
