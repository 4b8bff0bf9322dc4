"""Helpers called with arguments: their parameters stand for the call's argument expressions.

`_rows(x_ref, o_ref, pl.ds(r * bs, bs))` with `def _rows(x_ref, o_ref, rows): o_ref[rows, :] = ...`
indexes the kernel's refs with a slice object the caller built. The helper's `HelperEnv` binds
each parameter to its argument, as written at the call and evaluated where the call stands:
`rows` is seen as the caller's `pl.ds(...)` (through a name `idx = pl.ds(...)` or a tuple
`(pl.ds(...), slice(None))` as well), and every expression written in the caller is evaluated
in the caller's environment, however deep the chain of helpers. What the parameter's value is
(a ref, a loop-driven int, a Python value) stays `roles.bind_args`' job.
"""

from __future__ import annotations

from typing import Optional

import libcst as cst

from pallas_fix.analysis.binders import positional_names, sole_return
from pallas_fix.core import names as N
from pallas_fix.analysis.context import ModuleContext
from pallas_fix.analysis.discovery.roles import bind_args
from pallas_fix.analysis.values.provenance import Env
from pallas_fix.analysis.values.values import Val
from pallas_fix.core.model import LoopInfo


def bound_arguments(fn: cst.FunctionDef, call: cst.Call) -> dict[str, cst.BaseExpression]:
    """parameter -> the argument expression `call` passes for it (positional or keyword); none
    when a `*args` / `**kwargs` at the call hides which argument lands where."""
    if any(a.star for a in call.args):
        return {}
    positional = list(fn.params.posonly_params) + list(fn.params.params)
    pos_args = [a for a in call.args if a.keyword is None]
    out = {p.name.value: a.value for p, a in zip(positional, pos_args)}
    named = {p.name.value for p in positional + list(fn.params.kwonly_params)}
    for a in call.args:
        if a.keyword is not None and a.keyword.value in named:
            out[a.keyword.value] = a.value
    return out


def partial_arguments(ctx: ModuleContext, fn: cst.FunctionDef,
                      loop: cst.Call) -> Optional[tuple[cst.Call, dict[str, cst.BaseExpression]]]:
    """`lax.fori_loop(lo, hi, functools.partial(body, x_ref, bs=bs), init)`: the partial and the
    parameters of `body` it binds -> their argument expressions; None without such a partial."""
    for arg in loop.args:
        value = arg.value
        if not (isinstance(value, cst.Call) and ctx.imports.is_(value.func, N.PARTIAL) and value.args):
            continue
        if not (isinstance(value.args[0].value, cst.Name) and value.args[0].value.value == fn.name.value):
            continue
        if any(a.star for a in value.args):
            return None
        positional = positional_names(fn)
        out = {p: a.value for p, a in zip(positional, [a for a in value.args[1:] if a.keyword is None])}
        out.update({a.keyword.value: a.value for a in value.args[1:] if a.keyword is not None})
        return value, out
    return None


class HelperEnv(Env):
    """The names of a helper `fn` called by `call`, which stands in the function `caller` analyses."""

    def __init__(self, ctx: ModuleContext, fn, parent: Optional[Env], params: dict[str, Val],
                 loops: dict[cst.CSTNode, LoopInfo], call: cst.Call, caller: Env) -> None:
        super().__init__(ctx, fn, parent, params, loops)
        self.call, self.caller = call, caller
        self.args = bound_arguments(fn, call) if isinstance(fn, cst.FunctionDef) else {}

    def home(self, expr: cst.CSTNode) -> Env:
        """The environment `expr` is written in: the one analysing the function that holds it,
        found along the callers (and their enclosing functions) down to this helper; this
        helper's own for its own code and for anything else."""
        scope = self.ctx.scope_of(expr)
        if scope is self.scope:
            return self
        env: Optional[Env] = self.caller
        while env is not None:
            lexical: Optional[Env] = env
            while lexical is not None:
                if lexical.scope is scope:
                    return lexical
                lexical = lexical.parent
            env = env.caller if isinstance(env, HelperEnv) else None
        return self

    def argument(self, name: str) -> Optional[cst.BaseExpression]:
        """The argument parameter `name` receives, unless the helper rebinds the name."""
        if name not in self.args or name in self.bindings():
            return None
        return self.args[name]

    def received_from(self, name: str) -> Optional[cst.Call]:
        return self.call if name in self.params else None

    def value(self, expr: cst.BaseExpression) -> Val:
        env = self.home(expr)
        return env.value(expr) if env is not self else super().value(expr)

    def static_int(self, expr: cst.BaseExpression, depth: int = 0) -> Optional[int]:
        env = self.home(expr)
        if env is not self:
            return env.static_int(expr, depth)
        arg = self.argument(expr.value) if isinstance(expr, cst.Name) and expr.value in self.params else None
        if arg is not None and not self.params[expr.value].dynamic:  # a Python value: its argument's
            return self.caller.static_int(arg, depth + 1)
        return super().static_int(expr, depth)

    def ds_call(self, expr: cst.BaseExpression) -> Optional[cst.Call]:
        env = self.home(expr)
        if env is not self:
            return env.ds_call(expr)
        arg = self.argument(expr.value) if isinstance(expr, cst.Name) else None
        return self.caller.ds_call(arg) if arg is not None else super().ds_call(expr)


def index_tuple(env: Env, expr: cst.BaseExpression) -> Optional[cst.Tuple | cst.List]:
    """The tuple of indices a name stands for: `idx = (pl.ds(s, bs), slice(None))` in the
    function, or a helper parameter that receives such a tuple (or a name bound to one)."""
    for _ in range(8):
        if isinstance(expr, (cst.Tuple, cst.List)):
            return expr
        if isinstance(env, HelperEnv) and env.home(expr) is not env:
            env = env.home(expr)
            continue
        if not isinstance(expr, cst.Name):
            return None
        arg = env.argument(expr.value) if isinstance(env, HelperEnv) else None
        if arg is not None:
            env, expr = env.caller, arg  # type: ignore[union-attr]
            continue
        bound = env.single_assignment(expr.value)
        if bound is None:
            return None
        expr = bound
    return None


def caller_window(env: Env, start: cst.BaseExpression,
                  size: Optional[cst.BaseExpression]) -> tuple[cst.BaseExpression, Optional[cst.BaseExpression]]:
    """The start and size of a helper's `pl.ds(start, size)` as its callers wrote them (`i * BS`,
    `BS`), when `start` is a parameter receiving a traced value: the window then moves with what
    drives the caller. Followed through every level of helpers (`_store(ref, start, size, v)`
    called with `(o_ref, i * tile, tile, v)`, or handing `pl.ds(start, size)` on to `_put`),
    start and size together, so that both are read in one environment: the size moves to its
    argument when it is a parameter too, and stays when it means the same number on both sides
    (a module constant, a literal); anything else stops at the level reached."""
    env = home_env(env, start)  # a `pl.ds(start, size)` built by a caller and handed down as an object
    while isinstance(env, HelperEnv) and isinstance(start, cst.Name) and size is not None:
        start = _hinted_parameter(env, start)
        arg = _received(env, start)
        if arg is None or not env.value(start).dynamic:
            break
        size_arg = _caller_size(env, size)
        if size_arg is None:
            break
        env, start, size = env.caller, arg, size_arg
    return start, size


def _received(env: "HelperEnv", name: cst.Name) -> Optional[cst.BaseExpression]:
    """The argument the read `name` sees: its parameter's, unless a rebinding reaches the read."""
    return env.args.get(name.value) if name.value in env.params and env.param_reaches(name) else None


def _hinted_parameter(env: "HelperEnv", start: cst.Name) -> cst.Name:
    """The parameter read by `start = pl.multiple_of(start, size)` (an alignment hint, which the
    affine reading strips as well) when `start` sees that binding; `start` itself otherwise."""
    if start.value not in env.params or env.param_reaches(start):
        return start
    bound = env.reaching_assignment(start)
    if isinstance(bound, cst.Call) and env.ctx.imports.is_(bound.func, N.MULTIPLE_OF) and bound.args:
        inner = bound.args[0].value
        if isinstance(inner, cst.Name) and inner.value == start.value:
            return inner
    return start


def _caller_size(env: "HelperEnv", size: cst.BaseExpression) -> Optional[cst.BaseExpression]:
    """`size` as the caller of `env`'s helper can read it: the argument a size parameter receives,
    or `size` itself when it is the same static number on both sides; None otherwise."""
    if env.home(size) is not env:
        return None  # written further out (a closure): the caller may not see it
    if isinstance(size, cst.Name) and size.value in env.params and not env.params[size.value].dynamic:
        arg = env.argument(size.value)
        if arg is not None:
            return arg
    here = env.static_int(size)
    return size if here is not None and env.caller.static_int(size) == here else None


def static_argument(env: Env, expr: cst.BaseExpression) -> tuple[Env, cst.BaseExpression]:
    """A helper's static parameter (`size` in `pl.ds(blk * size, size)`) as its outermost caller
    wrote it (`block_rows`), with the environment that reads it: the same Python value, written
    where the kernel's names are. `(env, expr)` itself for anything else."""
    while isinstance(env, HelperEnv) and isinstance(expr, cst.Name) and expr.value in env.params:
        arg = env.argument(expr.value)
        if arg is None or env.params[expr.value].dynamic or env.home(expr) is not env:
            break
        env, expr = env.caller, arg
        env = home_env(env, expr)
    return env, expr


def home_env(env: Env, expr: cst.CSTNode) -> Env:
    """The environment `expr` is written in, seen from `env` (see `HelperEnv.home`)."""
    return env.home(expr) if isinstance(env, HelperEnv) else env


def passed_through(env: Env, element: cst.BaseExpression) -> Optional[str]:
    """Words naming the call(s) that hand `element`'s slice to the helper, when it is a
    parameter: "`rows` receives `pl.ds(r * 64, 64)` from the call `_norm(...)` at line 17"."""
    parts: list[str] = []
    while isinstance(env, HelperEnv) and isinstance(element, cst.Name):
        element = _hinted_parameter(env, element)
        arg = _received(env, element)
        if arg is None:
            break
        name = env.call.func.value if isinstance(env.call.func, cst.Name) else env.ctx.code(env.call.func)
        parts.append(f"`{element.value}` receives `{env.ctx.code(arg)}` from the call `{name}(...)` at line {env.ctx.span(env.call).line}")
        env, element = env.caller, arg
    return "; ".join(parts) if parts else None


def kernel_ref_name(env: Env, name: str, kernel: cst.FunctionDef) -> Optional[str]:
    """The kernel-level name `name` stands for where `env` sees it: a name of the kernel itself
    (also closed over by a nested function), or the one a helper's parameter receives, through
    any chain of calls passing it by name; None for anything else (a helper's own local)."""
    for _ in range(16):
        owner = env.owner(name)
        if owner is None:
            return None
        if owner.scope is kernel:
            return name
        arg = owner.argument(name) if isinstance(owner, HelperEnv) and name in owner.params else None
        if not isinstance(arg, cst.Name):
            return None
        env, name = owner.caller, arg.value  # type: ignore[union-attr]
    return None


def slice_helper(env: Env, expr: cst.BaseExpression) -> Optional[tuple["HelperEnv", cst.Call]]:
    """`queries`, bound once to `_queries(block_queries)` (or that call written in place), where
    `_queries` only returns `pl.ds(...)`: that `pl.ds` call, with the environment that reads it as
    this call binds the helper's parameters (`block_queries` standing for the caller's argument).
    None for anything else: a helper with any other statement is not read as a window."""
    owner = env.owner(expr.value) if isinstance(expr, cst.Name) else env
    call = owner.single_assignment(expr.value) if isinstance(expr, cst.Name) and owner is not None else expr
    if owner is None or not isinstance(call, cst.Call) or not isinstance(call.func, cst.Name) or any(a.star for a in call.args):
        return None
    fn = env.ctx.resolve_def(call.func.value, call)
    if fn is None or fn.params.star_arg is not cst.MaybeSentinel.DEFAULT:
        return None
    ds = sole_return(fn)
    if not (isinstance(ds, cst.Call) and env.ctx.imports.is_(ds.func, N.DS | N.SLICE)):
        return None
    # Planners compare windows by their text, which here is the helper's (`bq`): read only a helper
    # every call of which passes the same arguments, so that one text means one window.
    calls = [c for c in env.ctx.nodes_of(cst.Call) if isinstance(c.func, cst.Name) and c.func.value == fn.name.value]
    if len({env.ctx.code(cst.Tuple([cst.Element(a.value) for a in c.args])) for c in calls}) != 1:
        return None
    parent: Optional[Env] = owner
    while parent is not None and parent.scope is not env.ctx.scope_of(fn):
        parent = parent.parent
    if parent is None:
        return None
    return HelperEnv(env.ctx, fn, parent, bind_args(fn, call, owner), env.loops, call, owner), ds
