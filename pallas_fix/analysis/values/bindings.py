"""Which names one scope binds, and to what: the syntax half of the provenance analysis.

`scope_bindings` lists, per name, every way the scope's own body binds it (assignment,
augmented assignment, `for` target, `with ... as`, walrus, nested `def`); nested functions and
lambdas are their own scopes and are not entered.
"""

from __future__ import annotations

import weakref
from collections import Counter
from typing import Optional

import libcst as cst

from pallas_fix.analysis.binders import bound_names as target_names, unassigned_name
from pallas_fix.analysis.context import ModuleContext, Scope, walk

# name -> [(how, node)]; how is "assign" | "augassign" | "for" | "with" | "def" | "dynamic" (a
# name rebound where no statement of the scope says: the `global` / `nonlocal` or `exec(...)`).
Bindings = dict[str, list[tuple[str, object]]]


class Unpack:
    """Marks `a, b = value`: each target takes `value` as a whole (a pytree we do not split)."""

    def __init__(self, value: cst.BaseExpression, index: int) -> None:
        self.value = value
        self.index = index
        self._part: Optional[cst.BaseExpression] = None

    def divmod_part(self) -> Optional[cst.BaseExpression]:
        """`a // b` (index 0) or `a % b` (index 1) for `q, r = divmod(a, b)`, what the builtin
        gives ints and traced ints alike; None for any other value. Built once per binding, so
        the expression keeps one identity for the caches keyed by it."""
        call = self.value
        if not (isinstance(call, cst.Call) and isinstance(call.func, cst.Name) and call.func.value == "divmod"
                and len(call.args) == 2 and not any(a.keyword or a.star for a in call.args) and self.index in (0, 1)):
            return None
        if self._part is None:
            op = cst.FloorDivide() if self.index == 0 else cst.Modulo()
            self._part = cst.BinaryOperation(left=call.args[0].value, operator=op, right=call.args[1].value,
                                             lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
        return self._part


def scope_bindings(ctx: ModuleContext, scope: Scope) -> Bindings:
    """name -> [(how, node)] for names bound in `scope`'s own body."""
    out: Bindings = {}
    if isinstance(scope, cst.Lambda):
        return out
    stack = list(reversed(ctx.body_statements(scope)))
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Assign):
            for t in node.targets:
                _bind_target(out, t.target, ("assign", node.value))
        elif isinstance(node, cst.AnnAssign) and node.value is not None:
            _bind_target(out, node.target, ("assign", node.value))
        elif isinstance(node, cst.AugAssign):
            _bind_target(out, node.target, ("augassign", node))
        elif isinstance(node, cst.For):
            _bind_target(out, node.target, ("for", node.iter))
        elif isinstance(node, cst.WithItem) and node.asname is not None:
            _bind_target(out, node.asname.name, ("with", node.item))
        elif isinstance(node, cst.NamedExpr):
            _bind_target(out, node.target, ("assign", node.value))
        elif isinstance(node, cst.FunctionDef):
            out.setdefault(node.name.value, []).append(("def", node))
            continue
        elif isinstance(node, cst.Lambda):
            continue
        stack.extend(reversed(ctx.kids(node)))  # the indexed children: `node.children` rebuilds them
    # what rebinds the scope's names with no statement of its own: `global` / `nonlocal` in a
    # function it may call (`def grow(): nonlocal bn; bn = 64`), `exec`
    rebinders = _module_rebinders(ctx, out) if isinstance(scope, cst.Module) else [
        (a.name.value, n) for n in walk(scope) if isinstance(n, cst.Nonlocal) for a in n.names]
    for name, node in rebinders:
        out.setdefault(name, []).append(("dynamic", node))
    return out


def _module_rebinders(ctx: ModuleContext, bound) -> list[tuple[str, cst.CSTNode]]:
    """(name, node) for each module name a function rebinds through `global name`, and for every
    module name when the module calls `exec(...)`, `eval(...)` (`(BN := 64)`), `globals()` or `vars()`."""
    found: list[tuple[str, cst.CSTNode]] = []
    writer = None
    for n in walk(ctx.module):
        if isinstance(n, cst.Global):
            found.extend((a.name.value, n) for a in n.names)
        elif writer is None and isinstance(n, cst.Call) and isinstance(n.func, cst.Name) and n.func.value in ("exec", "eval", "globals", "vars"):
            writer = n
    return found + ([(name, writer) for name in bound] if writer is not None else [])


def single_binding(binds: list[tuple[str, object]]) -> Optional[object]:
    """The value of a name bound exactly once by a plain assignment (may be an `Unpack`)."""
    if len(binds) == 1 and binds[0][0] == "assign":
        return binds[0][1]
    return None


def _bind_target(out: Bindings, target: cst.BaseExpression, binding: tuple[str, object]) -> None:
    how, node = binding
    if isinstance(target, cst.Name):
        out.setdefault(target.value, []).append(binding)
    elif isinstance(target, (cst.Tuple, cst.List)):
        star = next((i for i, el in enumerate(target.elements) if isinstance(el, cst.StarredElement)), None)
        for i, el in enumerate(target.elements):
            inner = el.value
            if how == "assign" and star is not None and i >= star:
                # `*_, bn = sizes`: `bn` is the last element, not `sizes[1]`; from the star on,
                # a name is some element of the value (a `for` target), its position unknown
                _bind_target(out, inner, ("for", node))
            elif how == "assign" and isinstance(node, (cst.Tuple, cst.List)) and i < len(node.elements):
                _bind_target(out, inner, ("assign", node.elements[i].value))
            elif how == "assign":
                _bind_target(out, inner, ("assign", Unpack(node, i)))  # type: ignore[arg-type]
            else:
                _bind_target(out, inner, binding)
    elif isinstance(target, cst.StarredElement):
        _bind_target(out, target.value, binding)


def read_before_targets(ctx: ModuleContext, stmt: cst.CSTNode, read: cst.CSTNode, binds: list) -> bool:
    """`read` runs before `stmt` binds its name again: `stmt` is one assignment whose targets
    alone bind it among `binds` (`y, c = pl.pallas_call(...)(x, c)`), and `read` is in its value,
    not in a lambda there (its body runs when called, perhaps after the binding): Python evaluates
    the value before it binds the targets."""
    body = getattr(stmt, "body", None)
    if not isinstance(stmt, cst.SimpleStatementLine) or len(body) != 1 or not isinstance(body[0], (cst.Assign, cst.AnnAssign)):
        return False
    value = body[0].value
    path = [read, *ctx.ancestors(read)]
    if value is None or not any(a is value for a in path):
        return False
    if any(isinstance(a, (cst.Lambda, cst.FunctionDef)) for a in path[:next(n for n, a in enumerate(path) if a is value)]):
        return False
    # A walrus in the value binds the name while it is evaluated.
    return not any(any(a is value for a in ctx.ancestors(n.value if isinstance(n, Unpack) else n)) for _how, n in binds)


def indexed_only(ctx: ModuleContext, scope: Scope, name: str, into: frozenset = frozenset()) -> bool:
    """Nothing in `scope` can change the sequence `name` holds in place: every read of it is an
    item (`grid_[0]`), a starred entry, an `is None` test or a `grid=` keyword, so no method,
    item store or call it is passed to (which might append to a list) touches it. A name it is
    bound from (`grid_ = grid`) holds the same list, so it is held to the same reads (`grid[0] = 8`
    changes `grid_[0]`); `into`: the names whose binding from `name` that is."""
    for value in ctx.assignments(name, scope):
        if isinstance(value, cst.Name) and value.value != name and value.value not in into:
            if not indexed_only(ctx, scope, value.value, into | {name}):
                return False
    for node in walk(scope):
        if not (isinstance(node, cst.Name) and node.value == name):
            continue
        parent = ctx.parent(node)
        if isinstance(parent, (cst.AssignTarget, cst.Param)) or (isinstance(parent, cst.Attribute) and parent.attr is node):
            continue  # a binding, or another object's attribute
        if isinstance(parent, cst.Subscript) and parent.value is node:
            if isinstance(ctx.parent(parent), (cst.AssignTarget, cst.Del)) or isinstance(ctx.parent(ctx.parent(parent)), cst.Del):
                return False
            continue
        if isinstance(parent, (cst.StarredElement, cst.Comparison)) or (isinstance(parent, cst.Arg) and parent.keyword is not None
                                                                       and parent.keyword.value == "grid"):
            continue
        if isinstance(parent, cst.Assign) and parent.value is node:
            if all(isinstance(t.target, cst.Name) and t.target.value in into for t in parent.targets):
                continue  # the binding of the name this one was followed from
            return False  # an alias could be changed in its place
        if isinstance(parent, cst.ComparisonTarget):
            continue
        return False
    return True


def binding_count(ctx: ModuleContext, scope: Scope, name: str) -> int:
    """How many nodes of `scope`'s own code bind `name`, every form Python has: what a caller that
    counts only some forms (plain assignments, `scope_bindings`) compares against to know it saw
    them all. `from m import *` counts once for every name."""
    per_scope = _COUNTS.setdefault(ctx, {})
    if id(scope) not in per_scope:
        counts: Counter = Counter()
        for node in walk(scope):
            if ctx.scope_of(node) is scope:
                counts.update(bound_names(node))
        per_scope[id(scope)] = (scope, counts)  # the scope kept: its id stays unique
    counts = per_scope[id(scope)][1]
    return counts[name] + counts["*"]


_COUNTS: "weakref.WeakKeyDictionary[ModuleContext, dict]" = weakref.WeakKeyDictionary()


def declared_elsewhere(ctx: ModuleContext) -> frozenset[str]:
    """Names some `global` or `nonlocal` statement of the module names: a function that runs
    between two reads may rebind them. Walked once per module."""
    found = _DECLARED.get(ctx)
    if found is None:
        found = _DECLARED[ctx] = frozenset(a.name.value for n in walk(ctx.module) if isinstance(n, (cst.Global, cst.Nonlocal))
                                           for a in n.names)
    return found


_DECLARED: "weakref.WeakKeyDictionary[ModuleContext, frozenset]" = weakref.WeakKeyDictionary()


def bound_names(node: cst.CSTNode) -> set[str]:
    """The names `node` binds in its scope (a plain assignment counts once, by its target; an
    import, a `match` capture and `except ... as` too, which `scope_bindings` does not list;
    "*" for `from m import *`)."""
    targets: list[cst.BaseExpression] = []
    if isinstance(node, (cst.AssignTarget, cst.AnnAssign, cst.AugAssign, cst.For, cst.CompFor, cst.Del, cst.NamedExpr)):
        targets = [node.target]
    elif isinstance(node, cst.AsName):
        targets = [node.name]
    elif isinstance(node, cst.ImportAlias) and node.asname is None:
        return {unassigned_name(node)}  # `import a.b` binds `a`
    elif isinstance(node, (cst.MatchAs, cst.MatchStar)):
        return {node.name.value} if node.name is not None else set()
    elif isinstance(node, cst.MatchMapping):
        return {node.rest.value} if node.rest is not None else set()
    elif isinstance(node, (cst.Global, cst.Nonlocal)):
        return {n.name.value for n in node.names}
    elif isinstance(node, cst.ImportStar):
        return {"*"}
    elif isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.TypeAlias)):
        return {node.name.value}
    return {n for t in targets for n in target_names(t)}


def attribute_written(module: cst.Module) -> frozenset[str]:
    """What the module may change attributes through: names some attribute of which it assigns or
    deletes (`bs.bm = 8`, `del bs.bm`) or passes to `setattr` / `delattr` (also `object.__setattr__`),
    and, as ".bm", every field name it writes through ANY name or defines as a function (a property,
    a method): `cfg2 = bs; cfg2.bm = 8`, a helper's `cfg.bm = ...` or a method's `self.bm += 1` change
    `bs.bm` too. ".*" where a `setattr` names its field by a value, or a class overrides attribute access."""
    heads = set()
    for node in walk(module):
        targets: list = []
        if isinstance(node, cst.Assign):
            targets = [t.target for t in node.targets]
        elif isinstance(node, (cst.AugAssign, cst.AnnAssign, cst.Del)):
            targets = [node.target]
        elif isinstance(node, cst.Call) and node.args and _setattr_like(node.func):
            heads |= {n.value for n in walk(node.args[0].value) if isinstance(n, cst.Name)}
            field_name = node.args[1].value if len(node.args) > 1 else None
            literal = field_name.evaluated_value if isinstance(field_name, cst.SimpleString) else None
            heads.add("." + literal if isinstance(literal, str) else ".*")
        elif isinstance(node, cst.FunctionDef):
            name = node.name.value
            heads.add(".*" if name in ("__getattr__", "__getattribute__", "__setattr__") else "." + name)
        written = [n for t in targets for n in walk(t) if isinstance(n, cst.Attribute)]
        heads |= {n.value.value for n in written if isinstance(n.value, cst.Name)}
        heads |= {"." + n.attr.value for n in written}
    return frozenset(heads)


def _setattr_like(func: cst.BaseExpression) -> bool:
    name = func.value if isinstance(func, cst.Name) else func.attr.value if isinstance(func, cst.Attribute) else None
    return name in ("setattr", "delattr", "__setattr__", "__delattr__")


def field_may_change(written: frozenset[str], head: str, field_name: str) -> bool:
    """Whether `head.field_name` may read two values (see attribute_written)."""
    return head in written or "." + field_name in written or ".*" in written
