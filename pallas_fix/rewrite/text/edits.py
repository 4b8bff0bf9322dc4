"""Identity-addressed tree edits: the analysis names nodes, a plan maps them to replacements.

Each edit is a function of the *updated* node (children already edited), so an edit inside a
statement that another edit moves elsewhere is carried along. `Capture` keeps a removed
statement's updated form for an edit that runs later in the traversal (a loop body def that is
deleted where it stands and re-inserted where the loop call was).
"""

from __future__ import annotations

from typing import Callable, Union

import libcst as cst

Edit = Callable[[cst.CSTNode], Union[cst.CSTNode, cst.RemovalSentinel, cst.FlattenSentinel]]


class NodeReplacer(cst.CSTTransformer):
    def __init__(self, edits: dict[cst.CSTNode, Edit]) -> None:
        super().__init__()
        self.edits = edits
        self.captured: dict[cst.CSTNode, cst.CSTNode] = {}
        self.applied: set[int] = set()

    def on_leave(self, original_node, updated_node):
        edit = self.edits.get(original_node)
        if edit is None:
            return updated_node
        self.applied.add(id(original_node))
        self.captured[original_node] = updated_node
        return edit(updated_node)


def chain(edits: dict[cst.CSTNode, Edit], node: cst.CSTNode, edit: Edit) -> None:
    """Give `node` the edit `edit`, after whatever edit it has already."""
    existing = edits.get(node)
    edits[node] = edit if existing is None else (lambda updated: edit(existing(updated)))


class EditFailed(Exception):
    pass


def apply_edits(module: cst.Module, edits: dict[cst.CSTNode, Edit]) -> tuple[cst.Module, NodeReplacer]:
    replacer = NodeReplacer(edits)
    new = module.visit(replacer)
    missing = [n for n in edits if id(n) not in replacer.applied]
    if missing:
        raise EditFailed(f"{len(missing)} planned edit(s) found no node (the tree changed under the plan)")
    return new, replacer


def _with_leading(node, comments: list) -> object:
    if isinstance(node, cst.FlattenSentinel):
        nodes = list(node.nodes)
        if nodes and hasattr(nodes[0], "leading_lines"):
            nodes[0] = nodes[0].with_changes(leading_lines=[*comments, *nodes[0].leading_lines])
            return cst.FlattenSentinel(nodes)
        return node
    if isinstance(node, cst.RemovalSentinel) or not hasattr(node, "leading_lines"):
        return node
    return node.with_changes(leading_lines=[*comments, *node.leading_lines])


def remove_statement(edits: dict, stmt: cst.CSTNode, siblings: list) -> None:
    """Remove `stmt`, handing its comment lines to the statement after it (comments survive)."""
    try:
        nxt = siblings[siblings.index(stmt) + 1]
    except (ValueError, IndexError):
        edits[stmt] = lambda _n: cst.RemovalSentinel.REMOVE
        return
    carried: list = []

    def remove(updated):
        carried.extend(l for l in getattr(updated, "leading_lines", ()) if l.comment is not None)
        return cst.RemovalSentinel.REMOVE

    edits[stmt] = remove
    inner = edits.get(nxt)

    def receive(updated, inner=inner):
        out = inner(updated) if inner is not None else updated
        return _with_leading(out, carried) if carried else out

    edits[nxt] = receive
