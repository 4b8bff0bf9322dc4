"""Plans for a kernel passed into a helper with its own grid and specs, screened for what the
helper's calls share.

`def call_kernel(*, kernel, grid, in_specs, out_specs): return pl.pallas_call(kernel, grid=grid,
...)`, called once per kernel with that kernel's grid and specs: discovery points each kernel's
site at its own call's arguments (analysis.relays.passed_in.forward_keywords), so a lift edits
them there. One pallas_call still runs both kernels, and anything else the calls share must stay
as it is, or the other kernel would run with the lift of this one:

- the helper itself (its pallas_call, the operand tuple, a grid or spec built inside it);
- what another call reads: its own statement, and every statement in its scope that binds or
  builds a name it reads (`dq_specs = specs.copy()`, `dq_specs.append(...)`, `specs = [...]`),
  for the helper's other calls and every other pallas_call of the module alike;
- and the lift must write nothing outside the helper that names a parameter or local of it
  (`y.shape[1]` copied from the helper's out_shape means another array, or nothing, there).

A call that passes a copy of a shared list (`dq_specs = specs.copy()`) gets a new spec for an
item of the shared part on its copy (`dq_specs[1] = pl.BlockSpec(...)` just before the call:
`copied_slot`, `set_before`), so the shared list itself stays as it is.

Each plan is applied and compared with the original text; one that changes a shared statement is
refused, saying what it would change and what the user could do. The engine calls `screen`
once per analysis.
"""

from __future__ import annotations

import re
import weakref
from collections import Counter
from typing import Callable, Iterator, Optional

import libcst as cst

from pallas_fix.analysis.context import ModuleContext, walk
from pallas_fix.analysis.relays.passed_in import free_names, outer_call, own_names
from pallas_fix.analysis.relays.relay_chain import chain_note
from pallas_fix.analysis.effects.evaluator import scope_names
from pallas_fix.analysis.effects.syntax import param_names
from pallas_fix.core.model import KernelSite
from pallas_fix.core.plans import Anchor, FixAfter, FixPlan, Outcome, Refusal
from pallas_fix.rewrite.callsite.spec_params import threaded_helpers
from pallas_fix.rewrite.callsite.spelling.built_lists import copied_list, set_item

# Methods that build a list in place: a statement `specs.append(...)` builds `specs`.
_BUILDERS = frozenset({"append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse", "__setitem__"})


def screen(analysis, outcomes: dict[Anchor, list[Outcome]], apply: Callable[[cst.Module, FixPlan], str]) -> dict[Anchor, list[Outcome]]:
    """`outcomes` with every plan of a forwarded site that changes what the helper's calls share
    replaced by a refusal saying why. `apply`: the engine's plan application (the text it writes)."""
    verdicts: dict[int, Outcome] = {}
    # Several findings' plans of one kernel often write the same text (rwkv7: 44 plans through
    # a launcher chain): each text is screened once per site.
    seen: dict[tuple[int, str], Optional[str]] = {}
    for items in outcomes.values():
        for outcome in items:
            plan = outcome.first if isinstance(outcome, FixAfter) else outcome
            if isinstance(plan, FixPlan) and plan.site is not None and plan.site.forwarded and id(plan) not in verdicts:
                reason = _shared_change(analysis, plan.site, lambda: apply(analysis.ctx.module, plan), seen)
                verdicts[id(plan)] = plan if reason is None else Refusal(plan.codemod, reason)
                if reason is None:
                    plan.description += chain_note(analysis.ctx, plan.site)
    if not verdicts:
        return outcomes

    def judged(outcome: Outcome) -> Outcome:
        plan = outcome.first if isinstance(outcome, FixAfter) else outcome
        verdict = verdicts.get(id(plan), plan)
        return outcome if verdict is plan else verdict

    return {key: [judged(o) for o in items] for key, items in outcomes.items()}


def copied_slot(cs, kind: str, index: int) -> Optional[tuple[cst.SimpleStatementLine, str]]:
    """(the statement holding the helper's call, the name of the list it passes) when that call
    passes a copy (`dq_specs = specs.copy()` then appends) as the `kind` specs and slot `index`'s
    spec is an item of the list copied: the new spec goes on the copy, before that call. None
    otherwise (the item is the copy's own, appended to it, or the list is not such a copy)."""
    site, ctx = cs.site, cs.ctx
    passed = site.kw(f"{kind}_specs")
    if f"{kind}_specs" not in site.forwarded or site.passed_by is None or cs.conditional or not isinstance(passed, cst.Name):
        return None
    copy = ctx.resolve_value(passed, site.passed_by)
    if copied_list(copy) is None or ctx.scope_of(copy) is not ctx.scope_of(site.passed_by):
        return None
    items = cs.spec_items(kind)
    item = items[index] if items is not None and index < len(items) else None
    if item is None or isinstance(item, cst.IfExp):  # `None if c else spec`: the arm is the slot's only under a condition
        return None
    holder = ctx.statement_of(item)
    if holder is None or any(isinstance(n, cst.Name) and n.value == passed.value for n in walk(holder)):
        return None  # appended to the copy itself: this call's own
    anchor = ctx.statement_of(site.passed_by)
    if not isinstance(anchor, cst.SimpleStatementLine):
        return None
    return _first_later_set(ctx, anchor, passed.value, index), passed.value


def _first_later_set(ctx: ModuleContext, anchor: cst.SimpleStatementLine, name: str, index: int) -> cst.SimpleStatementLine:
    """Where `name[index] = ...` goes so the sets an earlier lift wrote just before the call
    stay in slot order: before the first of them that sets a later slot, else before the call."""
    block = list(getattr(ctx.parent(anchor), "body", ()))
    at = block.index(anchor) if anchor in block else 0
    first = anchor
    while at > 0 and (put := set_item(block[at - 1], name)) is not None and put[0] > index:
        at -= 1
        first = block[at]
    return first


def set_before(statement: str):
    """An edit of a statement that puts `statement` before it (after any an earlier edit put
    there: chained, it gets that edit's FlattenSentinel)."""
    line = cst.parse_statement(statement)

    def edit(out: cst.CSTNode) -> cst.CSTNode:
        rest = list(out.nodes) if isinstance(out, cst.FlattenSentinel) else [out]
        # the statement's comments and blank lines stay above what is put before it
        first = line.with_changes(leading_lines=rest[-1].leading_lines)
        return cst.FlattenSentinel([*rest[:-1], first, rest[-1].with_changes(leading_lines=())])

    return edit


def copy_read(ctx: ModuleContext, read: cst.Name) -> bool:
    """`other = specs.copy()`: a read of `specs` that leaves it as it is. Where the helper's calls
    pass their own specs, another call's copy does not make the list shared: what a lift edits
    in it is screened here."""
    attr = ctx.parent(read)
    call = ctx.parent(attr) if isinstance(attr, cst.Attribute) and attr.value is read else None
    return isinstance(call, cst.Call) and attr.attr.value == "copy" and not call.args


def shadowed_read(ctx: ModuleContext, read: cst.Name, scope) -> bool:
    """`read` sits in a function nested in `scope` that binds its name itself (the helper's
    `in_specs=in_specs` reads its own parameter, not the wrapper's list)."""
    inner = ctx.scope_of(read)
    while inner is not scope and isinstance(inner, (cst.FunctionDef, cst.Lambda)):
        params = param_names(inner) if isinstance(inner, cst.FunctionDef) else {p.name.value for p in inner.params.params}
        if read.value in params or (isinstance(inner, cst.FunctionDef) and read.value in scope_names(ctx, inner)):
            return True
        inner = ctx.scope_of(inner)
    return False


def _shared_change(analysis, site: KernelSite, rewritten: Callable[[], str],
                   seen: dict[tuple[int, str], Optional[str]]) -> Optional[str]:
    """Why the plan's text changes something the helper's other calls share, or None; `seen`
    holds what each (site, text) screened to."""
    helper = analysis.ctx.enclosing_function(site.call)
    if helper is None or site.passed_by is None:
        return None
    try:
        text = rewritten()
    except Exception:  # noqa: BLE001 - a plan that does not apply is the engine's to report
        return None
    key = (id(site), text)
    if key not in seen:  # a text seen before parsed then: parsed once
        try:
            new = cst.parse_module(text)
        except Exception:  # noqa: BLE001
            return None
        seen[key] = _shared_in(analysis, site, helper, new)
    return seen[key]


def _shared_in(analysis, site: KernelSite, helper: cst.FunctionDef, new: cst.Module) -> Optional[str]:
    """`_shared_change` of the plan's parsed text `new`."""
    ctx: ModuleContext = analysis.ctx
    # The helpers as every call shares them once the lift is applied: with the spec parameters the
    # lift threads through them (rewrite.callsite.spec_params), else as they are; through a chain
    # of helpers, every one of them (the outermost call's function last).
    threaded = threaded_helpers(ctx, site)
    name = threaded[-1][0].name.value
    old_lines = _module_lines(ctx)
    for fn, done in threaded:
        old_lines += Counter(_statements(cst.Module(body=[done])))
        old_lines -= Counter(_statements(cst.Module(body=[fn])))
    new_keyed = _keyed(new)  # each statement's key computed once: codegen is most of the screen's time
    new_lines = Counter(k for _, k in new_keyed)
    others = [s for s in analysis.sites if s.call is site.call and s.passed_by is not None and s is not site]
    protected = [(_key(done), f"`{fn.name.value}` (line {ctx.span(fn).line}), whose pallas_call runs every kernel passed in"
                  if fn is helper else f"`{fn.name.value}` (line {ctx.span(fn).line}), which hands every kernel on to the pallas_call")
                 for fn, done in threaded]
    # This kernel's own call may take its specs even where another call reads what it returns
    # (`s = _call(...)` then `_call(..., (s, y), ...)`): the lift keeps the value it binds.
    own = _own_call_statement(ctx, outer_call(site))
    for other in others:
        what = f"the call of `{name}` on line {ctx.span(outer_call(other)).line} (passing `{other.kernel_name}`) reads"
        protected += [(_key(stmt), f"`{_short(_text(stmt))}` (line {ctx.span(stmt).line}), which {what}")
                      for stmt in _read_statements(ctx, outer_call(other)) if stmt is not own]
    # Any other pallas_call of the module too: a list both copy (`plain = specs.copy()`) is shared
    # with it as with the helper's calls, and reading.py lets a forwarded site's lift edit it.
    for call in {id(s.call): s.call for s in analysis.sites if s.call is not site.call}.values():
        what = f"the pallas_call on line {ctx.span(call).line} reads"
        protected += [(_key(stmt), f"`{_short(_text(stmt))}` (line {ctx.span(stmt).line}), which {what}") for stmt in _read_statements(ctx, call)]
    for text, what in protected:
        if new_lines[text] < old_lines[text]:
            return (f"lifting `{site.kernel_name}` would change {what}; what the calls of `{name}` share must "
                    "stay as it is: the other kernels would run with this kernel's grid or BlockSpecs. Pass the grid and "
                    f"spec lists into `{name}` from each call, each call its own, or a copy of a shared list "
                    "(`specs.copy()`) whose shared items are plain BlockSpecs (pallas-fix then sets the new spec on "
                    "the copy), to get this fix")
    return _helper_names_written(ctx, site, helper, new, new_keyed)


def _helper_names_written(ctx: ModuleContext, site: KernelSite, helper: cst.FunctionDef, new: cst.Module,
                          new_keyed: Optional[list[tuple[cst.CSTNode, str]]] = None) -> Optional[str]:
    """Why the lift writes, outside the helper (its call's arguments, a spec set on a copy), a name
    that is a parameter or local of the helper, which means something else there; or None.
    `new_keyed`: `_keyed(new)`, when the caller has it."""
    name = helper.name.value
    old_texts = _module_statement_nodes(ctx)
    new_texts = _statement_nodes(new_keyed if new_keyed is not None else _keyed(new))
    added = [n for t, n in new_texts.items() if t not in old_texts]
    removed = [n for t, n in old_texts.items() if t not in new_texts]
    local = set().union(*(own_names(ctx, fn) for fn, _ in threaded_helpers(ctx, site)))  # every helper of a chain
    written = set().union(*map(free_names, added)) - set().union(*map(free_names, removed))
    written &= local
    if written:
        names = ", ".join(f"`{n}`" for n in sorted(written))
        return (f"lifting `{site.kernel_name}` would write {names}, read inside `{name}`, beside its call on line "
                f"{ctx.span(site.passed_by).line}, where {'it names' if len(written) == 1 else 'they name'} something "
                f"else; give the sizes names the wrapper binds (not parameters or locals of `{name}`) to get this fix")
    return None


def _statement_nodes(keyed: list[tuple[cst.CSTNode, str]]) -> dict[str, cst.SimpleStatementLine]:
    """Each simple statement of a module by its text, from its `_keyed`."""
    return {k: n for n, k in keyed if isinstance(n, cst.SimpleStatementLine)}  # type: ignore[misc]


def _module_statement_nodes(ctx: ModuleContext) -> dict[str, cst.SimpleStatementLine]:
    """`_statement_nodes` of the module as it stands, once per module (every plan compares with it)."""
    found = _NODES.get(ctx)
    if found is None:
        found = _NODES[ctx] = _statement_nodes(_module_keyed(ctx))
    return found


def _module_keyed(ctx: ModuleContext) -> list[tuple[cst.CSTNode, str]]:
    """`_keyed` of the module as it stands, once per module."""
    found = _KEYED.get(ctx)
    if found is None:
        found = _KEYED[ctx] = _keyed(ctx.module)
    return found


_KEYED: "weakref.WeakKeyDictionary[ModuleContext, list]" = weakref.WeakKeyDictionary()


_NODES: "weakref.WeakKeyDictionary[ModuleContext, dict[str, cst.SimpleStatementLine]]" = weakref.WeakKeyDictionary()


def _read_statements(ctx: ModuleContext, call: cst.Call) -> list[cst.CSTNode]:
    """The statement holding `call` and every simple statement that binds or builds a name it
    reads, following those statements' own reads. Anywhere in the module, not only in the call's
    scope: a module-level list both calls copy is shared as well, and a statement of another scope
    that binds the same name is one no lift of this kernel changes anyway."""
    first = ctx.statement_of(call)
    found: list[cst.CSTNode] = [first] if first is not None else []
    todo, seen = [(n, call) for n in free_names(call)], set()
    while todo:
        name, reader = todo.pop()
        scopes = ctx.scope_chain(reader)
        if (name, id(scopes[0])) in seen:
            continue
        seen.add((name, id(scopes[0])))
        for stmt in _builders(ctx, name):
            if _visible(ctx, stmt, name, scopes) and all(stmt is not f for f in found):
                found.append(stmt)
                todo += [(n, stmt) for n in free_names(stmt)]
    return found


def _own_call_statement(ctx: ModuleContext, call: cst.Call) -> Optional[cst.CSTNode]:
    """The statement holding `call` when it is nothing but that call (or one constant item of what
    it returns), its value bound to plain names, returned or dropped (`s = _call(...)`); None otherwise."""
    stmt = ctx.statement_of(call)
    body = stmt.body if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 else ()
    small = body[0] if body else None
    value = small.value if isinstance(small, (cst.Assign, cst.Return, cst.Expr)) else None
    if isinstance(value, cst.Subscript) and value.value is call and len(value.slice) == 1 and isinstance(
            value.slice[0].slice, cst.Index) and isinstance(value.slice[0].slice.value, cst.Integer):
        call = value  # `y = run(...)[0]`: one output of it, bound as the call returns it
    if isinstance(small, cst.Assign) and small.value is call and all(
            isinstance(t.target, cst.Name) or (isinstance(t.target, cst.Tuple) and all(isinstance(e.value, cst.Name) for e in t.target.elements))
            for t in small.targets):
        return stmt
    if isinstance(small, (cst.Return, cst.Expr)) and small.value is call:
        return stmt
    return None


def _visible(ctx: ModuleContext, stmt: cst.CSTNode, name: str, scopes: list) -> bool:
    """Can `stmt`'s binding of `name` be what a read in the innermost of `scopes` sees? Not when
    it stands in another function (its locals are its own) that declares no `global` or
    `nonlocal` of the name."""
    scope = ctx.scope_of(stmt)
    if any(scope is s for s in scopes):
        return True
    return any(isinstance(n, (cst.Global, cst.Nonlocal)) and any(a.name.value == name for a in n.names) for n in walk(scope))


def _builders(ctx: ModuleContext, name: str) -> list[cst.SimpleStatementLine]:
    """The simple statements of the module that bind `name` or build it in place."""
    index = _BUILDER_INDEX.get(ctx)
    if index is None:  # once per module: every forwarded plan of a chain asks for the same names
        index = _BUILDER_INDEX[ctx] = {}
        for stmt in ctx.nodes_of(cst.SimpleStatementLine):
            for built in dict.fromkeys(_built_names(stmt)):
                index.setdefault(built, []).append(stmt)  # type: ignore[arg-type]
    return index.get(name, [])


def _built_names(stmt: cst.CSTNode) -> Iterator[str]:
    for node in walk(stmt):
        target = None
        if isinstance(node, (cst.AssignTarget, cst.AugAssign, cst.AnnAssign)):
            target = node.target
        elif isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value in _BUILDERS:
            target = node.func.value
        while isinstance(target, (cst.Subscript, cst.Attribute)):
            target = target.value
        if target is not None:
            yield from (n.value for n in walk(target) if isinstance(n, cst.Name))


_BUILDER_INDEX: "weakref.WeakKeyDictionary[ModuleContext, dict[str, list]]" = weakref.WeakKeyDictionary()


def _module_lines(ctx: ModuleContext) -> Counter:
    """`_statements` of the module as it stands, counted once per module (every plan compares with it)."""
    found = _LINES.get(ctx)
    if found is None:
        found = _LINES[ctx] = Counter(k for _, k in _module_keyed(ctx))
    return Counter(found)


_LINES: "weakref.WeakKeyDictionary[ModuleContext, Counter]" = weakref.WeakKeyDictionary()


def _statements(module: cst.Module) -> Iterator[str]:
    """The text of every simple statement and function def of the module, as compared above."""
    return (k for _, k in _keyed(module))


def _keyed(module: cst.Module) -> list[tuple[cst.CSTNode, str]]:
    """Every simple statement and function def of the module with its `_key`, in walk order."""
    return [(node, _key(node)) for node in walk(module) if isinstance(node, (cst.SimpleStatementLine, cst.FunctionDef))]


def _text(node: cst.CSTNode) -> str:
    return " ".join(cst.Module(body=[]).code_for_node(node).split())


def _key(node: cst.CSTNode) -> str:
    """The node's code less its layout (whitespace, and a trailing comma before a closing bracket,
    which black-style breaking adds): a statement the lift only re-wraps compares equal."""
    code = cst.Module(body=[]).code_for_node(node)
    return re.sub(r"\s+", "", re.sub(r",(\s*[)\]}])", r"\1", code))


def _short(text: str) -> str:
    return text if len(text) <= 60 else text[:57] + "..."
