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
from pallas_fix.core import names as N
from pallas_fix.core.model import KernelSite
from pallas_fix.rewrite.callsite.spelling.built_lists import list_change, mutates, starred_items
from pallas_fix.rewrite.callsite.spelling.chosen_lists import chosen_items
from pallas_fix.rewrite.callsite.call_timing import operand_change
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
    `+` of such parts, `[spec for h in hs]` and `[spec] * len(hs)` (a group each); with
    `operands`, also tuple literals and choices of two literals (_choice_entries)."""
    if isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Add):
        left, right = _value_entries(value.left, operands=operands), _value_entries(value.right, operands=operands)
        return left + right if left is not None and right is not None else None
    if operands and isinstance(value, cst.IfExp):
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
        if items is None or len(items) != 1 or not _is_len_of_name(count):
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


def _comprehension_entry(comp) -> Optional[Entry]:
    """`[spec for h in hs]`: one plain `for` over a name, no `if`s."""
    loop = comp.for_in
    if loop.inner_for_in is not None or loop.ifs or loop.asynchronous is not None:
        return None
    if not (isinstance(loop.target, cst.Name) and isinstance(loop.iter, cst.Name)):
        return None
    return Entry(comp.elt, over=loop.iter.value, target=loop.target)


def _is_len_of_name(node: cst.BaseExpression) -> bool:
    return (
        isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value == "len"
        and len(node.args) == 1 and not node.args[0].star and isinstance(node.args[0].value, cst.Name)
    )


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


def conditional_in_specs(cs, spec: Optional[cst.BaseExpression]) -> cst.BaseExpression:
    """The in_specs of a CallSite whose operands are appended under `if`s, built the same way
    entry by entry: its items go to `cs.built`, the names its building statements read to
    `cs.builder_reads`."""
    if not isinstance(cs.site.kernel.params.star_arg, cst.Param):
        raise CallSiteError("the operands come from `*args` or are appended under `if`s, but the kernel takes a fixed list of refs; take them as `*refs`")
    how = (
        "build in_specs beside the operands: append each spec under the same `if` as its operand, and those of "
        "`*args` with `for a in args: in_specs.append(...)`"
    )
    if spec is None:
        cs.default_tail = _whole_tail(cs, how)
        return None
    built = conditional_entries(cs.ctx, spec, spec)  # read up to where the call (or its `dict(...)`) takes it
    tail = _read_whole_tail(cs, spec) if built is None else None
    if tail is not None:
        cs.default_tail, cs.built["in_specs"] = tail
        return spec
    if built is None:
        raise CallSiteError(
            f"the operands are appended under `if`s or passed as `*args`, but in_specs is not built so "
            f"({_spec_words(cs, spec)}); {how}"
        )
    why = misaligned(cs.ctx, cs.operand_entries[cs.num_prefetch :], built[0], "in_specs")
    if why is not None:
        raise CallSiteError(why)
    if any(id(r) not in built[1] for r in cs.other_reads(spec, within_call=False)):
        raise CallSiteError(f"`{cs.ctx.code(spec)}` (in_specs) is also used elsewhere; give this pallas_call its own in_specs")
    for slot in cs.slots.values():
        if slot.kind == "in" and built[0][slot.index].over is not None:
            slot.arg = built[0][slot.index].target  # `h` of `for h in hs:`: the group's array where its spec is written
            loop = cs.ctx.parent(slot.arg)
            passed = cs.operand_entries[cs.num_prefetch + slot.index].value  # `hs` as the kernel call spreads it
            why = operand_change(cs.ctx, cs.site, passed, loop.iter, "the loop that builds its specs") if isinstance(loop, (cst.For, cst.CompFor)) else None
            if why is not None:
                raise CallSiteError(why)
    cs.built["in_specs"] = [e.value for e in built[0]]
    cs.builder_reads |= built[1]
    return spec


def _spec_words(cs, spec: cst.BaseExpression) -> str:
    """What the in_specs a conditional operand list comes with is, for the refusal: its text, and
    why a repetition sized by the operands cannot take one operand's new spec."""
    value = cs.ctx.resolve_value(spec, cs.site.call)
    text = " ".join(cs.ctx.code(value).split())
    text = text if len(text) <= 100 else text[:97] + "..."
    sized = any(isinstance(n, cst.Call) and _is_len_of_name(n) for n in walk(value))
    why = ", a repetition whose count is computed from the operands' length: no entry of it is one operand's" if sized else ""
    return f"it is `{text}`{why}"


def _is_own_varargs(ctx: ModuleContext, star: cst.BaseExpression, at: cst.CSTNode) -> bool:
    """`hs` in `f(x, *hs)` inside `def wrapper(x, *hs)`, never rebound there."""
    fn = ctx.enclosing_function(at)
    param = fn.params.star_arg if fn is not None else None
    return (
        isinstance(star, cst.Name) and isinstance(param, cst.Param) and param.name.value == star.value
        and ctx.scope_of(at) is fn and not ctx.assignments(star.value, fn)
    )


def _whole_tail(cs, how: str) -> tuple[str, int, int]:
    """For a call with no in_specs (every operand whole): (the starred list `operands`, how many
    of its items come before its first variable entry, that entry's index). A new in_specs then
    writes its fixed entries and `[pl.BlockSpec()] * (len(operands) - j)` for the rest, so it
    follows the operand list whatever its length (see whole_tail_specs)."""
    first = next(k for k, e in enumerate(cs.operand_entries) if e.variable)
    offset = 0
    for a in cs.site.invocation.args:
        count = len(starred_entries(cs.ctx, a.value, cs.site.invocation) or []) if a.star == "*" else 1
        if offset <= first < offset + count:
            if a is not cs.site.invocation.args[-1] or not isinstance(a.value, cst.Name) or cs.num_prefetch:
                break
            return a.value.value, first - offset, first
        offset += count
    raise CallSiteError(f"the operands are appended under `if`s or passed as `*args`, and the call has no in_specs; {how}")


def _read_whole_tail(cs, spec: cst.BaseExpression):
    """`[x_spec] + [pl.BlockSpec()] * (len(operands) - 1)` as whole_tail_specs writes it: the tail
    and one spec node per operand (the tail's whole-array spec standing for each of the rest)."""
    value = cs.ctx.resolve_value(spec, cs.site.call)
    head, rest = (value.left, value.right) if isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Add) else (None, value)
    items = elements(head) if isinstance(head, cst.List) else ([] if head is None else None)
    repeated = elements(rest.left) if isinstance(rest, cst.BinaryOperation) and isinstance(rest.operator, cst.Multiply) and isinstance(rest.left, cst.List) else None
    if items is None or repeated is None or len(repeated) != 1 or not _is_plain_block_spec(cs, repeated[0]):
        return None
    try:
        tail = _whole_tail(cs, "")
    except CallSiteError:
        return None
    name, before, first = tail
    count = f"len({name})" + (f" - {before}" if before else "")
    if len(items) != first or cs.ctx.code(rest.right).strip().strip("()") != count:
        return None
    return tail, items + [repeated[0]] * (len(cs.operand_entries) - first)


def _is_plain_block_spec(cs, node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Call) and not node.args and cs.ctx.imports.is_(node.func, N.BLOCK_SPEC)


def refuse_shared_tail(cs, kind: str, index: int) -> None:
    """An edit of one operand's spec inside the whole-array tail would change every operand's."""
    if kind == "in" and cs.default_tail is not None and index >= cs.default_tail[2]:
        raise CallSiteError(
            "the rewrite blocks an optional or `*args` operand whose spec is the shared whole-array tail; build in_specs "
            "beside the operands, appending each spec where its operand is appended"
        )


def whole_tail_specs(cs, texts: dict[int, str], blocked: set[int], plain_whole: str) -> str:
    """The new in_specs of a call that had none, when its operands are appended under `if`s or
    passed as `*args`: the fixed entries' specs, then one whole-array spec per remaining operand."""
    name, before, first = cs.default_tail
    if any(k >= first for k in blocked) or sorted(k for k in texts if k < first) != list(range(first)):
        raise CallSiteError(
            "a ref the rewrite blocks is an optional or `*args` operand (or an operand before them has no kernel name); "
            "build in_specs beside the operands, appending each spec where its operand is appended"
        )
    count = f"len({name})" + (f" - {before}" if before else "")
    tail = f"[{plain_whole}] * " + (f"({count})" if before else count)
    head = "[" + ", ".join(texts[k] for k in range(first)) + "]"
    return f"{head} + {tail}" if first else tail


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
