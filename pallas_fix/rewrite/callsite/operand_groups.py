"""Operand lists built under static `if`s, and the kernel refs popped to match them.

Library wrappers pass optional operands so:

    operands = [x]                           in_specs = [x_spec]
    if scale is not None:                    if scale is not None:
        operands.append(scale)                   in_specs.append(scale_spec)
    ... pl.pallas_call(partial(kernel, has_scale=scale is not None), in_specs=in_specs, ...)(*operands)

    def kernel(*refs, has_scale):
        x_ref, *rest = refs
        scale_ref = rest.pop(0) if has_scale else None
        (o_ref,) = rest

How many refs the kernel gets depends on the wrapper's arguments, so no count can be fixed.
Instead every list is read in its *all-present* numbering (each conditional entry counted, with
its test), and the rewrite is allowed only when that numbering is provably right whatever the
tests say: the operands, their specs and the kernel's pops carry the same test at the same
position (the kernel's flag bound by functools.partial to the wrapper's test, written the same),
and every other kernel name sits before all conditional entries (counted from the front) or
after them (counted from the back). Dropping an absent entry then shifts the operand, its spec
and its ref alike, and a fixed ref keeps its operand.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import libcst as cst

from pallas_fix.analysis.context import ModuleContext, walk
from pallas_fix.analysis.relays.passed_in import passed_for
from pallas_fix.core.model import KernelSite
from pallas_fix.rewrite.callsite.spelling.built_lists import list_change, mutates, starred_items
from pallas_fix.rewrite.callsite.spelling.chosen_lists import chosen_items
from pallas_fix.rewrite.callsite.spelling.sized_tails import is_len_of_name
from pallas_fix.rewrite.callsite.spelling.operands import CallSiteError
from pallas_fix.rewrite.text.syntax import elements


@dataclass(frozen=True)
class Entry:
    """One item of a built list: its expression, and the static `if` test it is appended under
    (None: always there). A group stands for as many items as the sequence `over` has: the
    operands `*hs` of a wrapper's own `*hs`, or the spec appended by `for target in hs:`."""

    value: cst.BaseExpression
    test: Optional[cst.BaseExpression] = None
    over: Optional[str] = None
    target: Optional[cst.Name] = None

    @property
    def variable(self) -> bool:
        """Whether the entry may be absent, or stand for several items."""
        return self.test is not None or self.over is not None


def conditional_entries(ctx: ModuleContext, expr: cst.BaseExpression, at: cst.CSTNode, *,
                        operands: bool = False) -> Optional[tuple[list[Entry], set[int]]]:
    """The entries of the list `expr` names: a literal, then plain `.append` / `.extend` / `+=`
    statements and `if TEST:` blocks (no `else`) of them, before the statement holding `at`,
    each in the block that binds the list. Also the ids of the list names those statements read.
    `operands`: the kernel call's operands, which may also be a tuple or a choice of two literals
    (`(x, w) if with_weight else (x,)`: spelling.chosen_lists, never read for a spec list).
    None when the list is built any other way, or a test or an item may change meaning before
    the call (a name in it bound twice)."""
    if not isinstance(expr, cst.Name):
        inline = _value_entries(expr)  # `in_specs=[x_spec, *[spec for h in hs]]` at the call
        stable = inline is not None and all(_stable(ctx, e.value, ctx.scope_of(at)) for e in inline)
        return (inline, set()) if stable else None
    value = ctx.resolve_value(expr, at)
    first = _value_entries(value, operands=operands) if value is not expr else None
    binding = ctx.statement_of(value) if first is not None else None
    block = _block_of(ctx, binding)
    user = next((s for s in block if s is at or any(a is s for a in ctx.ancestors(at))), None)
    if first is None or binding not in block or user is None or block.index(user) < block.index(binding):
        return None
    entries, reads, changes = first, set(), set()
    for stmt in block[block.index(binding) + 1 : block.index(user)]:
        found = _statement_entries(stmt, expr.value)
        if found is None:
            return None
        entries += found[0]
        reads |= found[1]
        changes |= found[2]
    scope = ctx.scope_of(at)
    if any(mutates(n, expr.value) and id(ctx.statement_of(n)) not in changes for n in walk(scope)):
        return None  # changed somewhere else too (a helper, a loop)
    if not all(_stable(ctx, e.value, scope) and (e.test is None or _stable(ctx, e.test, scope)) for e in entries):
        return None
    return entries, reads


def _value_entries(value: cst.BaseExpression, *, operands: bool = False) -> Optional[list[Entry]]:
    """The entries of a list expression: a literal whose items may include `*[spec for h in hs]`,
    `+` of such parts, `[spec for h in hs]` and `[spec] * len(hs)` (a group each), choices whose
    arms share no item (_unshared); with `operands`, also tuple literals and choices of two
    literals (_choice_entries)."""
    if isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Add):
        left, right = _value_entries(value.left, operands=operands), _value_entries(value.right, operands=operands)
        return left + right if left is not None and right is not None else None
    if isinstance(value, cst.IfExp) and (operands or _unshared(value)):
        return _choice_entries(value)
    if operands and isinstance(value, cst.Tuple):
        items = elements(value)
        return [Entry(i) for i in items] if items is not None else None
    if isinstance(value, cst.ListComp):
        group = _comprehension_entry(value)
        return [group] if group is not None else None
    if isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Multiply):
        items = elements(value.left) if isinstance(value.left, cst.List) else None
        count = value.right
        if items is None or len(items) != 1 or not is_len_of_name(count):
            return None
        return [Entry(items[0], over=count.args[0].value.value)]  # no member to name: no array to read shapes from
    if not isinstance(value, cst.List):
        return None
    out: list[Entry] = []
    for el in value.elements:
        if isinstance(el, cst.StarredElement):
            group = _comprehension_entry(el.value) if isinstance(el.value, (cst.ListComp, cst.GeneratorExp)) else None
            if group is None:
                return None
            out.append(group)
        else:
            out.append(Entry(el.value))
    return out


def _choice_entries(choice: cst.IfExp) -> Optional[list[Entry]]:
    """`(x, w) if with_weight else (x,)`: the shared items always there, the extra ones under a test."""
    read = chosen_items(choice)
    return None if read is None else [Entry(i) for i in read[0]] + [Entry(i, read[2]) for i in read[1]]


def _unshared(choice: cst.IfExp) -> bool:
    """`([] if post is None else [post_spec])`: a choice of specs whose arms share no item, so each
    spec is one node (spelling.mirrored_tails writes them so)."""
    read = chosen_items(choice)
    return read is not None and not read[0]


def _comprehension_entry(comp) -> Optional[Entry]:
    """`[spec for h in hs]`: one plain `for` over a name, no `if`s."""
    loop = comp.for_in
    if loop.inner_for_in is not None or loop.ifs or loop.asynchronous is not None:
        return None
    if not (isinstance(loop.target, cst.Name) and isinstance(loop.iter, cst.Name)):
        return None
    return Entry(comp.elt, over=loop.iter.value, target=loop.target)


def call_entries(ctx: ModuleContext, inv: cst.Call, site: Optional[KernelSite] = None) -> list[Entry]:
    """The operands of the kernel call `inv`, each with the `if` it is appended under: a
    positional argument, or the items of `*operands` (see starred_entries, passed_entries)."""
    out: list[Entry] = []
    for a in inv.args:
        entries = passed_entries(ctx, site, a) if site is not None and site.forwarded else None
        if entries is None and a.star == "*" and a.keyword is None:
            entries = starred_entries(ctx, a.value, inv)
        if entries is not None:
            out += entries
        elif a.star or a.keyword is not None:
            raise CallSiteError(
                "the kernel is called with *args or keywords; inputs cannot be matched to refs "
                "(pass the operands by position, or unpack a tuple literal bound just before the call)"
            )
        else:
            out.append(Entry(a.value))
    return out


def passed_entries(ctx: ModuleContext, site: KernelSite, arg: cst.Arg) -> Optional[list[Entry]]:
    """`)(*args)` in a helper each of whose calls passes its kernel with its own specs
    (KernelSite.forwarded), `args` a parameter it hands on untouched: the items of the tuple
    literal that call passes for it (`_call(kernel, (q, k, v), ...)`), read where that call stands."""
    if arg.star != "*" or arg.keyword is not None:
        return None
    passed = passed_for(ctx, site, arg.value)
    items = elements(passed) if passed is not None else None
    return [Entry(i) for i in items] if items is not None else None


def starred_entries(ctx: ModuleContext, star: cst.BaseExpression, at: cst.CSTNode) -> Optional[list[Entry]]:
    """The entries of `*star` at the call `at`: the items of a tuple literal
    (rewrite.callsite.spelling.built_lists), else of a list built under `if`s; None when neither."""
    items = starred_items(ctx, star, at)
    if items is not None:
        return [Entry(i) for i in items]
    if _is_own_varargs(ctx, star, at):
        return [Entry(star, over=star.value)]
    built = conditional_entries(ctx, star, at, operands=True)
    return built[0] if built is not None else None


def _is_own_varargs(ctx: ModuleContext, star: cst.BaseExpression, at: cst.CSTNode) -> bool:
    """`hs` in `f(x, *hs)` inside `def wrapper(x, *hs)`, never rebound there."""
    fn = ctx.enclosing_function(at)
    param = fn.params.star_arg if fn is not None else None
    return (
        isinstance(star, cst.Name) and isinstance(param, cst.Param) and param.name.value == star.value
        and ctx.scope_of(at) is fn and not ctx.assignments(star.value, fn)
    )


def _statement_entries(stmt: cst.CSTNode, name: str) -> Optional[tuple[list[Entry], set[int], set[int]]]:
    """What one statement adds to the list `name`: (entries, ids of the names read, ids of the
    changing statements); None when it touches the list another way."""
    change = list_change(stmt, name)
    if change is not None:
        return [Entry(v) for v in change[0]], {change[1]}, {id(stmt)}
    if isinstance(stmt, cst.If) and stmt.orelse is None and isinstance(stmt.body, cst.IndentedBlock):
        entries, reads, changes = [], set(), set()
        for inner in stmt.body.body:
            found = list_change(inner, name)
            if found is not None:
                entries += [Entry(v, stmt.test) for v in found[0]]
                reads.add(found[1])
                changes.add(id(inner))
            elif _mentions(inner, name):
                return None
        if _mentions(stmt.test, name):
            return None
        return entries, reads, changes
    if isinstance(stmt, cst.For) and _mentions(stmt, name):
        return _loop_entry(stmt, name)
    return None if _mentions(stmt, name) else ([], set(), set())


def _loop_entry(loop: cst.For, name: str) -> Optional[tuple[list[Entry], set[int], set[int]]]:
    """`for h in hs: name.append(spec)`, the append its whole body: one group entry."""
    body = loop.body.body if isinstance(loop.body, cst.IndentedBlock) else ()
    change = list_change(body[0], name) if len(body) == 1 else None
    if change is None or len(change[0]) != 1 or loop.orelse is not None or loop.asynchronous is not None:
        return None
    if not (isinstance(loop.target, cst.Name) and isinstance(loop.iter, cst.Name)) or _mentions(loop.iter, name):
        return None
    return [Entry(change[0][0], over=loop.iter.value, target=loop.target)], {change[1]}, {id(body[0])}


def _mentions(node: cst.CSTNode, name: str) -> bool:
    return any(isinstance(n, cst.Name) and n.value == name for n in walk(node))


def _stable(ctx: ModuleContext, expr: cst.BaseExpression, scope) -> bool:
    """Every name `expr` reads is bound at most once in `scope`, so it means the same wherever
    it is read there (at the append, at the partial's keyword, at the call)."""
    return all(len(ctx.assignments(n.value, scope)) <= 1 for n in walk(expr) if isinstance(n, cst.Name))


def _block_of(ctx: ModuleContext, stmt: Optional[cst.CSTNode]) -> list:
    parent = ctx.parent(stmt) if stmt is not None else None
    return list(getattr(parent, "body", ())) if parent is not None else []


def misaligned(ctx: ModuleContext, operands: list[Entry], specs: list[Entry], what: str) -> Optional[str]:
    """Why `specs` does not follow `operands` entry by entry under the same tests (None: it does)."""
    if len(operands) != len(specs):
        return f"{what} has {len(specs)} entries for {len(operands)} operands (counting every conditional one)"
    for k, (op, spec) in enumerate(zip(operands, specs)):
        if op.over != spec.over:
            return (
                f"entry {k} of {what} is {_group_words(spec)} but its operand {_group_words(op)}; build the specs of "
                "`*args` operands with `for h in args: in_specs.append(...)` over the same name"
            )
        if test_text(ctx, op.test) != test_text(ctx, spec.test):
            return (
                f"entry {k} of {what} is appended under `{test_text(ctx, spec.test) or 'no if'}` but its operand under "
                f"`{test_text(ctx, op.test) or 'no if'}`; append each spec under the same `if` as its operand"
            )
    return None


def _group_words(entry: Entry) -> str:
    return f"one per item of `{entry.over}`" if entry.over is not None else "a single entry"


def test_text(ctx: ModuleContext, test: Optional[cst.BaseExpression]) -> Optional[str]:
    return None if test is None else ctx.code(test).strip()
