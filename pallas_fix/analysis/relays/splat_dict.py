"""pallas_call settings handed over as `**kwargs`, `kwargs` a dict literal with string keys bound
once in the function holding the call (a launcher's `make_pallas_call`):

    kwargs = {"grid": grid, "in_specs": whole_specs(n_in), "out_shape": out_shape}
    if config.backend == "triton":
        kwargs["compiler_params"] = pltriton.CompilerParams(num_warps=4)
    return pl.pallas_call(kernel, **kwargs)

Each entry is read as the keyword it names, its value where it is written. A later
`kwargs["key"] = value` statement to another key is read too: as a setting when it runs on every
call, and as a conditional one (with its `if` test) otherwise, which discovery counts only where it
can read the test (analysis.relays.static_test). Anything else (a key written twice, a dict built
by a loop or `kwargs.update`, `**` of a parameter, another read of the dict) is not read: `why` says
so, and the call's settings stay unknown."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import libcst as cst

from pallas_fix.analysis.context import ModuleContext, walk
from pallas_fix.core import names as N


@dataclass
class SplatDict:
    """What `**name` hands the call: `settings` always, `conditional` (keyword, value, the `if`
    tests it sits under) only on some runs; or `why` it is not read."""

    settings: list[cst.Arg] = field(default_factory=list)
    conditional: list[tuple[str, cst.BaseExpression, tuple[cst.BaseExpression, ...]]] = field(default_factory=list)
    why: str = ""


def splat_dict(ctx: ModuleContext, arg: cst.Arg, call: cst.Call) -> Optional[SplatDict]:
    """The settings of `**name` in `call` where `name` is bound to a dict literal in the call's
    scope; None when `name` is no such binding (another reader may know it)."""
    name = arg.value
    if arg.star != "**" or not isinstance(name, cst.Name):
        return None
    scope = ctx.scope_of(call)
    value = ctx.resolve_value(name, call)
    if not isinstance(value, cst.Dict) or ctx.scope_of(value) is not scope:
        return None
    label = f"`**{name.value}`"
    if len(ctx.assignments(name.value, scope)) != 1:
        return SplatDict(why=f"{label}: `{name.value}` is bound more than once")
    out, keys = SplatDict(), set()
    for element in value.elements:
        key = _key(element.key) if isinstance(element, cst.DictElement) else None
        if key is None or key in keys:
            return SplatDict(why=f"{label}: the dict has an entry that is not a new string key (`**` of another dict, "
                                 "a computed or repeated key)")
        keys.add(key)
        out.settings.append(_arg(key, element.value))
    binding = ctx.parent(value)
    targets = [t.target for t in binding.targets] if isinstance(binding, cst.Assign) else []
    for node in walk(scope):
        if not isinstance(node, cst.Name) or node.value != name.value or node is name:
            continue
        if any(t is node for t in targets):
            continue  # the name the dict is bound to
        written = _subscript_write(ctx, node)
        if written is None:
            return SplatDict(why=f"{label}: `{name.value}` is also read or changed on line {ctx.span(node).line} "
                                 "(only `kwargs[\"key\"] = value` to a new key is read)")
        key, assigned = written
        if ctx.span(assigned).line >= ctx.span(call).line:
            return SplatDict(why=f"{label}: \"{key}\" is written after the call (line {ctx.span(node).line})")
        if key in keys:
            return SplatDict(why=f"{label}: the key \"{key}\" is written twice (line {ctx.span(node).line})")
        keys.add(key)
        tests = _tests_between(ctx, assigned, scope)
        if tests is None:
            return SplatDict(why=f"{label}: \"{key}\" is set inside a loop or `try` (line {ctx.span(node).line})")
        if tests:
            out.conditional.append((key, assigned.value, tests))
        else:
            out.settings.append(_arg(key, assigned.value))
    return out


def _key(node: cst.BaseExpression) -> Optional[str]:
    if isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None


def _arg(key: str, value: cst.BaseExpression) -> cst.Arg:
    """A keyword argument standing for the entry: its value is the entry's own node (what a lift
    reads and edits), the Arg itself a stand-in no edit targets."""
    return cst.Arg(value=value, keyword=cst.Name(key))


def _subscript_write(ctx: ModuleContext, name: cst.Name) -> Optional[tuple[str, cst.Assign]]:
    """`name["key"] = value` as a whole statement: (key, the Assign)."""
    sub = ctx.parent(name)
    target = ctx.parent(sub)
    assign = ctx.parent(target)
    if not (isinstance(sub, cst.Subscript) and sub.value is name and isinstance(target, cst.AssignTarget)
            and isinstance(assign, cst.Assign) and len(assign.targets) == 1 and len(sub.slice) == 1):
        return None
    index = sub.slice[0].slice
    key = _key(index.value) if isinstance(index, cst.Index) else None
    return (key, assign) if key is not None else None


def _tests_between(ctx: ModuleContext, node: cst.CSTNode, scope) -> Optional[tuple[cst.BaseExpression, ...]]:
    """The `if` tests `node` runs under inside `scope` (innermost last); None under a loop, `try`
    or `with`, or in the `else` of an `if` (whose test would have to be negated)."""
    tests: list[cst.BaseExpression] = []
    child: cst.CSTNode = node
    for anc in ctx.ancestors(node):
        if anc is scope:
            break
        if isinstance(anc, (cst.For, cst.While, cst.Try, cst.With, cst.FunctionDef, cst.Lambda)):
            return None
        if isinstance(anc, cst.If):
            if child is not anc.body:
                return None
            tests.append(anc.test)
        if isinstance(anc, cst.Else):
            return None
        child = anc
    return tuple(reversed(tests))


def splatted_settings(ctx: ModuleContext, arg: cst.Arg, call: cst.Call) -> Optional[list[cst.Arg]]:
    """The keyword arguments of `**grid_spec` in `call`, where `grid_spec = dict(grid=..., ...)`
    is bound once in the call's scope and read nowhere else (so an edit of one of them changes
    only this call); None for any other `**`."""
    name = arg.value
    if arg.star != "**" or not isinstance(name, cst.Name):
        return None
    value = ctx.resolve_value(name, call)
    if not (isinstance(value, cst.Call) and isinstance(value.func, cst.Name) and value.func.value == "dict"):
        return None
    scope = ctx.scope_of(call)
    mentions = [n for n in walk(scope) if isinstance(n, cst.Name) and n.value == name.value]
    if len(ctx.assignments(name.value, scope)) != 1 or len(mentions) != 2 or ctx.scope_of(value) is not scope:
        return None  # rebound, changed or read elsewhere (`grid_spec["grid"] = ...`)
    if not all(a.keyword is not None and not a.star for a in value.args):
        return None
    return list(value.args)


def splat_problem(ctx: ModuleContext, call: cst.Call) -> Optional[str]:
    """Why some `**` argument of `call` hands it settings pallas-fix cannot read, or None."""
    for a in call.args:
        if a.star != "**":
            continue
        splat = splat_dict(ctx, a, call)
        if splat is not None and splat.why:
            return (f"pallas_call gets settings through {splat.why}; pass them as keywords, or a dict literal bound "
                    "once, later writing only new string keys")
        if splat is None and splatted_settings(ctx, a, call) is None:
            return ("pallas_call gets settings through `**` that pallas-fix cannot read; pass them as keywords, or `**` a "
                    "`dict(...)` or dict literal bound once just for this call")
    return None


def made_keywords(ctx: ModuleContext, arg: cst.Arg, at: cst.CSTNode) -> Optional[list[cst.Arg]]:
    """The keywords `**shape()` hands a kernel's `functools.partial`, where `shape` is bound once to
    `functools.partial(dict, key=value, ...)` (CAX's shared kernel settings) or the call is
    `dict(key=value, ...)` itself: the partial's keywords, then the call's; None for anything else
    (positional or `**` arguments inside, a name bound twice), whose keywords stay unknown."""
    value = arg.value
    if arg.star != "**" or not isinstance(value, cst.Call):
        return None
    func, made = value.func, list(value.args)
    if isinstance(func, cst.Name) and func.value != "dict":
        if len(ctx.assignments(func.value, ctx.scope_of(at))) != 1:
            return None
        bound = ctx.resolve_value(func, at)
        if not (isinstance(bound, cst.Call) and ctx.imports.is_(bound.func, N.PARTIAL) and bound.args
                and isinstance(bound.args[0].value, cst.Name) and bound.args[0].value.value == "dict"):
            return None
        made = list(bound.args[1:]) + made
    elif not isinstance(func, cst.Name):
        return None
    if not all(a.keyword is not None and not a.star for a in made):
        return None
    return made


def dict_keywords(ctx: ModuleContext, arg: cst.Arg, at: cst.Call) -> Optional[list[cst.Arg]]:
    """The keywords `**kernel_kwargs` hands a kernel's `functools.partial` (`at`), where
    `kernel_kwargs` resolves there to a dict literal with new string keys (bound once, or, while a
    variant is planned, once in its arm: ctx.arm_pin) that nothing but its bindings and this
    argument mentions, so no `kernel_kwargs["k"] = v` or `.update` changes it first; None otherwise."""
    name = arg.value
    if arg.star != "**" or not isinstance(name, cst.Name):
        return None
    value = ctx.resolve_value(name, at)
    scope = ctx.scope_of(at)
    if not isinstance(value, cst.Dict) or ctx.scope_of(value) is not scope or not _only_bound(ctx, name, scope):
        return None
    entries = _string_entries(value)
    if entries is None or len({k for k, _ in entries}) < len(entries):
        return None
    return [_arg(key, v) for key, v in entries]


def dict_keys(ctx: ModuleContext, arg: cst.Arg, at: cst.Call) -> Optional[frozenset[str]]:
    """Every key `**name` in `at` may hand over, where each binding of `name` in `at`'s scope is a
    dict literal with string keys and nothing else mentions `name` (so no key is added later); None
    otherwise. What a keyword added beside it must not collide with, whichever arm bound it."""
    name = arg.value
    if arg.star != "**" or not isinstance(name, cst.Name):
        return None
    scope = ctx.scope_of(at)
    values = ctx.assignments(name.value, scope)
    if not values or not all(isinstance(v, cst.Dict) for v in values) or not _only_bound(ctx, name, scope):
        return None
    keys: set[str] = set()
    for v in values:
        entries = _string_entries(v)  # type: ignore[arg-type]
        if entries is None:
            return None
        keys.update(k for k, _ in entries)
    return frozenset(keys)


def _only_bound(ctx: ModuleContext, splat: cst.Name, scope) -> bool:
    """Nothing in `scope` mentions the dict's name but its bindings and the `**` argument itself."""
    bound = {id(t.target) for v in ctx.assignments(splat.value, scope) if isinstance(b := ctx.parent(v), cst.Assign)
             for t in b.targets}
    return not any(isinstance(n, cst.Name) and n.value == splat.value and n is not splat and id(n) not in bound
                   for n in walk(scope))


def _string_entries(value: cst.Dict) -> Optional[list[tuple[str, cst.BaseExpression]]]:
    """(key, value) of each entry of a dict literal whose keys are all strings; None for any other."""
    out = []
    for element in value.elements:
        key = _key(element.key) if isinstance(element, cst.DictElement) else None
        if key is None:
            return None
        out.append((key, element.value))
    return out
