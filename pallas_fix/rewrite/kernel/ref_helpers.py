"""Helpers the loop hands kernel refs to: `_block(x_ref, o_ref, i, beta)` where
`def _block(src, dst, i, beta): dst[pl.ds(i * bs, bs), :] = f(src[pl.ds(i * bs, bs), :])`.

The helper's accesses through its parameters are accesses to the kernel's refs (the analysis
already binds the parameters to the call's arguments), so they are lifted like the body's own:
their windows become whole blocks inside the helper. That is only one rewrite when the helper
has one caller (this loop); a helper shared with other callers would change for them too. The
index parameter the windows no longer read goes, with its argument.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import libcst as cst

from pallas_fix.analysis.context import ModuleContext, walk
from pallas_fix.core.model import Origin
from pallas_fix.core.plans import Refuse
from pallas_fix.rewrite.text.scopes import bindings
from pallas_fix.rewrite.text.statements import body_statements


@dataclass
class RefHelper:
    fn: cst.FunctionDef
    call: cst.Call
    refs: dict[str, str]  # helper parameter -> the kernel ref it receives
    ref_args: list[cst.Name] = field(default_factory=list)  # the call's arguments that are refs
    # The parameter whose argument moves with the loop (the index, a start, a slice object):
    # once the windows it drives are blocks, nothing may read it, and it goes with its argument.
    index_param: Optional[str] = None
    index_arg: Optional[cst.Arg] = None


def ref_helpers(analysis, site, loop, functions: list) -> list[RefHelper]:
    """Every function the loop's functions (and, transitively, these helpers) call with a ref:
    a kernel ref parameter, or a helper parameter bound to one."""
    return driven_helpers(analysis, site, functions, lambda val: val.origin is Origin.LOOP and val.loop is loop)


def driven_helpers(analysis, site, functions: list, driven) -> list[RefHelper]:
    """The ref helpers `functions` call, each with the parameter whose argument `driven(value)`
    says moves with what the rewrite lifts (a loop's index, `pl.program_id`)."""
    ctx: ModuleContext = analysis.ctx
    kernel = site.kernel
    env = analysis.detection.envs.get(kernel)
    refs_of: dict[int, dict[str, str]] = {id(kernel): {p.name.value: p.name.value for p in kernel.params.params
                                                      if env is not None and env.value(p.name).is_ref}}
    found: list[RefHelper] = []
    frontier = list(functions)
    while frontier:
        fn = frontier.pop(0)
        for call in [n for n in walk(fn) if isinstance(n, cst.Call) and isinstance(n.func, cst.Name)]:
            target = ctx.resolve_def(call.func.value, call)
            if target is None or target is kernel or any(h.fn is target for h in found):
                continue
            moves = _moves_with(analysis, driven, call)
            helper = _helper_call(ctx, call, target, _visible_refs(ctx, call, refs_of, kernel), moves)
            if helper is None:
                continue
            _check_helper(ctx, helper)
            found.append(helper)
            refs_of[id(target)] = helper.refs
            frontier.append(target)
    return found


def _visible_refs(ctx: ModuleContext, node: cst.CSTNode, refs_of: dict[int, dict[str, str]], kernel) -> dict[str, str]:
    """The ref names visible where `node` stands: the innermost helper's parameters, else the
    kernel's ref parameters (the loop body and kernel-local helpers see those)."""
    for anc in ctx.ancestors(node):
        if id(anc) in refs_of and anc is not kernel:
            return refs_of[id(anc)]
    return refs_of[id(kernel)]


def _moves_with(analysis, driven, call: cst.Call):
    """Does an argument of `call` move with what is lifted: a loop index itself, a start built
    from it (`r * bs`) or a slice object (`pl.ds(r * bs, bs)`, a name bound to one, a tuple)?"""
    env = None
    for anc in analysis.ctx.ancestors(call):
        env = analysis.detection.envs.get(anc)
        if env is not None:
            break

    def moves(expr: cst.BaseExpression) -> bool:
        if env is None:
            return False
        val = env.value(expr)
        return driven(val) and not val.is_ref

    return moves


def _helper_call(ctx: ModuleContext, call: cst.Call, target: cst.FunctionDef, refs: dict[str, str], moves) -> Optional[RefHelper]:
    """The call bound to the helper's parameters, when it passes a ref; None otherwise."""
    ref_args = [a for a in call.args if isinstance(a.value, cst.Name) and a.value.value in refs]
    # A function nested in the kernel sees its refs without being passed them: handed what moves
    # (`_neg(pl.ds(r * bs, bs))`), its windows are lifted too, so it is a ref helper as well.
    closure = ctx.scope_of(target) is not ctx.module and any(moves(a.value) for a in call.args)
    if not ref_args and not closure:
        return None
    name = target.name.value
    if any(a.star for a in call.args) or isinstance(target.params.star_arg, cst.Param) or target.params.star_kwarg is not None:
        raise Refuse(f"`{name}` receives a ref through `*args` / `**kwargs`; pallas-fix cannot tell which parameter holds it")
    if target.decorators:
        raise Refuse(f"`{name}` receives a ref and is decorated; pallas-fix cannot see what the decorator does with it")
    positional = list(target.params.posonly_params) + list(target.params.params)
    bound: dict[str, cst.Arg] = {}
    pos_args = [a for a in call.args if a.keyword is None]
    for p, a in zip(positional, pos_args):
        bound[p.name.value] = a
    for a in call.args:
        if a.keyword is not None:
            bound[a.keyword.value] = a
    helper = RefHelper(target, call, {})
    for param, arg in bound.items():
        if isinstance(arg.value, cst.Name) and arg.value.value in refs:
            helper.refs[param] = refs[arg.value.value]
            helper.ref_args.append(arg.value)
        elif helper.index_param is None and moves(arg.value):
            helper.index_param, helper.index_arg = param, arg
    return helper


def _check_helper(ctx: ModuleContext, helper: RefHelper) -> None:
    """One caller, and the ref parameters only indexed (`src[...]`, `src.at[...]`, `.dtype`):
    anything else (`.shape`, handing `src` on to an unknown call, rebinding it) would mean
    something else once the ref is a block, or hide where it is accessed."""
    fn, name = helper.fn, helper.fn.name.value
    others = [n for n in walk(ctx.module) if isinstance(n, cst.Name) and n.value == name and n is not fn.name and n is not helper.call.func]
    if others:
        raise Refuse(
            f"`{name}` accesses the kernel's refs and is also used elsewhere (line {ctx.span(others[0]).line}); "
            "rewriting its windows would change them for every caller; give each caller its own helper"
        )
    rebound = {b for s in body_statements(fn) for b in bindings(s, nested=True)} | _nested_params(fn)
    for param, ref in helper.refs.items():
        if param in rebound:
            raise Refuse(f"`{name}` rebinds its parameter `{param}` (the kernel's `{ref}`); pallas-fix cannot follow the ref")
        for node in walk(fn.body):
            if isinstance(node, cst.Name) and node.value == param and not _indexed_or_meta(ctx, node):
                raise Refuse(
                    f"`{name}` uses its parameter `{param}` (the kernel's `{ref}`) other than through subscripts "
                    f"(line {ctx.span(node).line}); once the ref is a block it would mean the block; pass what it reads as an argument"
                )


def _nested_params(fn: cst.FunctionDef) -> set[str]:
    return {p.name.value for n in walk(fn.body) if isinstance(n, (cst.FunctionDef, cst.Lambda)) for p in n.params.params}


def _indexed_or_meta(ctx: ModuleContext, node: cst.Name) -> bool:
    """`p[...]`, `p.at[...]`, `p.dtype` / `p.ndim`, or `p` handed on to a function defined in the
    module (it becomes a ref helper too, checked the same way)."""
    parent = ctx.parent(node)
    if isinstance(parent, cst.Subscript) and parent.value is node:
        return True
    if isinstance(parent, cst.Attribute) and parent.value is node:
        if parent.attr.value in ("dtype", "ndim"):
            return True
        grand = ctx.parent(parent)
        return parent.attr.value == "at" and isinstance(grand, cst.Subscript) and grand.value is parent
    call = ctx.parent(parent) if isinstance(parent, cst.Arg) and parent.value is node else None
    return (
        isinstance(call, cst.Call) and isinstance(call.func, cst.Name)
        and ctx.resolve_def(call.func.value, call) is not None and not parent.star  # type: ignore[union-attr]
    )


def helper_aliases(helpers: list[RefHelper]) -> dict[tuple[int, str], str]:
    """(id(helper def), parameter) -> the kernel ref it stands for."""
    return {(id(h.fn), p): ref for h in helpers for p, ref in h.refs.items()}


def drop_index_edits(helpers: list[RefHelper], still_reads) -> dict:
    """Remove each helper's index parameter, and its argument from the one call, and each other
    parameter the rewrite leaves unread (`size` of `_tile(ref, start, size)`, which only the
    window read; see `orphaned_params`): `still_reads(helper, name, skip)` says whether the
    helper reads `name` outside what the rewrite removes and the arguments `skip`."""
    edits: dict = {}
    extras = _orphans(helpers, still_reads)
    for h in helpers:
        assert h.index_param is not None and h.index_arg is not None
        extra = extras.get(id(h), {})
        edits[h.fn] = _drop_params({h.index_param, *extra})
        edits[h.call] = _drop_args(h.call, [h.index_arg, *(a for a in extra.values() if a is not None)])
    return edits


def _orphans(helpers: list[RefHelper], still_reads) -> dict[int, dict[str, Optional[cst.Arg]]]:
    """`orphaned_params` of every helper, iterated: an argument another helper stops receiving is
    no read (`_step(x_ref, o_ref, blk, size)` hands `size` only to `_write`, which loses it)."""
    found: dict[int, dict[str, Optional[cst.Arg]]] = {}
    while True:
        skip = _arg_ids(found)
        now = {id(h): orphaned_params(h, lambda g, name: still_reads(g, name, skip)) for h in helpers}
        if now == found:
            return found
        found = now


def orphan_args(helpers: list[RefHelper], still_reads) -> set[int]:
    """The ids of the arguments `drop_index_edits` drops besides the index's (see `_orphans`)."""
    return _arg_ids(_orphans(helpers, still_reads))


def _arg_ids(extras: dict[int, dict[str, Optional[cst.Arg]]]) -> set[int]:
    return {id(a) for extra in extras.values() for a in extra.values() if a is not None}


def orphaned_params(h: RefHelper, still_reads) -> dict[str, Optional[cst.Arg]]:
    """The helper's parameters, besides refs and the index, that its body reads before the rewrite
    and not after (`still_reads(h, name)` says), each with the argument the one call passes for it
    (None when it takes its default). Only where that argument is a name or a literal: dropping a
    call or an expression could drop an effect or an error."""
    passed = {a.keyword.value: a for a in h.call.args if a.keyword is not None}
    positional = [a for a in h.call.args if a.keyword is None]
    if any(a.star for a in h.call.args):
        return {}
    out: dict[str, Optional[cst.Arg]] = {}
    params = list(h.fn.params.posonly_params) + list(h.fn.params.params)
    for k, p in enumerate(params + list(h.fn.params.kwonly_params)):
        name = p.name.value
        if name == h.index_param or name in h.refs:
            continue
        arg = positional[k] if k < len(params) and k < len(positional) else passed.get(name)
        if arg is not None and not isinstance(arg.value, (cst.Name, cst.Integer, cst.Float, cst.SimpleString)):
            continue
        read_before = any(isinstance(n, cst.Name) and n.value == name for n in walk(h.fn.body))
        if read_before and not still_reads(h, name):
            out[name] = arg
    return out


def _drop_params(names: set[str]):
    def edit(fn: cst.FunctionDef) -> cst.FunctionDef:
        params = fn.params
        gone = lambda p: p.name.value in names  # noqa: E731
        kwonly = _without(params.kwonly_params, gone)
        positional = _without(params.params, gone)
        star = params.star_arg
        if isinstance(star, cst.ParamStar) and not kwonly:  # a bare `*` needs a keyword-only parameter
            star = cst.MaybeSentinel.DEFAULT
            if positional:
                positional[-1] = positional[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        return fn.with_changes(params=params.with_changes(
            posonly_params=_without(params.posonly_params, gone),
            params=positional, star_arg=star, kwonly_params=kwonly,
        ))

    return edit


def _drop_args(call: cst.Call, args: list[cst.Arg]):
    positions = {list(call.args).index(a) for a in args}  # edits change what is inside the arguments, never their number

    def edit(updated: cst.Call) -> cst.Call:
        current = list(updated.args)
        doomed = {id(current[k]) for k in positions}
        return updated.with_changes(args=_without(current, lambda a: id(a) in doomed))

    return edit


def _without(items, drop) -> list:
    """`items` without those `drop` selects; the new last one loses a trailing comma it had."""
    kept = [x for x in items if not drop(x)]
    if len(kept) != len(items) and kept and items and drop(items[-1]):
        kept[-1] = kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return kept
