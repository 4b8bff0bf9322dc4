"""Program_id windows reached through ref helpers, for R3 (codemods/program_id_blocks):
`_gelu(x_ref, o_ref, rows)` called with `rows = pl.ds(pl.program_id(0) * BM, BM)`.

The helper's windows are accesses to the kernel's refs (rewrite.kernel.ref_helpers binds its parameters
to the call's arguments and checks it has that one caller), so they become whole blocks like the
kernel's own; the slice parameter nothing reads any more goes, with its argument.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Optional

import libcst as cst

from pallas_fix.analysis.context import walk
from pallas_fix.analysis.discovery.helper_calls import bound_arguments, kernel_ref_name
from pallas_fix.core.model import IndexUse, Origin
from pallas_fix.core.plans import Refuse
from pallas_fix.rewrite.kernel.ref_access import ref_base
from pallas_fix.rewrite.text.scopes import bindings, param_names
from pallas_fix.rewrite.kernel.ref_helpers import RefHelper, drop_index_edits, driven_helpers


@dataclass
class PidHelpers:
    helpers: list[RefHelper] = field(default_factory=list)
    error: Optional[Refuse] = None  # why the kernel's ref helpers cannot be rewritten, if they cannot


def pid_helpers(analysis, site) -> PidHelpers:
    """The functions the kernel hands refs to, each with the parameter a program_id value feeds."""
    try:
        return PidHelpers(driven_helpers(analysis, site, [site.kernel], lambda val: val.origin is Origin.PROGRAM_ID))
    except Refuse as why:
        return PidHelpers(error=why)


def use_ref(analysis, use: IndexUse) -> Optional[str]:
    """The kernel ref parameter a use's subscript goes through (see `kernel_ref_name`)."""
    base = ref_base(use.subscript)
    env = analysis.detection.envs.get(analysis.ctx.scope_of(use.subscript))
    if base is None or env is None or use.kernel_site is None:
        return None
    return kernel_ref_name(env, base.value, use.kernel_site.kernel)


def handed_view(analysis, use: IndexUse) -> Optional[str]:
    """Why a helper's window is on no operand, where the kernel hands the helper's ref parameter a
    view of one (`_tile(x_ref.at[0], i * bk, bk)`): the window is on a dim of the view, which no
    BlockSpec of the operand names as written. None for anything else."""
    ctx, site = analysis.ctx, use.kernel_site
    fn = next((a for a in ctx.ancestors(use.subscript) if isinstance(a, cst.FunctionDef)), None)
    if fn is None or site is None or site.kernel is None or fn is site.kernel or use.ref_name not in param_names(fn):
        return None
    for call in walk(site.kernel):
        if not (isinstance(call, cst.Call) and isinstance(call.func, cst.Name) and ctx.resolve_def(call.func.value, call) is fn):
            continue
        arg = bound_arguments(fn, call).get(use.ref_name)
        base = arg.value if isinstance(arg, cst.Subscript) else None
        if isinstance(base, cst.Attribute) and base.attr.value == "at" and isinstance(base.value, cst.Name):
            root = base.value.value
            return (f"`{use.ref_name}` is the view `{ctx.code(arg)}` of `{root}` that `{fn.name.value}(...)` is handed "
                    f"(line {ctx.span(call).line}), so its window is on a dim of the view, which no BlockSpec of "
                    f"`{root}` names as written; hand `{fn.name.value}` the ref `{root}` itself and index all its "
                    f"dims there, or take the window in the kernel")
    return None


def ref_subscripts(analysis, site, ref: str, helpers: PidHelpers) -> Iterator[cst.Subscript]:
    """Every subscript of the kernel ref `ref`: in the kernel and its nested functions, and in
    the ref helpers, through whichever name the function sees it by."""
    envs, ctx = analysis.detection.envs, analysis.ctx
    _check_passed(site, ref, helpers)
    functions = [site.kernel] + [h.fn for h in helpers.helpers if ctx.scope_of(h.fn) is ctx.module]
    for fn in functions:
        for node in walk(fn):
            base = ref_base(node) if isinstance(node, cst.Subscript) else None
            env = envs.get(_function_scope(ctx, node)) if base is not None else None
            if env is None:
                continue
            named = kernel_ref_name(env, base.value, site.kernel)  # type: ignore[union-attr]
            # A comprehension's target over listed refs (rewrite.kernel.ref_lists) is no kernel name.
            if named == ref or (named is None and fn is site.kernel and base.value == ref and env.owner(ref) is None):  # type: ignore[union-attr]
                yield node


def _function_scope(ctx, node: cst.CSTNode):
    """The function whose env reads `node`: a comprehension's names are its function's."""
    scope = ctx.scope_of(node)
    while isinstance(scope, (cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)):
        scope = ctx.scope_of(scope)
    return scope


def check_called_once(ctx, kernel, node: cst.CSTNode, ref: str, use: IndexUse) -> None:
    """Every helper holding the access, between it and the kernel, has one call, or its window
    along the use's dim is the same at every call: its window becomes the block for every call
    (a `pl.when` / `pl.loop` body is decorated, not called). A helper called twice (axlearn's
    flash backward runs one loop body under two `fori_loop`s, with and without a block table)
    has the same program_id window at each call when the helper is defined in the kernel and the
    window's start reads nothing the helper binds: only the program id and what the kernel around
    it computes. A helper outside the kernel may serve other kernels, whose calls keep the ref whole."""
    chain = ctx.scope_chain(node)
    inside = next((n for n, scope in enumerate(chain) if scope is kernel), None)  # None: not in the kernel
    helpers = chain[:inside] if inside is not None else [s for s in chain if not isinstance(s, cst.Module)]
    for scope in helpers:
        if not isinstance(scope, cst.FunctionDef) or scope.decorators:
            continue
        name = scope.name.value
        owner = ctx.scope_of(scope)  # a nested def's name is read only inside the function defining it
        mentions = [n for n in walk(owner) if isinstance(n, cst.Name) and n.value == name and n is not scope.name]
        if len(mentions) > 1 and not (inside is not None and _same_window(helpers, node, use)):
            raise Refuse(
                f"`{name}` accesses `{ref}` and is used {len(mentions)} times (line {ctx.span(mentions[1]).line}); "
                "its window would become the block for every call; give each call its own helper"
            )


def _same_window(helpers: list, node: cst.CSTNode, use: IndexUse) -> bool:
    """The window as written at the access (`x_ref[rows, ...]`'s `rows`) and its start read only
    names bound in the kernel or outside it, none bound by the `helpers` between the access and
    the kernel (a parameter or local): the same window at every call of them. The written
    element matters: a start read through a parameter is the first call's value. Read
    syntactically: the use's env is the kernel's, the helper's call inlined."""
    element = _element_at(node, use.dim)
    if element is None or use.start is None:
        return False
    inner = {name for scope in helpers if isinstance(scope, (cst.FunctionDef, cst.Lambda))
             for name in param_names(scope) | set(bindings(scope, nested=True))}
    names = {n.value for expr in (element, use.start, use.size) if expr is not None for n in walk(expr) if isinstance(n, cst.Name)}
    return not (names & inner)


def _element_at(node: cst.CSTNode, dim: int) -> Optional[cst.BaseExpression]:
    """The index written for `dim` in the subscript, when its elements are written one per dim
    (none before it an `...` or a packed tuple)."""
    if not isinstance(node, cst.Subscript) or dim >= len(node.slice):
        return None
    items = [el.slice for el in node.slice]
    if any(isinstance(i, cst.Index) and isinstance(i.value, (cst.Ellipsis, cst.Tuple)) for i in items[:dim + 1]):
        return None
    item = items[dim]
    return item.value if isinstance(item, cst.Index) else None


def passed_ref_args(ctx, site, ref: str, helpers: PidHelpers) -> set[int]:
    """The call arguments that hand `ref` to a ref helper: not a use of the ref of their own.
    When the helpers cannot be rewritten and `ref` is handed to a call, that is the refusal."""
    _check_passed(site, ref, helpers)
    return {id(n) for h in helpers.helpers for n in h.ref_args}


def _check_passed(site, ref: str, helpers: PidHelpers) -> None:
    """A ref handed to a call when the kernel's ref helpers cannot be rewritten: that is why."""
    passed = any(isinstance(n, cst.Arg) and isinstance(n.value, cst.Name) and n.value.value == ref for n in walk(site.kernel))
    if passed and helpers.error is not None:
        raise helpers.error


def drop_unread_slices(ctx, helpers: PidHelpers, removed: set[int], edits: dict) -> set[int]:
    """Drop each helper's slice parameter nothing reads once the `removed` elements are gone, and
    its argument; returns the ids of the arguments dropped."""
    unread = [h for h in helpers.helpers if h.index_param is not None and not _reads(ctx, h, h.index_param, removed)]
    edits.update(drop_index_edits(unread, lambda h, name, skip: _reads(ctx, h, name, removed | skip)))
    return {id(h.index_arg) for h in unread}


def _reads(ctx, helper: RefHelper, name: str, removed: set[int]) -> bool:
    """Does the helper mention its parameter `name` outside the `removed` elements?"""
    return any(
        isinstance(n, cst.Name) and n.value == name and not any(id(a) in removed for a in ctx.ancestors(n))
        for n in walk(helper.fn.body)
    )
