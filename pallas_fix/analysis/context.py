"""One parsed module plus the cheap indexes every analysis step needs (parents, defs, imports)."""

from __future__ import annotations

import weakref
from typing import Iterator, Optional, Union

import libcst as cst
from libcst.metadata.position_provider import NEWLINE_RE, PositionProvidingCodegenState

from pallas_fix.core.model import Span
from pallas_fix.core.names import ImportTable

Scope = Union[cst.Module, cst.FunctionDef, cst.Lambda]


class ModuleContext:
    def __init__(self, source: str, path: str = "<string>") -> None:
        self.source = source
        self.path = path
        self.module = cst.parse_module(source)
        # `node.children` re-runs LibCST's visitor machinery (rebuilding the node) on every call;
        # walks over a 2,000-line file asked for it hundreds of thousands of times. One pass
        # records every node's children, in the same (lexical) order, and its parent.
        self.parents: dict[cst.CSTNode, cst.CSTNode] = {}
        self.children: dict[cst.CSTNode, list[cst.CSTNode]] = {}
        _index_tree(self.module, self.parents, self.children)
        # The same import statements, in the same order, as ImportTable's own visitor pass finds.
        self.imports = ImportTable(_EMPTY_MODULE)
        for node in self.children:
            if isinstance(node, cst.Import):
                self.imports.add_import(node)
            elif isinstance(node, cst.ImportFrom):
                self.imports.add_import_from(node)
        self._positions: Optional[dict] = None
        self._scope_index: dict[Scope, _ScopeIndex] = {}
        _CONTEXTS.add(self)

    # -- structure ------------------------------------------------------------------------------
    def parent(self, node: cst.CSTNode) -> Optional[cst.CSTNode]:
        return self.parents.get(node)

    def ancestors(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        cur = self.parents.get(node)
        while cur is not None:
            yield cur
            cur = self.parents.get(cur)

    def scope_of(self, node: cst.CSTNode) -> Scope:
        """The innermost function (or lambda, or the module) whose body holds `node`."""
        for anc in self.ancestors(node):
            if isinstance(anc, (cst.FunctionDef, cst.Lambda)):
                return anc
        return self.module

    def enclosing_function(self, node: cst.CSTNode) -> Optional[cst.FunctionDef]:
        for anc in self.ancestors(node):
            if isinstance(anc, cst.FunctionDef):
                return anc
        return None

    def statement_of(self, node: cst.CSTNode) -> Optional[cst.BaseStatement]:
        """The statement (simple line or compound) that holds `node`."""
        cur: Optional[cst.CSTNode] = node
        while cur is not None:
            if isinstance(cur, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
                return cur
            cur = self.parents.get(cur)
        return None

    def scope_chain(self, node: cst.CSTNode) -> list[Scope]:
        chain: list[Scope] = []
        for anc in self.ancestors(node):
            if isinstance(anc, (cst.FunctionDef, cst.Lambda)):
                chain.append(anc)
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
        index = self._scope_index.get(scope)
        if index is None:
            index = self._scope_index[scope] = _ScopeIndex(self.body_statements(scope))
        return index

    def local_defs(self, scope: Scope) -> dict[str, cst.FunctionDef]:
        """Function definitions anywhere in `scope`'s own body (not inside nested functions)."""
        return dict(self._index(scope).defs)

    def resolve_def(self, name: str, at: cst.CSTNode) -> Optional[cst.FunctionDef]:
        """The `def name` visible from `at`, innermost scope first."""
        for scope in self.scope_chain(at):
            defs = self.local_defs(scope)
            if name in defs:
                return defs[name]
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
                values = self.assignments(expr.value, scope)
                if values:
                    if len(values) != 1 or self._within(at, values[0]):
                        return expr
                    at = values[0]
                    expr = values[0]
                    break
            else:
                return expr
        return expr

    def _within(self, node: cst.CSTNode, ancestor: cst.CSTNode) -> bool:
        return node is ancestor or any(a is ancestor for a in self.ancestors(node))

    # -- positions ------------------------------------------------------------------------------
    def span(self, node: cst.CSTNode) -> Span:
        if self._positions is None:
            self._positions = positions(self.module)
        (line, column), (end_line, end_column) = self._positions[node]
        return Span(line, column, end_line, end_column)

    def code(self, node: cst.CSTNode) -> str:
        return self.module.code_for_node(node)


class _ScopeIndex:
    """Per scope, built on first use: the defs and plain assignments of its own body."""

    def __init__(self, statements: list[cst.CSTNode]) -> None:
        self.defs: dict[str, cst.FunctionDef] = {}
        self.values: dict[str, list[cst.BaseExpression]] = {}
        for stmt in statements:
            for node in _walk_same_scope(stmt):
                if isinstance(node, cst.FunctionDef):
                    self.defs[node.name.value] = node
                elif isinstance(node, cst.Assign):
                    for target in node.targets:
                        if isinstance(target.target, cst.Name):
                            self.values.setdefault(target.target.value, []).append(node.value)
                elif isinstance(node, cst.AnnAssign) and node.value is not None:
                    if isinstance(node.target, cst.Name):
                        self.values.setdefault(node.target.value, []).append(node.value)


# Every live context, so the free functions below can use the children recorded for a node.
# A node's children never change (LibCST trees are immutable), so any context that saw the node
# has the right list; nodes no context saw (built by a rewrite) fall back to `node.children`.
_CONTEXTS: "weakref.WeakSet[ModuleContext]" = weakref.WeakSet()


def _children_map(node: cst.CSTNode) -> dict:
    try:
        contexts = list(_CONTEXTS)
    except RuntimeError:  # the set changed under another thread's iteration
        return {}
    for ctx in contexts:
        if node in ctx.children:
            return ctx.children
    return {}


def _walk_same_scope(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """Pre-order walk that yields nested FunctionDefs but does not enter them (or lambdas)."""
    return _walk(node, stop_at_scopes=True)


def walk(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    return _walk(node, stop_at_scopes=False)


def _walk(node: cst.CSTNode, stop_at_scopes: bool) -> Iterator[cst.CSTNode]:
    known = _children_map(node)
    stack = [node]
    while stack:
        cur = stack.pop()
        yield cur
        # A function's own body is a new scope too, even when the walk starts at it.
        if stop_at_scopes and (isinstance(cur, cst.FunctionDef) or (isinstance(cur, cst.Lambda) and cur is not node)):
            continue
        kids = known.get(cur)
        stack.extend(reversed(kids if kids is not None else cur.children))


# -- one pass over the tree -------------------------------------------------------------------------
_EMPTY_MODULE = cst.Module(body=[])
# Per node class, the fields LibCST visits, in the order it visits them (= `node.children` order).
_FIELD_ORDER: dict[type, tuple[str, ...]] = {}
_IS_NODE: dict[type, bool] = {}
# Classes whose visit skips a field depending on its value (format_spec only when not None): one
# instance does not give their order, so they use LibCST's own `children`.
CONDITIONAL_FIELDS = frozenset({"FormattedStringExpression", "TemplatedStringExpression"})


class _FieldRecorder(cst.CSTVisitor):
    def __init__(self) -> None:
        self.fields: list[str] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        return False

    def on_visit_attribute(self, node: cst.CSTNode, attribute: str) -> None:
        self.fields.append(attribute)

    def on_leave_attribute(self, original_node: cst.CSTNode, attribute: str) -> None:
        pass


def _field_order(node: cst.CSTNode) -> tuple[str, ...]:
    order = _FIELD_ORDER.get(type(node))
    if order is None:
        # LibCST calls on_visit_attribute for every field it visits, present or not (None,
        # MaybeSentinel, empty sequence), so one instance gives the class's order.
        recorder = _FieldRecorder()
        node._visit_and_replace_children(recorder)
        order = _FIELD_ORDER[type(node)] = tuple(recorder.fields)
    return order


def _is_node(value: object) -> bool:
    known = _IS_NODE.get(type(value))
    if known is None:
        known = _IS_NODE[type(value)] = isinstance(value, cst.CSTNode)
    return known


def child_nodes(node: cst.CSTNode) -> list[cst.CSTNode]:
    """`node.children` without running the visitor machinery."""
    if type(node).__name__ in CONDITIONAL_FIELDS:
        return list(node.children)
    kids: list[cst.CSTNode] = []
    for name in _field_order(node):
        value = getattr(node, name)
        if _is_node(value):
            kids.append(value)
        elif isinstance(value, (tuple, list)):
            kids.extend(v for v in value if _is_node(v))
    return kids


def _index_tree(root: cst.CSTNode, parents: dict, children: dict) -> None:
    """Parents and children of every node; `children` is filled in pre-order."""
    stack = [root]
    while stack:
        node = stack.pop()
        kids = child_nodes(node)
        children[node] = kids
        for kid in kids:
            parents[kid] = node
        stack.extend(reversed(kids))


# -- positions -------------------------------------------------------------------------------------
class _Computed:
    __slots__ = ("_computed",)

    def __init__(self) -> None:
        self._computed: dict = {}


class _SyntacticPosition:
    __slots__ = ("state", "node", "start_node", "end_node", "start")

    def __init__(self, state, node, start_node, end_node) -> None:
        self.state, self.node, self.start_node, self.end_node = state, node, start_node, end_node

    def __enter__(self) -> None:
        self.start = (self.state.line, self.state.column)

    def __exit__(self, *exc) -> bool:
        state = self.state
        computed = state.provider._computed
        start = computed[self.start_node][0] if self.start_node is not None else self.start
        end = computed[self.end_node][1] if self.end_node is not None else (state.line, state.column)
        computed[self.node] = (start, end)
        return False


class _PositionState(PositionProvidingCodegenState):
    """LibCST's PositionProvider codegen state with plain tuples and no generator-based context
    managers: the same numbers, several times faster (it runs once per node of the module)."""

    def _update_position(self, value: str) -> None:
        if "\n" not in value and "\r" not in value:
            self.column += len(value)
            return
        segments = NEWLINE_RE.split(value)
        self.line += len(segments) - 1
        self.column = len(segments[-1])

    def before_codegen(self, node: cst.CSTNode) -> None:
        self._stack.append((self.line, self.column))

    def after_codegen(self, node: cst.CSTNode) -> None:
        start = self._stack.pop()
        computed = self.provider._computed
        if node not in computed:
            computed[node] = (start, (self.line, self.column))

    def record_syntactic_position(self, node, *, start_node=None, end_node=None):
        return _SyntacticPosition(self, node, start_node, end_node)


def positions(module: cst.Module) -> dict[cst.CSTNode, tuple[tuple[int, int], tuple[int, int]]]:
    """((line, column), (end_line, end_column)) per node, as libcst's PositionProvider gives them
    (1-based lines, 0-based columns, whitespace that is not syntactically significant left out)."""
    holder = _Computed()
    state = _PositionState(default_indent=module.default_indent, default_newline=module.default_newline, provider=holder)
    module._codegen(state)
    return holder._computed
