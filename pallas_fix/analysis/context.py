"""One parsed module plus the cheap indexes every analysis step needs (parents, defs, imports)."""

from __future__ import annotations

import weakref
from typing import Iterator, Optional, Union

import libcst as cst

from pallas_fix.core.model import Span
from pallas_fix.core.traced_facts import TracedFacts
from pallas_fix.core.names import ImportTable
from pallas_fix.analysis.tree_index import CONDITIONAL_FIELDS, LazyPositions, Reuse, child_nodes, index_tree, positions
from pallas_fix.analysis.tree_index import is_statement as _is_statement
from pallas_fix.analysis.binders import (UNASSIGNED_BINDERS as _UNASSIGNED_BINDERS, bound_names as _bound_names, paired,
                                        unassigned_name as _unassigned_name)

__all__ = ["CONDITIONAL_FIELDS", "ModuleContext", "Scope", "child_nodes", "own_nodes", "positions", "walk"]

Scope = Union[cst.Module, cst.FunctionDef, cst.Lambda]
_FunctionDef, _Lambda = cst.FunctionDef, cst.Lambda


class ModuleContext:
    def __init__(
        self, source: str, path: str = "<string>", module: Optional[cst.Module] = None, *, reduced: bool = False,
        reuse: Optional["ModuleContext"] = None,
    ) -> None:
        self.source = source
        self.path = path
        # `module`: the caller's own parse of `source` (the language server parses first to learn
        # whether anything but the parse needs redoing), or with `reduced`, of the statements of
        # `source` an analysis reaches (`analysis.discovery.reachable`: same lines, the rest emptied), which
        # can be reported on but not rewritten.
        self.module = module if module is not None else cst.parse_module(source)
        self.reduced = reduced
        # What tracing the examples showed (core.traced_facts), from the analysis's config.
        self.traced_facts: Optional[TracedFacts] = None
        # `node.children` re-runs LibCST's visitor machinery (rebuilding the node) on every call;
        # walks over a 2,000-line file asked for it hundreds of thousands of times. One pass
        # records, by position in the pre-order, each node's subtree (a walk is a slice of the
        # order, children are its direct sub-slices), its parent and its innermost enclosing
        # function or lambda. Lookups go by id(): LibCST nodes hash in Python, ints in C, and
        # the context keeps every node alive.
        # `reuse`: the context of an earlier tree sharing top-level statements with this one (the
        # language server's spliced trees): their part of the index is copied, not walked.
        self._order, self._parent, self._scope, self._end, self._by_type = index_tree(
            self.module, Reuse(reuse._order, reuse._parent, reuse._scope, reuse._end) if reuse is not None else None)
        self._parents: Optional[dict[cst.CSTNode, cst.CSTNode]] = None
        self._pos: dict[int, int] = {id(node): i for i, node in enumerate(self._order)}
        # The same import statements, in the same order, as ImportTable's own visitor pass finds.
        self.imports = ImportTable(_EMPTY_MODULE)
        for node in self.nodes_of(cst.Import, cst.ImportFrom):
            if type(node) is cst.Import:
                self.imports.add_import(node)  # type: ignore[arg-type]
            else:
                self.imports.add_import_from(node)  # type: ignore[arg-type]
        self._positions: Optional[LazyPositions] = None
        self._scope_index: dict[int, _ScopeIndex] = {}
        self._codes: dict[int, tuple[cst.CSTNode, str]] = {}
        self.arm_pin = None  # analysis.discovery.variants.ArmPin: a variant's arm's values, while it is planned
        _CONTEXTS.add(self)

    # -- structure ------------------------------------------------------------------------------
    @property
    def parents(self) -> dict[cst.CSTNode, cst.CSTNode]:
        """node -> parent for every node but the module (built on first use)."""
        if self._parents is None:
            order, parent = self._order, self._parent
            self._parents = {order[i]: order[p] for i, p in enumerate(parent) if p >= 0}
        return self._parents

    def kids(self, node: cst.CSTNode) -> list[cst.CSTNode]:
        """`node.children`, from the index when the node is in this tree."""
        i = self._pos.get(id(node))
        if i is None:
            return child_nodes(node)
        order, end = self._order, self._end
        out, j, stop = [], i + 1, end[i]
        while j < stop:
            out.append(order[j])
            j = end[j]
        return out

    def nodes_of(self, *types: type) -> list[cst.CSTNode]:
        """Every node of exactly these classes, in walk (pre-)order."""
        by_type, order = self._by_type, self._order
        if len(types) == 1:
            return [order[i] for i in by_type.get(types[0], ())]
        return [order[i] for i in sorted(i for t in types for i in by_type.get(t, ()))]

    def parent(self, node: cst.CSTNode) -> Optional[cst.CSTNode]:
        i = self._pos.get(id(node))
        if i is None or self._parent[i] < 0:
            return None
        return self._order[self._parent[i]]

    def ancestors(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        i = self._pos.get(id(node))
        if i is None:
            return
        order, parent = self._order, self._parent
        i = parent[i]
        while i >= 0:
            yield order[i]
            i = parent[i]

    def scope_of(self, node: cst.CSTNode) -> Scope:
        """The innermost function (or lambda, or the module) whose body holds `node`."""
        i = self._pos.get(id(node))
        if i is None or self._scope[i] < 0:
            return self.module
        return self._order[self._scope[i]]  # type: ignore[return-value]

    def enclosing_function(self, node: cst.CSTNode) -> Optional[cst.FunctionDef]:
        i = self._pos.get(id(node))
        if i is None:
            return None
        order, scope = self._order, self._scope
        i = scope[i]
        while i >= 0 and type(order[i]) is not _FunctionDef:
            i = scope[i]
        return order[i] if i >= 0 else None  # type: ignore[return-value]

    def statement_of(self, node: cst.CSTNode) -> Optional[cst.BaseStatement]:
        """The statement (simple line or compound) that holds `node`."""
        if _is_statement(type(node)):
            return node  # type: ignore[return-value]
        for anc in self.ancestors(node):
            if _is_statement(type(anc)):
                return anc  # type: ignore[return-value]
        return None

    def scope_chain(self, node: cst.CSTNode) -> list[Scope]:
        chain: list[Scope] = []
        i = self._pos.get(id(node))
        if i is not None:
            order, scope = self._order, self._scope
            i = scope[i]
            while i >= 0:
                chain.append(order[i])  # type: ignore[arg-type]
                i = scope[i]
        chain.append(self.module)
        return chain

    def body_statements(self, scope: Scope) -> list[cst.CSTNode]:
        if isinstance(scope, cst.Module):
            return list(scope.body)
        if isinstance(scope, cst.Lambda):
            return []
        body = scope.body
        return list(body.body) if isinstance(body, cst.IndentedBlock) else [body]

    def _index(self, scope: Scope) -> "_ScopeIndex":
        index = self._scope_index.get(id(scope))
        if index is None:
            index = self._scope_index[id(scope)] = _ScopeIndex(self, self.body_statements(scope))
            index.scope = scope  # keeps the id unique while the entry lives
            index.unassigned |= self._rebound_inside(scope)
        return index

    def _rebound_inside(self, scope: Scope) -> set[str]:
        """Names a function inside `scope` may rebind when it runs: `nonlocal g` (`def grow():
        nonlocal g; g = ...`, called between `g = ...` and a read), or for the module `global g`
        anywhere. A read after such a call sees that value, not the assignment's."""
        kind = cst.Global if isinstance(scope, cst.Module) else cst.Nonlocal
        found = [n for n in self.nodes_of(kind) if kind is cst.Global or any(a is scope for a in self.ancestors(n))]
        return {a.name.value for n in found for a in n.names}  # type: ignore[attr-defined]

    def local_defs(self, scope: Scope) -> dict[str, cst.FunctionDef]:
        """Function definitions anywhere in `scope`'s own body (not inside nested functions)."""
        return dict(self._index(scope).defs)

    def resolve_def(self, name: str, at: cst.CSTNode) -> Optional[cst.FunctionDef]:
        """The `def name` visible from `at`, innermost scope first."""
        for scope in self.scope_chain(at):
            found = self._index(scope).defs.get(name)
            if found is not None:
                return found
        return None

    def assignments(self, name: str, scope: Scope) -> list[cst.BaseExpression]:
        """Values assigned to a plain `name = value` in `scope` (not nested functions)."""
        return list(self._index(scope).values.get(name, ()))

    def resolve_value(self, expr: cst.BaseExpression, at: cst.CSTNode) -> cst.BaseExpression:
        """Follow `name` to its single assignment in the nearest scope that assigns it.

        A name read inside its own assigned value (`kernel = partial(kernel, bs=8)`) means the
        binding before that assignment, so it is left as the name: the caller resolves it as the
        def (or parameter) it was."""
        seen = 0
        while isinstance(expr, cst.Name) and seen < 8:
            seen += 1
            for scope in self.scope_chain(at):
                if expr.value in self._index(scope).unassigned:
                    return expr  # `from m import kernel`, `case kernel:`: a value no assignment spells
                values = self._index(scope).values.get(expr.value)
                if not values and isinstance(scope, (cst.FunctionDef, cst.Lambda)) and expr.value in _parameters(scope.params):
                    return expr  # a parameter never assigned: the caller's argument, not an outer name
                if values:
                    values = self.arm_pin.pick(self, values, at) if len(values) > 1 and self.arm_pin else values
                    if len(values) != 1 or self._within(at, values[0]) or self._argument_may_reach(scope, expr.value, values[0], at):
                        return expr
                    at = values[0]
                    expr = values[0]
                    break
            else:
                return expr
        return expr

    def _argument_may_reach(self, scope: Scope, name: str, value: cst.CSTNode, at: cst.CSTNode) -> bool:
        """`name` is a parameter of `scope` whose one assignment may not have run when `at` reads
        it (the assignment under an `if`, in a loop, or after `at`): the read may see the caller's
        argument (`def run(x, kernel=_plain, fast=False): if fast: kernel = _fast`), so its value
        is not that assignment's."""
        if not isinstance(scope, (cst.FunctionDef, cst.Lambda)) or name not in _parameters(scope.params):
            return False
        stmt = self.statement_of(value)
        if stmt is None or not any(st is stmt for st in self.body_statements(scope)):
            return True  # nested in an `if`, a loop, a `with` or a `try`
        i, j = self._pos.get(id(at)), self._pos.get(id(stmt))
        return i is None or j is None or i < self._end[j]

    def _within(self, node: cst.CSTNode, ancestor: cst.CSTNode) -> bool:
        if node is ancestor:
            return True
        i, j = self._pos.get(id(node)), self._pos.get(id(ancestor))
        return i is not None and j is not None and j < i < self._end[j]

    # -- positions ------------------------------------------------------------------------------
    def span(self, node: cst.CSTNode) -> Span:
        self._positions = self._positions or LazyPositions()
        (line, column), (end_line, end_column) = self._positions.get(self, node)
        return Span(line, column, end_line, end_column)

    def code(self, node: cst.CSTNode) -> str:
        hit = self._codes.get(id(node))
        if hit is None:
            hit = self._codes[id(node)] = (node, self.module.code_for_node(node))  # keeps the id unique
        return hit[1]


def _parameters(params: cst.Parameters) -> set[str]:
    star = [p for p in (params.star_arg, params.star_kwarg) if isinstance(p, cst.Param)]
    return {p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params, *star)}


class _ScopeIndex:
    """Per scope, built on first use: the defs and plain assignments of its own body."""

    def __init__(self, ctx: ModuleContext, statements: list[cst.CSTNode]) -> None:
        self.defs: dict[str, cst.FunctionDef] = {}
        self.values: dict[str, list[cst.BaseExpression]] = {}
        self.scope: object = None
        self.unassigned: set[str] = set()  # names an import, a `match` capture, `except ... as`, a loop, walrus, `with ... as` or unpacking binds
        for stmt in statements:
            inside = -1  # the end of a class body: its assignments bind the class's names, not this scope's
            for node in _walk_same_scope(stmt, ctx):
                kind, at = type(node), ctx._pos.get(id(node), -1)
                if at < inside and kind is not _FunctionDef:
                    continue
                inside = ctx._end[at] if kind is cst.ClassDef and at >= 0 else inside
                if kind in _UNASSIGNED_BINDERS:
                    self.unassigned.add(_unassigned_name(node))
                elif kind is _FunctionDef:
                    self.defs[node.name.value] = node  # type: ignore[attr-defined]
                elif kind is cst.Assign:
                    for target in node.targets:  # type: ignore[attr-defined]
                        if type(target.target) is cst.Name:
                            self.values.setdefault(target.target.value, []).append(node.value)  # type: ignore[attr-defined]
                        elif paired(target.target, node.value):  # type: ignore[attr-defined]
                            # `kernel, name = functools.partial(k, ...), "fwd"`: each name its own value
                            for t, v in zip(target.target.elements, node.value.elements):  # type: ignore[attr-defined]
                                if type(t.value) is cst.Name:
                                    self.values.setdefault(t.value.value, []).append(v.value)
                                else:
                                    self.unassigned |= _bound_names(t.value)
                        else:  # `g, h = ...`: no value of its own to follow
                            self.unassigned |= _bound_names(target.target)
                elif kind is cst.For or kind is cst.NamedExpr or (kind is cst.WithItem and node.asname is not None):  # type: ignore[attr-defined]
                    # beside `g = (...)`, a read may see either value
                    self.unassigned |= _bound_names(node.asname.name if kind is cst.WithItem else node.target)  # type: ignore[attr-defined]
                elif kind is cst.AnnAssign and node.value is not None:  # type: ignore[attr-defined]
                    if type(node.target) is cst.Name:  # type: ignore[attr-defined]
                        self.values.setdefault(node.target.value, []).append(node.value)  # type: ignore[attr-defined]


# Every live context, so the free functions below can use the index recorded for a node. A
# node's children never change (LibCST trees are immutable), so any context that saw the node
# has the right index; nodes no context saw (built by a rewrite) are walked field by field.
_CONTEXTS: "weakref.WeakSet[ModuleContext]" = weakref.WeakSet()
_LAST: list = [lambda: None]  # a weak reference to the context that answered last


def _context_of(node: cst.CSTNode) -> Optional[ModuleContext]:
    key = id(node)
    last = _LAST[0]()
    if last is not None and key in last._pos:
        return last
    try:
        contexts = list(_CONTEXTS)
    except RuntimeError:  # the set changed under another thread's iteration
        return None
    for ctx in contexts:
        if key in ctx._pos:
            _LAST[0] = weakref.ref(ctx)
            return ctx
    return None


def _walk_same_scope(node: cst.CSTNode, ctx: Optional[ModuleContext] = None) -> Iterator[cst.CSTNode]:
    """Pre-order walk that yields nested FunctionDefs but does not enter them (or lambdas)."""
    ctx = ctx if ctx is not None and id(node) in ctx._pos else _context_of(node)
    if ctx is None:
        return _slow_walk(node, stop_at_scopes=True)
    return _same_scope_slice(ctx, node)


def _same_scope_slice(ctx: ModuleContext, node: cst.CSTNode, enter_lambda: bool = True) -> Iterator[cst.CSTNode]:
    order, end = ctx._order, ctx._end
    i = ctx._pos[id(node)]
    stop = end[i]
    yield node
    # A function's own body is a new scope too, even when the walk starts at it.
    if type(node) is _FunctionDef or (type(node) is _Lambda and not enter_lambda):
        return
    i += 1
    while i < stop:
        cur = order[i]
        yield cur
        kind = type(cur)
        i = end[i] if kind is _FunctionDef or kind is _Lambda else i + 1


def own_nodes(root: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """`root` and the nodes below it, pre-order; functions and lambdas (`root` too) are yielded
    but not entered."""
    ctx = _context_of(root)
    if ctx is None:
        return _slow_walk(root, stop_at_scopes=True, enter_lambda=False)
    return _same_scope_slice(ctx, root, enter_lambda=False)


def walk(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    ctx = _context_of(node)
    if ctx is None:
        return _spliced_walk(node)
    i = ctx._pos[id(node)]
    return iter(ctx._order[i : ctx._end[i]])


def _spliced_walk(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """Pre-order walk of a tree no context saw as a whole (a rewrite's result): the subtrees it
    shares with an analysed tree come from that tree's index."""
    # Only the context that answered last is asked (a rewrite walks the tree it was planned on):
    # asking every live context about every node would cost more than it saves.
    last = _LAST[0]()
    pos, order, end = (last._pos, last._order, last._end) if last is not None else ({}, [], [])
    stack = [node]
    while stack:
        cur = stack.pop()
        i = pos.get(id(cur))
        if i is not None:
            yield from order[i : end[i]]
            continue
        yield cur
        stack.extend(reversed(child_nodes(cur)))


def _slow_walk(node: cst.CSTNode, stop_at_scopes: bool, enter_lambda: bool = True) -> Iterator[cst.CSTNode]:
    stack = [node]
    while stack:
        cur = stack.pop()
        yield cur
        # A function's own body is a new scope too, even when the walk starts at it.
        if stop_at_scopes and (isinstance(cur, cst.FunctionDef) or (isinstance(cur, cst.Lambda) and (cur is not node or not enter_lambda))):
            continue
        stack.extend(reversed(child_nodes(cur)))


_EMPTY_MODULE = cst.Module(body=[])


def plain_read(expr: cst.CSTNode, *, arithmetic: bool = False, keys: bool = False) -> bool:
    """Names, attributes and integer subscripts (with `keys`, string-keyed ones too:
    `kwargs['outs']`; with `arithmetic`, binary operations of them): reading the expression twice
    with the same bindings gives one value, so a check or an index_map may repeat it where the
    code wrote it once."""
    if isinstance(expr, (cst.Name, cst.Integer)):
        return True
    if isinstance(expr, cst.Attribute):
        return plain_read(expr.value, arithmetic=arithmetic, keys=keys)
    if isinstance(expr, cst.Subscript):
        constants = (cst.Integer, cst.SimpleString) if keys else cst.Integer
        return (plain_read(expr.value, arithmetic=arithmetic, keys=keys) and len(expr.slice) == 1
                and isinstance(expr.slice[0].slice, cst.Index) and isinstance(expr.slice[0].slice.value, constants))
    if arithmetic and isinstance(expr, cst.BinaryOperation):
        return plain_read(expr.left, arithmetic=True, keys=keys) and plain_read(expr.right, arithmetic=True, keys=keys)
    return False
