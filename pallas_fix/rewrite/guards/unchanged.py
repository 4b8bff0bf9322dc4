"""Sizes the code leaves opaque that a guard may still read: names unchanged since the plan read them.

A name bound in both arms of an `if` (`B, H, T, S = g.shape` or `B, T, H, S = g.shape`) is an
opaque atom to analysis.loops.symbolic: each mention is its own unknown, so the grid's `B * H`
read in `grid = (NS, NT, B * H)` and a guard's `B * H` written before the pallas_call are, to
the prover, two unrelated numbers. They are one number when nothing binds `B` or `H` between the
statement the plan read them in and the statement the guard goes before: straight-line code of
one function, both statements in its own body, no binding of either name from the first up to
the second (nested blocks included), and no `nonlocal` / `global` that lets a called function
rebind them (a closure's free names included: the reads happen in one run of the function).
Then the guard, written with the atoms' own texts, reads the value the plan reasoned about.

An output's size the call site names only as `jax.tree.leaves(kwargs['outs'])[k].shape[d]`
(rewrite.callsite.out_leaves) is read the same way: its names unchanged since the pallas_call.
"""

from __future__ import annotations

from typing import Optional

import libcst as cst

from pallas_fix.analysis.context import own_nodes, plain_read, walk
from pallas_fix.analysis.loops.symbolic import Poly, Symbols
from pallas_fix.rewrite.callsite.out_leaves import leaf_parts
from pallas_fix.rewrite.text.syntax import variable_names


def readable_at(symbols: Symbols, poly: Poly, anchor: cst.CSTNode, reads_back, blocked: frozenset = frozenset()) -> Optional[str]:
    """The text of `poly` (its atoms' own spellings) when a check written just before the
    statement `anchor` reads the same value: every atom either reads back alone there
    (`reads_back(text, Poly.atom(key))`) or is an opaque plain read (names, attributes, constant
    subscripts) whose names nothing rebinds between its statement and `anchor`, none of them
    `blocked` (a traced `jax.jit` argument). None otherwise."""
    if not poly.terms:
        return None
    for monomial, _coeff in poly.terms:
        for key in monomial:
            atom = symbols.atoms.get(key)
            if atom is None:
                return None
            if not (reads_back(atom.text, Poly.atom(key)) or _unchanged(symbols, atom, anchor, blocked)):
                return None
    return symbols.text(poly)


def respelled(symbols: Symbols, spelled: Optional[str], poly: Poly, at: cst.CSTNode) -> Optional[str]:
    """`spelled` (the code's own spelling, `B * H`) when, read at `at` with each opaque name taken
    as the atom of `poly` spelled the same, it is `poly`; the order the code wrote is kept
    (`symbols.text` sorts atoms by key, `H * B`)."""
    if not spelled:
        return None
    try:
        read = symbols.poly(cst.parse_expression(spelled), at)
    except cst.ParserSyntaxError:
        return None
    by_text: dict[str, list[str]] = {}
    for monomial, _c in poly.terms:
        for key in dict.fromkeys(monomial):
            by_text.setdefault(symbols.atoms[key].text, []).append(key) if key in symbols.atoms else None
    renamed: dict = {}
    for monomial, coeff in read.terms:
        keys = []
        for key in monomial:
            atom = symbols.atoms.get(key)
            if key_is_opaque(key) and atom is not None and len(by_text.get(atom.text, [])) == 1:
                key = by_text[atom.text][0]
            keys.append(key)
        renamed[tuple(sorted(keys))] = renamed.get(tuple(sorted(keys)), 0) + coeff
    return spelled if Poly.of(renamed) == poly else None


def _unchanged(symbols: Symbols, atom, anchor: cst.CSTNode, blocked: frozenset) -> bool:
    ctx = symbols.ctx
    node = atom.node
    if not key_is_opaque(atom.key) or node is None or not plain_read(node) or ctx.parent(node) is None:
        return False
    fn = ctx.enclosing_function(anchor)
    if fn is None or ctx.scope_chain(node)[:1] != [fn]:
        return False
    names = variable_names(node)
    return not (names & blocked) and names_unchanged(ctx, names, node, anchor, same_statement=False,
                                                     contents=not isinstance(node, cst.Name))


def names_unchanged(ctx, names: set[str], node: cst.CSTNode, anchor: cst.CSTNode, same_statement: bool,
                    contents: bool = False) -> bool:
    """`names` read at `node` hold the same values just before the statement `anchor`: both in the
    straight-line body of one function, `node`'s statement first (or, with `same_statement`, the
    anchor itself, when no `:=` in it binds them before `node` runs), nothing binding them from
    there up to `anchor` (nested blocks included), no `nonlocal` / `global` of them anywhere in
    the module (a called function could rebind them). With `contents` (the read is `dims[1]` or
    `cfg.heads`: what the names hold, not only which object), no call between may change it
    either: a method of one of them (`dims.insert(0, 1)`) or a call given one of them."""
    fn = ctx.enclosing_function(anchor)
    if fn is None or ctx.enclosing_function(node) is not fn:
        return False
    stmts = ctx.body_statements(fn)
    first, last = _top_index(ctx, stmts, node), _top_index(ctx, stmts, anchor)
    if first is None or last is None or first > last or not isinstance(stmts[first], cst.SimpleStatementLine):
        return False
    if first == last and not (same_statement and not any(
            isinstance(n, cst.NamedExpr) and variable_names(n.target) & names for n in walk(stmts[first]))):
        return False
    between = stmts[first + (first == last):last + 1] if first < last else []
    if contents and any(_may_change(st, names) for st in between):
        return False
    return not any(_binds(st, names) for st in between) and not any(
        isinstance(n, (cst.Nonlocal, cst.Global)) and {a.name.value for a in n.names} & names for n in walk(ctx.module))


def key_is_opaque(key: str) -> bool:
    return key.startswith("?")


def _top_index(ctx, stmts: list, node: cst.CSTNode) -> Optional[int]:
    position = {id(st): n for n, st in enumerate(stmts)}
    return next((position[id(a)] for a in (node, *ctx.ancestors(node)) if id(a) in position), None)


def _binds(stmt: cst.CSTNode, names: set[str]) -> bool:
    """`stmt` (or anything nested in it, but not inside an inner function) may bind one of `names`."""
    for node in own_nodes(stmt):
        targets: list = []
        if isinstance(node, cst.Assign):
            targets = [t.target for t in node.targets]
        elif isinstance(node, (cst.AnnAssign, cst.AugAssign)):
            targets = [node.target]
        elif isinstance(node, (cst.For, cst.CompFor)):
            targets = [node.target]
        elif isinstance(node, cst.NamedExpr):
            targets = [node.target]
        elif isinstance(node, cst.AsName):
            targets = [node.name]
        elif isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            targets = [node.name]
        elif isinstance(node, cst.Del):
            targets = [node.target]
        if any(isinstance(n, cst.Name) and n.value in names for t in targets for n in walk(t)):
            return True
    return False


def _may_change(stmt: cst.CSTNode, names: set[str]) -> bool:
    """A call in `stmt` that may change what one of `names` holds: its method, or one of its arguments."""
    for node in walk(stmt):
        if not isinstance(node, cst.Call):
            continue
        func = node.func
        while isinstance(func, (cst.Attribute, cst.Subscript)):
            func = func.value
        if (isinstance(func, cst.Name) and func.value in names and func is not node.func) or any(
                isinstance(a.value, cst.Name) and a.value.value in names for a in node.args):
            return True
    return False


def reads_leaf(symbols: Symbols, text: str, poly: Poly, call: cst.CSTNode, anchor: cst.CSTNode, blocked: frozenset) -> bool:
    """`text` is the size of an output leaf the call site built (rewrite.callsite.out_leaves,
    `jax.tree.leaves(kwargs['outs'])[0].shape[0]`) and reads the same just before `anchor` as at
    the pallas_call `call`: the out_shape's names (and `jax`) are unchanged in between."""
    single = poly.monomial()
    if single is None or single[1] != 1 or len(single[0]) != 1 or not key_is_opaque(single[0][0]):
        return False
    atom = symbols.atoms.get(single[0][0])
    if atom is None or atom.text != text or atom.node is None or symbols.ctx.parent(atom.node) is not None:
        return False
    written = leaf_parts(atom.node)
    if written is None:
        return False
    names = variable_names(atom.node)
    return not (variable_names(written) & blocked) and names_unchanged(symbols.ctx, names, call, anchor, same_statement=True)
