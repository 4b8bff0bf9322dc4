"""The structure of a reduction's carry (R2): a pytree of tuples, lists, dicts and NamedTuples
whose leaves are arrays, as the loop's initial value writes it.

Each leaf gets its own scratch buffer (or an index-derived value, carry_counters), so the
rewrite needs the structure three ways: to flatten the initial value into leaves, to rebuild
the carry from the leaves wherever a name is bound to the whole of it (`carry = {"acc":
acc_ref[...], "n": n_ref[...]}`), and to find each leaf in a value of the same structure
(`res["acc"]`, `res.acc`, `res[1][0]`). A structure pallas-fix cannot read exactly (a starred
element, a dict with computed keys, a NamedTuple with defaults it would have to fill in) is
refused: rebuilding it differently would change what the body sees."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Callable, Optional

import libcst as cst

from pallas_fix.core.plans import Refuse
from pallas_fix.rewrite.text.syntax import code

Key = int | str  # a position (tuple, list), a dict key's source text, or a NamedTuple field


@dataclass(frozen=True)
class Tree:
    kind: str  # "leaf" | "tuple" | "list" | "dict" | "namedtuple"
    children: tuple[tuple[Key, "Tree"], ...] = ()
    leaf: int = -1  # the leaf's number, for kind "leaf"
    ctor: str = ""  # the NamedTuple class as the kernel spells it

    @property
    def is_leaf(self) -> bool:
        return self.kind == "leaf"

    def is_flat(self) -> bool:
        """A tuple or list of leaves (the shape `m, l = carry` unpacks)."""
        return self.kind in ("tuple", "list") and all(c.is_leaf for _, c in self.children)


@dataclass(frozen=True)
class Flat:
    tree: Tree
    inits: list[cst.BaseExpression]  # each leaf's initial value, by leaf number
    hints: list[Optional[str]]  # a name each leaf could be called by (a dict key, a field)


def flatten(ctx, init: cst.BaseExpression, at: cst.CSTNode, reaching: Callable[[str], Optional[cst.BaseExpression]]) -> Flat:
    """`reaching(name)`: the value a name holds at the loop when the kernel rebinds it
    (`acc = jnp.zeros(...)`, then `acc = fori_loop(..., acc)`), which ctx.resolve_value leaves."""
    inits: list[cst.BaseExpression] = []
    hints: list[Optional[str]] = []

    def visit(expr: cst.BaseExpression, hint: Optional[str], depth: int) -> Tree:
        if depth > 8:
            raise Refuse("the carry is nested too deeply to lift")
        if isinstance(expr, cst.Name):
            resolved = ctx.resolve_value(expr, at)
            expr = reaching(expr.value) or expr if isinstance(resolved, cst.Name) else resolved
        if isinstance(expr, (cst.Tuple, cst.List)):
            if any(not isinstance(e, cst.Element) for e in expr.elements):
                raise Refuse("the initial carry has a starred element; write its leaves out")
            kind = "tuple" if isinstance(expr, cst.Tuple) else "list"
            return Tree(kind, tuple((i, visit(e.value, hint, depth + 1)) for i, e in enumerate(expr.elements)))
        if isinstance(expr, cst.Dict) or _is_dict_call(ctx, expr):
            return Tree("dict", tuple((key, visit(v, name, depth + 1)) for key, name, v in _dict_items(expr)))
        fields = _namedtuple_fields(ctx, expr)
        if fields is not None:
            assert isinstance(expr, cst.Call)
            args = _bind_fields(expr, fields)
            return Tree("namedtuple", tuple((f, visit(args[f], f, depth + 1)) for f in fields), ctor=code(expr.func))
        inits.append(expr)
        hints.append(hint)
        return Tree("leaf", leaf=len(inits) - 1)

    tree = visit(init, None, 0)
    return Flat(tree, inits, hints)


def _is_dict_call(ctx, expr: cst.BaseExpression) -> bool:
    """`dict(m=..., l=...)` with the builtin dict and keyword arguments only."""
    return (
        isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name) and expr.func.value == "dict"
        and expr.func.value not in ctx.imports.bindings and not ctx.assignments("dict", ctx.module)
        and all(a.keyword is not None and not a.star for a in expr.args)
    )


def _dict_items(expr: cst.Dict | cst.Call) -> list[tuple[str, Optional[str], cst.BaseExpression]]:
    """(key source, key as a name when it is an identifier, value) of a dict literal with string
    keys, or of `dict(key=value)`: jax flattens a dict by its keys, which must be known to rebuild it."""
    if isinstance(expr, cst.Call):
        return [(f'"{a.keyword.value}"', a.keyword.value, a.value) for a in expr.args]  # type: ignore[union-attr]
    out = []
    for e in expr.elements:
        if not isinstance(e, cst.DictElement) or not isinstance(e.key, cst.SimpleString):
            raise Refuse("the dict carry has a key that is not a string literal; write its keys as strings")
        key = e.key.evaluated_value
        out.append((code(e.key), key if isinstance(key, str) and key.isidentifier() else None, e.value))
    if len({k for k, _, _ in out}) != len(out):
        raise Refuse("the dict carry repeats a key")
    return out


def _namedtuple_fields(ctx, expr: cst.BaseExpression) -> Optional[list[str]]:
    """The fields of `Name(...)` when Name is a module-level `class Name(NamedTuple)` with
    annotated fields and no defaults; None when `expr` is no NamedTuple construction."""
    if not (isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name)):
        return None
    cls = next((s for s in ctx.module.body if isinstance(s, cst.ClassDef) and s.name.value == expr.func.value), None)
    if cls is None or not any(ctx.imports.qualify(b.value) in ("typing.NamedTuple",) for b in cls.bases):
        return None
    fields = []
    for line in cls.body.body if isinstance(cls.body, cst.IndentedBlock) else []:
        for small in getattr(line, "body", ()):
            if isinstance(small, cst.AnnAssign) and isinstance(small.target, cst.Name):
                if small.value is not None:
                    raise Refuse(f"the NamedTuple carry `{cls.name.value}` has field defaults; pass every field")
                fields.append(small.target.value)
    return fields


def _bind_fields(call: cst.Call, fields: list[str]) -> dict[str, cst.BaseExpression]:
    if any(a.star for a in call.args):
        raise Refuse("the NamedTuple carry is built with *args or **kwargs; pass its fields")
    pos = [a.value for a in call.args if a.keyword is None]
    kw = {a.keyword.value: a.value for a in call.args if a.keyword is not None}
    bound = dict(zip(fields, pos)) | kw
    if len(pos) > len(fields) or set(bound) != set(fields) or len(bound) != len(pos) + len(kw):
        raise Refuse("the NamedTuple carry is not built with exactly its fields")
    return bound


def leaves_of(tree: Tree) -> list[int]:
    """The leaf numbers under `tree`, in order."""
    return [tree.leaf] if tree.is_leaf else [n for _, c in tree.children for n in leaves_of(c)]


def _key(source: str) -> object:
    """A dict key's value: `"m"` and `'m'` are the same key."""
    return ast.literal_eval(source)


def render(tree: Tree, leaf_text: Callable[[int], str]) -> str:
    """The carry rebuilt as source, each leaf as `leaf_text(n)`."""
    if tree.is_leaf:
        return leaf_text(tree.leaf)
    parts = [render(c, leaf_text) for _, c in tree.children]
    if tree.kind == "tuple":
        return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"
    if tree.kind == "list":
        return "[" + ", ".join(parts) + "]"
    if tree.kind == "dict":
        return "{" + ", ".join(f"{k}: {p}" for (k, _), p in zip(tree.children, parts)) + "}"
    return f"{tree.ctor}(" + ", ".join(f"{k}={p}" for (k, _), p in zip(tree.children, parts)) + ")"


def leaf_paths(tree: Tree, value: str) -> dict[int, str]:
    """Each leaf of a value of this structure, as an expression on `value` (`res[0]`, `res["acc"]`)."""
    if tree.is_leaf:
        return {tree.leaf: value}
    out: dict[int, str] = {}
    for key, child in tree.children:
        out |= leaf_paths(child, f"{value}.{key}" if tree.kind == "namedtuple" else f"{value}[{key}]")
    return out


def literal_leaves(tree: Tree, expr: cst.BaseExpression) -> Optional[dict[int, cst.BaseExpression]]:
    """Each leaf's expression in a literal of this structure (`return acc, n + 1`,
    `return {"acc": a, "n": n}`); None when `expr` does not spell the structure out."""
    if tree.is_leaf:
        return {tree.leaf: expr}
    items: Optional[list[tuple[Key, cst.BaseExpression]]] = None
    if tree.kind in ("tuple", "list") and isinstance(expr, (cst.Tuple, cst.List)):
        if all(isinstance(e, cst.Element) for e in expr.elements):
            items = [(i, e.value) for i, e in enumerate(expr.elements)]
    elif tree.kind == "dict" and isinstance(expr, (cst.Dict, cst.Call)):
        try:
            given = _dict_items(expr) if isinstance(expr, cst.Dict) or all(a.keyword is not None and not a.star for a in expr.args) else None
        except Refuse:
            given = None
        keys = {_key(k): k for k, _ in tree.children}
        if given is not None and (isinstance(expr, cst.Dict) or code(expr.func) == "dict"):
            items = [(keys.get(_key(k), k), v) for k, _, v in given]
    elif tree.kind == "namedtuple" and isinstance(expr, cst.Call) and code(expr.func) == tree.ctor:
        try:
            items = list(_bind_fields(expr, [k for k, _ in tree.children]).items())  # type: ignore[misc]
        except Refuse:
            return None
    if items is None or sorted(map(str, dict(items))) != sorted(str(k) for k, _ in tree.children) or len(items) != len(tree.children):
        return None
    by_key = dict(items)
    out: dict[int, cst.BaseExpression] = {}
    for key, child in tree.children:
        found = literal_leaves(child, by_key[key])
        if found is None:
            return None
        out |= found
    return out


def mirror(tree: Tree, target: Optional[cst.BaseExpression]) -> Optional[dict[int, str]]:
    """The name an unpacking target gives each leaf when it mirrors the structure down to the
    leaves (`m, l`, `(peak, norm), acc`; `_` included); None for any other target."""
    if target is None:
        return None
    if tree.is_leaf:
        return {tree.leaf: target.value} if isinstance(target, cst.Name) else None
    if tree.kind not in ("tuple", "list") or not isinstance(target, (cst.Tuple, cst.List)):
        return None
    if len(target.elements) != len(tree.children) or not all(isinstance(e, cst.Element) for e in target.elements):
        return None
    out: dict[int, str] = {}
    for (_, child), element in zip(tree.children, target.elements):
        found = mirror(child, element.value)
        if found is None:
            return None
        out |= found
    return out
