"""Table entries R6 reads through a one-element slice: `t[pl.ds(i, 1)].reshape(())`, `t[pl.ds(i, 1)][0]`,
or `st = t[pl.ds(i, 1)]` whose every use is `st[0]`.

Each of these is the scalar `t[i]`: the slice is one entry long and the interpreters clamp its start
just as they clamp a scalar index, so `.reshape(())` or `[0]` of it reads the same value. R6 reads
the block index off such a spelling (`one_element_read`) and first rewrites it into the scalar read
(`scalar_read_edits`), so that the kernel it plans on reads the table one scalar at a time, as a
scalar-prefetch table (in SMEM) is read, and the loop over `i` can become a grid axis without
the table becoming a blocked operand.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import libcst as cst

from pallas_fix.analysis.context import walk
from pallas_fix.core.plans import Refuse
from pallas_fix.rewrite.text.edits import Edit
from pallas_fix.rewrite.text.syntax import code


@dataclass(frozen=True, eq=False)
class SpelledRead:
    """`scalar` reads entry `index` of `table` through the one-element slice `sliced`; `name` is the
    local bound once to `sliced` when `scalar` is `name[0]` (or `name.reshape(())`); `env` is the
    provenance environment where `scalar` is read."""

    scalar: cst.BaseExpression
    sliced: cst.Subscript
    table: str
    index: tuple[cst.BaseExpression, ...]  # one index expression per table dim, the slice's start in its place
    env: object
    name: Optional[str] = None

    def text(self) -> str:
        return f"{self.table}[{', '.join(code(e) for e in self.index)}]"


def _scalar_of(expr: cst.BaseExpression, env) -> Optional[cst.BaseExpression]:
    """X of `X.reshape(())`, `X.reshape([])` or `X[0]` / `X[-1]` (a one-element X's only value)."""
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value == "reshape":
        if len(expr.args) == 1 and isinstance(expr.args[0].value, (cst.Tuple, cst.List)) and not expr.args[0].value.elements:
            return expr.func.value
        return None
    if isinstance(expr, cst.Subscript) and len(expr.slice) == 1 and isinstance(expr.slice[0].slice, cst.Index):
        if env.static_int(expr.slice[0].slice.value) in (0, -1):
            return expr.value
    return None


def _sliced_table(sub: cst.BaseExpression, env) -> Optional[tuple[str, tuple]]:
    """(table, index) of `t[pl.ds(e, 1)]` (other dims scalar indices) on a ref parameter."""
    if not isinstance(sub, cst.Subscript) or not isinstance(sub.value, cst.Name) or not env.value(sub.value).is_ref:
        return None
    index, sliced = [], 0
    for el in sub.slice:
        if not isinstance(el.slice, cst.Index):
            return None
        parts = env.ds_parts(el.slice.value)
        if parts is None:
            index.append(el.slice.value)
            continue
        start, size = parts
        if size is None or env.static_int(size) != 1:
            return None
        index.append(start)
        sliced += 1
    return (sub.value.value, tuple(index)) if sliced == 1 else None


def one_element_read(env, expr: cst.BaseExpression) -> Optional[SpelledRead]:
    """The table entry `expr` reads through a one-element slice (see the module docstring), or None."""
    inner = _scalar_of(expr, env)
    if inner is None:
        return None
    found = _sliced_table(inner, env)
    if found is not None:
        return SpelledRead(expr, inner, found[0], found[1], env)
    if isinstance(inner, cst.Name):
        bound = env.single_assignment(inner.value)
        found = _sliced_table(bound, env) if bound is not None else None
        if found is not None:
            return SpelledRead(expr, bound, found[0], found[1], env, inner.value)
    return None


def _replace_with(text: str) -> Edit:
    new = cst.parse_expression(text)
    return lambda node: new.with_changes(lpar=getattr(node, "lpar", ()), rpar=getattr(node, "rpar", ()))


def scalar_read_edits(ctx, reads: list[SpelledRead]) -> dict[cst.CSTNode, Edit]:
    """Edits that spell every read in `reads` as the scalar `t[i]`. A local bound to the slice is
    bound to the scalar instead, which needs every use of it to be `name[0]` (or `.reshape(())`)."""
    edits: dict[cst.CSTNode, Edit] = {}
    for read in reads:
        if read.name is None:
            edits[read.scalar] = _replace_with(read.text())
            continue
        for use in _loads_of(ctx, read.env, read.name):
            parent = ctx.parent(use)
            spelled = one_element_read(read.env, parent) if parent is not None else None
            if spelled is None or spelled.name != read.name:
                raise Refuse(
                    f"`{read.name}` holds the one-element slice `{code(read.sliced)}` and is used as an array "
                    f"(`{ctx.code(parent)}`, line {ctx.span(use).line}); read the entry as `{read.text()}` instead"
                )
            edits[parent] = _replace_with(read.name)
        edits[read.sliced] = _replace_with(read.text())
    return edits


def _loads_of(ctx, env, name: str) -> list[cst.Name]:
    """Every mention of the local `name` in its function but its one binding (refused when a
    nested function binds the name again: its mentions may be another variable)."""
    owner = env.owner(name)
    scope = owner.scope if owner is not None else None
    if scope is None:
        raise Refuse(f"cannot find where `{name}` is defined")
    targets = {id(t) for node in walk(scope) if isinstance(node, (cst.Assign, cst.AnnAssign, cst.AugAssign))
               for t in walk(node) if isinstance(t, cst.Name) and t.value == name and _is_target(ctx, t)}
    if len(targets) != 1:
        raise Refuse(f"`{name}` is bound more than once; read the table entry directly")
    return [n for n in walk(scope) if isinstance(n, cst.Name) and n.value == name and id(n) not in targets
            and not _names_something_else(ctx, n)]


def _names_something_else(ctx, name: cst.Name) -> bool:
    """`x.name`, `f(name=...)`: the word, not the variable."""
    parent = ctx.parent(name)
    return (isinstance(parent, cst.Attribute) and parent.attr is name) or (
        isinstance(parent, cst.Arg) and parent.keyword is name)


def _is_target(ctx, name: cst.Name) -> bool:
    parent = ctx.parent(name)
    if isinstance(parent, cst.AssignTarget):
        return True
    if isinstance(parent, (cst.AnnAssign, cst.AugAssign)) and parent.target is name:
        return True
    return isinstance(parent, (cst.Tuple, cst.List, cst.Element)) and _is_target_chain(ctx, parent)


def _is_target_chain(ctx, node: cst.CSTNode) -> bool:
    while isinstance(node, (cst.Tuple, cst.List, cst.Element, cst.StarredElement)):
        node = ctx.parent(node)
    return isinstance(node, cst.AssignTarget)
