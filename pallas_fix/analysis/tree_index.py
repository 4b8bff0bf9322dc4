"""The one pass over a LibCST tree that ModuleContext builds its indexes from, and node positions.

`child_nodes` gives `node.children` without LibCST's visitor machinery (which rebuilds the node
on every call); `positions` gives what LibCST's PositionProvider gives, several times faster.
"""

from __future__ import annotations

import bisect
from typing import Optional

import libcst as cst
from libcst.metadata.position_provider import NEWLINE_RE, PositionProvidingCodegenState

_FunctionDef, _Lambda = cst.FunctionDef, cst.Lambda


class _IsStatement(dict):
    def __missing__(self, kind: type) -> bool:
        known = self[kind] = issubclass(kind, (cst.SimpleStatementLine, cst.BaseCompoundStatement))
        return known


is_statement = _is_statement = _IsStatement().__getitem__

# -- one pass over the tree -------------------------------------------------------------------------
# Per node class, the fields LibCST visits, in the order it visits them (= `node.children` order).
_FIELD_ORDER: dict[type, tuple[str, ...]] = {}
# Classes whose visit skips a field depending on its value (format_spec only when not None): one
# instance does not give their order, so they use LibCST's own `children`.
CONDITIONAL_FIELDS = frozenset({"FormattedStringExpression", "TemplatedStringExpression"})


class _IsNode(dict):
    def __missing__(self, kind: type) -> bool:
        known = self[kind] = isinstance(kind, type) and issubclass(kind, cst.CSTNode)
        return known


_IS_NODE = _IsNode()


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


# Per node class, a function that pushes its children onto a stack, last first, and returns
# how many it pushed: the walk below then pops them in visit order.
_PUSH: dict[type, object] = {}


def _push_function(node: cst.CSTNode):
    kind = type(node)
    if kind.__name__ in CONDITIONAL_FIELDS:
        def fn(n, stack):
            kids = list(n.children)
            stack.extend(reversed(kids))
            return len(kids)
    else:
        lines = ["def push(n, stack, _t=type, _tuple=tuple, _list=list, _rev=reversed):", "    k = 0"]
        for name in reversed(_field_order(node)):
            lines += [
                f"    v = n.{name}",
                "    c = _t(v)",
                "    if _is_node[c]:",
                "        stack.append(v)",
                "        k += 1",
                "    elif (c is _tuple or c is _list) and v:",
                "        stack.extend(_rev(v))",
                "        k += len(v)",
            ]
        lines.append("    return k")
        space: dict = {"_is_node": _IS_NODE}
        exec("\n".join(lines), space)  # noqa: S102 - field names come from LibCST's own classes
        fn = space["push"]
    _PUSH[kind] = fn
    return fn


def child_nodes(node: cst.CSTNode) -> list[cst.CSTNode]:
    """`node.children` without running the visitor machinery."""
    kids: list[cst.CSTNode] = []
    (_PUSH.get(type(node)) or _push_function(node))(node, kids)  # type: ignore[operator]
    kids.reverse()
    return kids


def index_tree(root: cst.CSTNode, reuse: Optional["Reuse"] = None):
    """One pre-order pass: per position in that order, the node, its parent's position, its
    innermost enclosing function or lambda's position (-1: none) and the end of its subtree; and
    the positions of each node class. No dict keyed by node: LibCST nodes hash in Python.

    `reuse`: an earlier index whose top-level statements may be children of `root` again (the
    language server's spliced trees): theirs are copied, shifted, instead of walked."""
    order: list[cst.CSTNode] = []
    parent: list[int] = []
    scope: list[int] = []
    by_type: dict[type, list[int]] = {}
    stack, parents, scopes = [root], [-1], [-1]
    push_of = _PUSH
    while stack:
        node = stack.pop()
        i = len(order)
        p, s = parents.pop(), scopes.pop()
        if reuse is not None and p == 0 and id(node) in reuse.statements:
            reuse.copy(reuse.statements[id(node)], order, parent, scope, by_type)
            continue
        order.append(node)
        parent.append(p)
        scope.append(s)
        kind = type(node)
        n = (push_of.get(kind) or _push_function(node))(node, stack)  # type: ignore[operator]
        seen = by_type.get(kind)
        if seen is None:
            by_type[kind] = [i]
        else:
            seen.append(i)
        if n:
            parents.extend([i] * n)
            scopes.extend([i if kind is _FunctionDef or kind is _Lambda else s] * n)
    end = list(range(1, len(order) + 1))
    for i in range(len(order) - 1, 0, -1):
        p = parent[i]
        if end[i] > end[p]:
            end[p] = end[i]
    return order, parent, scope, end, by_type


class Reuse:
    """An index's top-level statements, for `index_tree` of a tree that holds some of them."""

    def __init__(self, order: list, parent: list[int], scope: list[int], end: list[int]) -> None:
        self.order, self.parent, self.scope, self.end = order, parent, scope, end
        # The module's children, from one to the next by subtree ends: no pass over every node.
        self.statements: dict[int, int] = {}
        i = 1
        while i < len(order):
            self.statements[id(order[i])] = i
            i = end[i]

    def copy(self, at: int, order: list, parent: list[int], scope: list[int], by_type: dict) -> None:
        """Append statement `at`'s subtree: a top-level statement's parent is the module and its
        scope the module's (-1); inside, positions move by the same amount."""
        stop, d = self.end[at], len(order) - at
        order.extend(self.order[at:stop])
        parent.append(0)
        parent.extend([q + d for q in self.parent[at + 1 : stop]])
        scope.append(-1)
        scope.extend([q + d if q >= 0 else -1 for q in self.scope[at + 1 : stop]])
        for k in range(at + d, stop + d):
            kind = type(order[k])
            seen = by_type.get(kind)
            if seen is None:
                by_type[kind] = [k]
            else:
                seen.append(k)


# -- positions -------------------------------------------------------------------------------------
class _Computed:
    __slots__ = ("_computed", "nodes")

    def __init__(self) -> None:
        self._computed: dict = {}
        self.nodes: dict = {}


class _SyntacticPosition:
    __slots__ = ("state", "node", "start_node", "end_node", "start")

    def __init__(self, state, node, start_node, end_node) -> None:
        self.state, self.node, self.start_node, self.end_node = state, node, start_node, end_node

    def __enter__(self) -> None:
        self.start = (self.state.line, self.state.column)

    def __exit__(self, *exc) -> bool:
        state = self.state
        computed = state.provider._computed
        start = computed[id(self.start_node)][0] if self.start_node is not None else self.start
        end = computed[id(self.end_node)][1] if self.end_node is not None else (state.line, state.column)
        computed[id(self.node)] = (start, end)
        return False


class _PositionState(PositionProvidingCodegenState):
    """LibCST's PositionProvider codegen state with plain tuples, id() keys and no
    generator-based context managers: the same numbers, several times faster (it runs once per
    node of the module)."""

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
        key = id(node)
        if key not in computed:
            computed[key] = (start, (self.line, self.column))

    def record_syntactic_position(self, node, *, start_node=None, end_node=None):
        return _SyntacticPosition(self, node, start_node, end_node)


class _NodePositionState(_PositionState):
    """The same, remembering each node so that the result can be keyed by node."""

    def before_codegen(self, node: cst.CSTNode) -> None:
        self._stack.append((self.line, self.column))
        self.provider.nodes[id(node)] = node


def positions_by_id(module: cst.Module) -> dict[int, tuple[tuple[int, int], tuple[int, int]]]:
    holder = _Computed()
    state = _PositionState(default_indent=module.default_indent, default_newline=module.default_newline, provider=holder)
    module._codegen(state)
    return holder._computed


def positions(module: cst.Module) -> dict[cst.CSTNode, tuple[tuple[int, int], tuple[int, int]]]:
    """((line, column), (end_line, end_column)) per node, as libcst's PositionProvider gives them
    (1-based lines, 0-based columns, whitespace that is not syntactically significant left out)."""
    holder = _Computed()
    state = _NodePositionState(default_indent=module.default_indent, default_newline=module.default_newline, provider=holder)
    module._codegen(state)
    return {holder.nodes[key]: place for key, place in holder._computed.items()}


# -- positions of a few nodes ------------------------------------------------------------------------
_NEWLINE_TEXT = tuple(
    c for c in (cst.SimpleWhitespace, cst.SimpleString, cst.FormattedStringText, getattr(cst, "TemplatedStringText", None)) if c
)


class LazyPositions:
    """What `positions_by_id` gives, for a few nodes: only the statement around a node is
    generated, starting where the whole module's codegen would reach it.

    That place is counted from the tree: every line break is in the text of a `Newline`, a string
    or a backslash continuation, and a statement's codegen starts at column 0 of the line after
    the breaks of everything before it in walk order (for top-level statements and the statements
    of def and class bodies, where walk and codegen orders agree). The count must add up to the
    source's own line breaks, and each statement generated must end where the count says;
    otherwise, and for anything outside such a statement, the whole module is generated."""

    def __init__(self) -> None:  # the context is passed in, not kept: no reference cycle
        self.computed: dict[int, tuple[tuple[int, int], tuple[int, int]]] = {}
        self.full = False
        self.done: set[int] = set()
        self._starts: Optional[tuple[list[int], list[int]]] = None

    def get(self, ctx, node: cst.CSTNode) -> tuple[tuple[int, int], tuple[int, int]]:
        hit = self.computed.get(id(node))
        if hit is not None:
            return hit
        if not self.full:
            i = ctx._pos.get(id(node))
            place = self._statement(ctx, i) if i is not None else None
            if place is not None and place[0] not in self.done and self._generate(ctx, *place):
                hit = self.computed.get(id(node))
                if hit is not None:
                    return hit
            self.computed, self.full = positions_by_id(ctx.module), True
        return self.computed[id(node)]

    def _statement(self, ctx, i: int) -> Optional[tuple[int, list[str]]]:
        """The innermost top-level or def/class-body statement holding node `i`, and the indents
        its codegen starts under."""
        order, parent = ctx._order, ctx._parent
        chain = []
        while i > 0:
            chain.append(i)
            i = parent[i]
        chain.reverse()
        if not chain or not _is_statement(type(order[chain[0]])):
            return None
        default = ctx.module.default_indent
        stmt, indents, k = chain[0], [], 1
        while k + 1 < len(chain) and type(order[stmt]) in (cst.FunctionDef, cst.ClassDef):
            block, inner = order[chain[k]], order[chain[k + 1]]
            if type(block) is not cst.IndentedBlock or not _is_statement(type(inner)):
                break
            indents.append(default if block.indent is None else block.indent)
            stmt, k = chain[k + 1], k + 2
        return stmt, indents

    def _line_before(self, ctx, i: int) -> Optional[int]:
        """The line the codegen is on when it reaches node `i` (None: the count does not add up)."""
        if self._starts is None:
            self._starts = self._count(ctx)
        at, breaks = self._starts
        if not breaks:
            return None
        return 1 + breaks[bisect.bisect_left(at, i)]

    def _count(self, ctx) -> tuple[list[int], list[int]]:
        module, order, by_type = ctx.module, ctx._order, ctx._by_type
        if not module.has_trailing_newline:
            return [], []
        default = len(NEWLINE_RE.findall(module.default_newline))
        places = [(i, default if order[i].value is None else len(NEWLINE_RE.findall(order[i].value)))  # type: ignore[attr-defined]
                  for i in by_type.get(cst.Newline, ())]
        for kind in _NEWLINE_TEXT:
            for i in by_type.get(kind, ()):
                value = order[i].value  # type: ignore[attr-defined]
                if "\n" in value or "\r" in value:
                    places.append((i, len(NEWLINE_RE.findall(value))))
        places.sort()
        at, breaks, total = [], [0], 0
        for i, n in places:
            total += n
            at.append(i)
            breaks.append(total)
        if total != len(NEWLINE_RE.findall(ctx.source)):
            return [], []
        return at, breaks

    def _generate(self, ctx, i: int, indents: list[str]) -> bool:
        self.done.add(i)
        start = self._line_before(ctx, i)
        if start is None:
            return False
        holder = _Computed()
        holder._computed = self.computed
        state = _PositionState(
            default_indent=ctx.module.default_indent, default_newline=ctx.module.default_newline,
            provider=holder, indent_tokens=list(indents), line=start,
        )
        ctx._order[i]._codegen(state)
        return state.column == 0 and state.line == self._line_before(ctx, ctx._end[i])
