"""Refs a kernel forwards through its `*refs` into a function it calls: `def kernel(q_ref, *args,
**kwargs): ... inner((b, 0), q_ref, *args, **kwargs)` with `def inner(idx, q_ref, k_ref, v_ref,
o_ref, *, block_k)` (JAX's flash attention and its forks; issue 28). Item k of the star list lands
on the callee's positional parameter `len(written) + k`, so its name there is the ref's name, as
an unpacking at kernel level would give it (analysis.discovery.varargs records it so).

The callee is the def the name resolves to, or, for a name the kernel binds to one of several defs
(`kernel = _single_step if flag else _single_batch`), each of them: their names must agree at
every position, or the star list has no one name per item."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from pallas_fix.analysis.binders import int_literal, positional_names
from pallas_fix.analysis.context import ModuleContext


def forwarded_names(ctx: ModuleContext, kernel: cst.FunctionDef, read: cst.Name,
                    error: type[Exception]) -> Optional[list[tuple[str, cst.FunctionDef]]]:
    """(name, callee) for each item of the star list `read` when `read` is forwarded whole as
    `callee(..., *read, **kw)`; None when `read` is not such an argument. Raises `error` (the
    caller's exception type) when it is, but the callees' parameters do not name the items one way."""
    arg = ctx.parent(read)
    call = ctx.parent(arg) if isinstance(arg, cst.Arg) else None
    if not (isinstance(call, cst.Call) and arg.star == "*" and arg.value is read and isinstance(call.func, cst.Name)):
        return None
    at = list(call.args).index(arg)
    written = [a for a in call.args[:at] if a.keyword is None and not a.star]
    if any(a.star == "*" for a in call.args[:at]) or any(a.keyword is None and a.star != "**" for a in call.args[at + 1:]):
        raise error(f"`{ctx.code(call).strip()}` passes positional arguments around `*{read.value}`, so the "
                           "refs' positions in the callee are not fixed")
    found = callees(ctx, kernel, call)
    if not found:
        return None
    keywords = {a.keyword.value for a in call.args if a.keyword is not None}
    names: list[tuple[str, cst.FunctionDef]] = []
    for fn in found:
        params = positional_names(fn)[len(written):]
        for k, name in enumerate(params):
            if name in keywords:
                raise error(f"`{ctx.code(call).strip()}` also passes `{name}` by keyword")
            if k < len(names) and names[k][0] != name:
                raise error(
                    f"`{names[k][1].name.value}` and `{fn.name.value}` name item {k} of `*{read.value}` differently "
                    f"(`{names[k][0]}`, `{name}`); give the variants the same parameters")
            if k >= len(names):
                names.append((name, fn))
    return names


def callees(ctx: ModuleContext, kernel: cst.FunctionDef, call: cst.Call) -> list[cst.FunctionDef]:
    """The defs `call.func` may run: the one it names, or those the kernel binds the name to (a
    plain name or a conditional expression of names; options not defined here are left out)."""
    name = call.func.value  # type: ignore[attr-defined]
    values = ctx.assignments(name, kernel)
    if not values:
        fn = ctx.resolve_def(name, call)
        return [fn] if fn is not None and fn is not kernel else []
    found: list[cst.FunctionDef] = []
    for value in values:
        for option in (value.body, value.orelse) if isinstance(value, cst.IfExp) else (value,):
            if not isinstance(option, cst.Name):
                return []
            fn = ctx.resolve_def(option.value, call)
            if fn is not None and fn is not kernel and fn not in found:
                found.append(fn)
    return found


def sized_read(ctx: ModuleContext, subscript, read: cst.Name) -> bool:
    """`refs[k].shape` / `.dtype` / `.ndim`: metadata of an item the kernel does not name."""
    holder = ctx.parent(subscript)
    return (isinstance(subscript, cst.Subscript) and subscript.value is read and constant_index(subscript) is not None
            and isinstance(holder, cst.Attribute) and holder.value is subscript and holder.attr.value in ("shape", "dtype", "ndim"))


def unnamed_problem(ctx: ModuleContext, star: str, calls: list[cst.Call], sized: list[cst.Subscript]) -> Optional[str]:
    """Why a rewrite cannot use the names a kernel's refs get only in a callee, or the sizes it
    reads by index: a rewrite edits the kernel's own names, and would change those unseen."""
    if calls:
        call = calls[0]
        return (f"kernel forwards `*{star}` into `{ctx.code(call.func)}` (line {ctx.span(call).line}), whose parameters "
                "name the refs; pallas-fix reads those names to report findings, but rewrites only kernels that name "
                f"their refs themselves (parameters, or unpacking `{star}` in the kernel)")
    if sized:
        read = sized[0]
        return (f"`{ctx.code(ctx.statement_of(read) or read).strip()}` reads the size of `{ctx.code(read)}` (line "
                f"{ctx.span(read).line}), a ref the kernel does not name; a rewrite that changes its block would change "
                f"that size unseen: name it (`x_ref, *rest = {star}`) and read `x_ref.shape`")
    return None


def constant_index(sub: cst.Subscript) -> Optional[int]:
    """`k` of `refs[k]` / `refs[-k]` with a literal k."""
    if len(sub.slice) != 1 or not isinstance(sub.slice[0].slice, cst.Index):
        return None
    return int_literal(sub.slice[0].slice.value)
