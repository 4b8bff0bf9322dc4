"""Find every dynamic index into a ref inside kernels and the helpers they call.

Each kernel gets an `Env` for its parameters (refs, or Python values bound by functools.partial
or defaults); nested defs get theirs from their role (fori_loop / pl.loop body, pl.when body,
run_scoped body, or a helper called with arguments). Module-level helpers called from a kernel
are analysed with their parameters bound to the call's arguments.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import libcst as cst

from pallas_fix.core import names as N
from pallas_fix.analysis.context import ModuleContext, walk
from pallas_fix.core.model import IndexUse, KernelSite, LoopInfo, Origin, Provenance
from pallas_fix.analysis.provenance import REF, STATIC, Env, Val, describe_loop, find_loops

_DESCRIPTORS = frozenset({N.TPU + ".make_async_copy", N.TPU + ".make_async_remote_copy"})
_REFLIST = Val(Origin.STATIC, "reflist", "refs")


@dataclass
class Detection:
    uses: list[IndexUse] = field(default_factory=list)
    loops: dict[cst.CSTNode, LoopInfo] = field(default_factory=dict)
    # Each analysed function -> the kernel sites it was reached from.
    reached: dict[cst.CSTNode, list[KernelSite]] = field(default_factory=dict)
    envs: dict[cst.CSTNode, Env] = field(default_factory=dict)


def detect(ctx: ModuleContext, sites: list[KernelSite]) -> Detection:
    result = Detection(loops=find_loops(ctx))
    seen: set[tuple[int, int]] = set()
    module_env = Env(ctx, ctx.module, None, {}, result.loops)
    for site in sites:
        if site.kernel is None:
            continue
        parent = _enclosing_env(ctx, site.kernel, module_env, result.loops)
        params, exprs = _kernel_params(ctx, site)
        env = Env(ctx, site.kernel, parent, params, result.loops, exprs)
        walker = _Walker(ctx, site, result, seen, module_env)
        walker.function(site.kernel, env)
    return result


def _enclosing_env(ctx: ModuleContext, fn: cst.FunctionDef, module_env: Env, loops) -> Env:
    """Wrapper functions around a nested kernel: their names are Python values at trace time."""
    chain = [s for s in ctx.scope_chain(fn) if not isinstance(s, cst.Module)]
    env = module_env
    for scope in reversed(chain):
        params = {}
        if isinstance(scope, cst.FunctionDef):
            ps = scope.params
            for p in [*ps.posonly_params, *ps.params, *ps.kwonly_params]:
                params[p.name.value] = STATIC
        env = _StaticEnv(ctx, scope, env, params, loops)
    return env


class _StaticEnv(Env):
    def lookup(self, name: str) -> Val:  # noqa: D401 - everything in a wrapper is static
        if name in self.bindings() or name in self.params:
            return STATIC
        return self.parent.lookup(name) if self.parent is not None else STATIC


def _kernel_params(ctx: ModuleContext, site: KernelSite) -> tuple[dict[str, Val], dict[str, cst.BaseExpression]]:
    fn = site.kernel
    assert fn is not None
    params: dict[str, Val] = {}
    exprs: dict[str, cst.BaseExpression] = {}
    positional = list(fn.params.posonly_params) + list(fn.params.params)
    bound_positional = len(site.partial_args)
    for i, p in enumerate(positional):
        name = p.name.value
        if i < bound_positional:
            params[name] = STATIC
            exprs[name] = site.partial_args[i]
        elif name in site.partial_kwargs:
            params[name] = STATIC
            exprs[name] = site.partial_kwargs[name]
        elif p.default is not None:
            params[name] = STATIC
            exprs[name] = p.default
        else:
            params[name] = REF
    for p in fn.params.kwonly_params:
        name = p.name.value
        params[name] = STATIC
        if name in site.partial_kwargs:
            exprs[name] = site.partial_kwargs[name]
        elif p.default is not None:
            exprs[name] = p.default
    if isinstance(fn.params.star_arg, cst.Param):
        params[fn.params.star_arg.name.value] = _REFLIST
    if fn.params.star_kwarg is not None:
        params[fn.params.star_kwarg.name.value] = STATIC
    return params, exprs


class _Walker:
    def __init__(self, ctx: ModuleContext, site: KernelSite, result: Detection, seen, module_env: Env) -> None:
        self.ctx = ctx
        self.site = site
        self.result = result
        self.seen = seen
        self.module_env = module_env
        self.active: set[cst.CSTNode] = set()

    def function(self, fn: cst.FunctionDef | cst.Lambda, env: Env) -> None:
        if fn in self.active:
            return
        self.active.add(fn)
        self.result.reached.setdefault(fn, [])
        if self.site not in self.result.reached[fn]:
            self.result.reached[fn].append(self.site)
        self.result.envs.setdefault(fn, env)
        try:
            body = fn.body if isinstance(fn, cst.Lambda) else fn.body
            stack = [body]
            nested: list[cst.FunctionDef] = []
            while stack:
                node = stack.pop()
                if isinstance(node, cst.FunctionDef):
                    nested.append(node)
                    continue
                if isinstance(node, cst.Lambda):
                    self.nested_lambda(node, env)
                    continue
                if isinstance(node, cst.Subscript):
                    self.subscript(node, fn, env)
                if isinstance(node, cst.Call):
                    self.call(node, env)
                stack.extend(reversed(node.children))
            # Nested defs last, loop/when bodies before plain helpers: a helper's parameters come
            # from its call sites, which may sit inside a lambda or a loop body analysed first.
            nested.sort(key=lambda d: 0 if self._role_params(d, env) is not None else 1)
            for d in nested:
                self.nested_def(d, env)
        finally:
            self.active.discard(fn)

    # -- roles of nested functions ---------------------------------------------------------------
    def nested_def(self, fn: cst.FunctionDef, env: Env) -> None:
        params = self._role_params(fn, env)
        if params is None:
            params = self._params_from_calls(fn, env)
        self.function(fn, Env(self.ctx, fn, env, params, self.result.loops))

    def nested_lambda(self, lam: cst.Lambda, env: Env) -> None:
        params = self._role_params(lam, env)
        if params is None:
            params = {p.name.value: Val(Origin.TRACED, "unknown", f"lambda parameter `{p.name.value}`") for p in lam.params.params}
        self.function(lam, Env(self.ctx, lam, env, params, self.result.loops))

    def _role_params(self, fn, env: Env) -> Optional[dict[str, Val]]:
        names = [p.name.value for p in fn.params.params]
        loop = self.result.loops.get(fn)
        if loop is not None:
            idx = names.index(loop.index_name) if loop.index_name in names else 0
            params = {n: Val(Origin.TRACED, "unknown", f"the carry `{n}` of the loop") for n in names[idx + 1:]}
            # Parameters functools.partial binds before the index take the partial's arguments.
            bound = _partial_bindings(self.ctx, loop.call, names, env)
            for n in names[:idx]:
                params[n] = bound.get(n, STATIC)
            for n, v in bound.items():
                params.setdefault(n, v)
            params[names[idx]] = Val(Origin.LOOP, "int", describe_loop(self.ctx, loop), loop=loop, is_index=True)
            # Loop bounds that are traced make the index take their origin too.
            bound = env.value(loop.lower) if loop.lower is not None else STATIC
            if bound.origin is Origin.REF_LOAD:
                params[names[idx]] = Val(Origin.REF_LOAD, "int", f"a loop index whose bounds are {bound.words}", loop=loop)
            return params
        if isinstance(fn, cst.FunctionDef):
            for dec in fn.decorators:
                d = dec.decorator
                target = d.func if isinstance(d, cst.Call) else d
                if self.ctx.imports.is_(target, N.PL_WHEN):
                    return {}
        # Passed to pl.run_scoped / pl.core_map style helpers: parameters are refs.
        name = fn.name.value if isinstance(fn, cst.FunctionDef) else None
        for node in walk(env.scope if not isinstance(env.scope, cst.Module) else self.ctx.module):
            if isinstance(node, cst.Call) and (self.ctx.imports.qualify(node.func) or "").endswith("run_scoped"):
                for a in node.args:
                    if a.value is fn or (name and isinstance(a.value, cst.Name) and a.value.value == name):
                        return {n: REF for n in names}
        if isinstance(fn, cst.FunctionDef) and fn.decorators:
            for dec in fn.decorators:
                q = self.ctx.imports.qualify(dec.decorator.func if isinstance(dec.decorator, cst.Call) else dec.decorator) or ""
                if q.endswith("run_scoped"):
                    return {n: REF for n in names}
        return None

    def _params_from_calls(self, fn: cst.FunctionDef, env: Env) -> dict[str, Val]:
        name = fn.name.value
        scope = env.scope
        for node in walk(scope):
            if isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value == name:
                caller_env = self._env_at(node, env)
                return self._bind_args(fn, node, caller_env)
        return {
            p.name.value: Val(Origin.TRACED, "unknown", f"parameter `{p.name.value}` of `{name}`")
            for p in fn.params.params
        }

    def _env_at(self, node: cst.CSTNode, default: Env) -> Env:
        for anc in self.ctx.ancestors(node):
            if anc in self.result.envs:
                return self.result.envs[anc]
        return default

    def _bind_args(self, fn: cst.FunctionDef, call: cst.Call, caller: Env) -> dict[str, Val]:
        params: dict[str, Val] = {}
        positional = list(fn.params.posonly_params) + list(fn.params.params)
        pos_args = [a for a in call.args if a.keyword is None and not a.star]
        for p, a in zip(positional, pos_args):
            params[p.name.value] = caller.value(a.value)
        for a in call.args:
            if a.keyword is not None:
                params[a.keyword.value] = caller.value(a.value)
        for p in positional + list(fn.params.kwonly_params):
            params.setdefault(p.name.value, STATIC)
        if isinstance(fn.params.star_arg, cst.Param):
            rest = [caller.value(a.value) for a in pos_args[len(positional):]]
            params[fn.params.star_arg.name.value] = _REFLIST if rest and all(v.is_ref for v in rest) else STATIC
        return params

    # -- calls into module-level helpers ----------------------------------------------------------
    def call(self, call: cst.Call, env: Env) -> None:
        if self.ctx.imports.is_(call.func, N.FORI_LOOP):
            # A loop body defined at module level (often bound with functools.partial).
            for body, loop in self.result.loops.items():
                if loop.call is call and isinstance(body, cst.FunctionDef) and body not in self.active:
                    if self.ctx.scope_of(body) is self.ctx.module:
                        params = self._role_params(body, env) or {}
                        self.function(body, Env(self.ctx, body, self.module_env, params, self.result.loops))
            return
        if not isinstance(call.func, cst.Name):
            return
        target = self.ctx.resolve_def(call.func.value, call)
        if target is None or target in self.active:
            return
        # Nested defs are handled where they are defined (their scope is the caller's).
        if self.ctx.scope_of(target) is not self.ctx.module:
            return
        if target is self.site.kernel:
            return
        params = self._bind_args(target, call, env)
        self.function(target, Env(self.ctx, target, self.module_env, params, self.result.loops))

    # -- the accesses themselves -------------------------------------------------------------------
    def subscript(self, sub: cst.Subscript, fn, env: Env) -> None:
        base = sub.value
        via_at = isinstance(base, cst.Attribute) and base.attr.value == "at"
        ref_expr = base.value if via_at else base
        if isinstance(ref_expr, cst.Attribute) and ref_expr.attr.value in ("shape", "strides", "at"):
            return
        base_val = env.value(ref_expr)
        if base_val.vtype == "reflist" or self._only_waited(sub):
            return
        is_ref = base_val.is_ref or via_at
        elements = [(dim, e.slice) for dim, e in enumerate(sub.slice)]
        self.starred = False
        if len(sub.slice) == 1 and isinstance(sub.slice[0].slice, cst.Index):
            packed = sub.slice[0].slice.value
            if isinstance(packed, (cst.Tuple, cst.List)):
                # `ref[(*batch, pl.ds(s, 16), slice(None))]`: a tuple built in place. After a starred
                # element the dims are unknown, so codemods will not touch these windows.
                self.starred = any(isinstance(e, cst.StarredElement) for e in packed.elements)
                elements = [
                    (dim, cst.Index(e.value))
                    for dim, e in enumerate(packed.elements)
                    if not isinstance(e, cst.StarredElement)
                ]
        for dim, sl in elements:
            if isinstance(sl, cst.Slice):
                bounds = [b for b in (sl.lower, sl.upper, sl.step) if b is not None]
                vals = [env.value(b) for b in bounds]
                dyn = [v for v in vals if v.dynamic]
                if is_ref and dyn:
                    self.record(sub, fn, env, dim, sl, sl.lower, None, "slice", dyn[0], None, via_at, ref_expr)
                continue
            value = sl.value
            ds = env.ds_call(value)
            if ds is not None:
                parts = env.ds_parts(value)
                if parts is None:
                    continue
                start, size = parts
                sval = env.value(start)
                if sval.origin is Origin.TRACED_CONST and _bare_constant(env, start):
                    sval = STATIC  # jax folds `pl.ds(jnp.int32(3), n)` into a literal start
                zval = env.value(size) if size is not None else None
                stride = _ds_stride(ds)
                if sval.dynamic or (zval is not None and zval.dynamic):
                    self.record(sub, fn, env, dim, value, start, size, "ds", sval, zval, via_at, ref_expr, stride)
                continue
            if not is_ref:
                continue
            val = env.value(value)
            if val.dynamic and val.vtype in ("array", "array1"):
                self.record(sub, fn, env, dim, value, value, None, "int_array", val, None, via_at, ref_expr)

    def _only_waited(self, sub: cst.Subscript) -> bool:
        """`make_async_copy(x.at[...], ...).wait()` rebuilds a descriptor only to wait on its
        semaphore: no data moves through that slice."""
        for anc in self.ctx.ancestors(sub):
            if isinstance(anc, cst.Call) and self.ctx.imports.is_(anc.func, _DESCRIPTORS):
                attr = self.ctx.parent(anc)
                call = self.ctx.parent(attr) if attr is not None else None
                return (
                    isinstance(attr, cst.Attribute)
                    and attr.attr.value == "wait"
                    and isinstance(call, cst.Call)
                    and call.func is attr
                )
            if isinstance(anc, (cst.BaseStatement, cst.FunctionDef, cst.Lambda)):
                return False
        return False

    def record(self, sub, fn, env, dim, element, start, size, kind, sval: Val, zval: Optional[Val], via_at, ref_expr, stride=None) -> None:
        key = (id(sub), dim)
        if key in self.seen:
            return
        self.seen.add(key)
        owner = fn if isinstance(fn, cst.FunctionDef) else self.ctx.enclosing_function(fn)
        self.result.uses.append(
            IndexUse(
                ref_name=self.ctx.code(ref_expr),
                subscript=sub,
                dim=dim,
                element=element,
                start=start,
                size=size,
                kind=kind,
                provenance=to_provenance(sval),
                size_provenance=to_provenance(zval) if zval is not None else None,
                span=self.ctx.span(sub),
                function=owner,  # type: ignore[arg-type]
                via_at=via_at,
                stride=stride,
                env=env,
                kernel_site=self.site,
                starred=getattr(self, "starred", False),
            )
        )


def _partial_bindings(ctx: ModuleContext, call: cst.Call, names: list[str], env: Env) -> dict[str, Val]:
    """`lax.fori_loop(lo, hi, functools.partial(body, x_ref, bs=bs), init)`: what body's leading
    parameters are bound to, evaluated where the partial is written."""
    positional = [a for a in call.args if a.keyword is None and not a.star]
    fun = next((a.value for a in call.args if a.keyword is not None and a.keyword.value == "body_fun"), None)
    if fun is None and len(positional) > 2:
        fun = positional[2].value
    if not (isinstance(fun, cst.Call) and ctx.imports.is_(fun.func, N.PARTIAL)):
        return {}
    out: dict[str, Val] = {}
    pos = [a for a in fun.args[1:] if a.keyword is None and not a.star]
    for n, a in zip(names, pos):
        out[n] = env.value(a.value)
    for a in fun.args[1:]:
        if a.keyword is not None:
            out[a.keyword.value] = env.value(a.value)
    return out


def _bare_constant(env: Env, expr: cst.BaseExpression) -> bool:
    """`jnp.int32(3)` itself (possibly through a name), not arithmetic on it."""
    for _ in range(8):
        if isinstance(expr, cst.Name):
            value = env.single_assignment(expr.value)
            if value is None:
                return False
            expr = value
            continue
        if isinstance(expr, cst.Call) and env.ctx.imports.is_(expr.func, N.MULTIPLE_OF) and expr.args:
            expr = expr.args[0].value
            continue
        break
    return isinstance(expr, cst.Call) and env.ctx.imports.is_(expr.func, N.INT_DTYPES | N.ARRAY_CTORS)


def _ds_stride(call: cst.Call) -> Optional[cst.BaseExpression]:
    positional = [a for a in call.args if a.keyword is None]
    for a in call.args:
        if a.keyword is not None and a.keyword.value == "stride":
            return a.value
    return positional[2].value if len(positional) > 2 else None


def to_provenance(val: Val) -> Provenance:
    origin = val.origin
    detail = None
    if val.dynamic and val.vtype in ("float", "bool", "array1"):
        detail = {"float": "float", "bool": "bool", "array1": "one_element"}[val.vtype]
        origin = Origin.NON_INT_SCALAR
    return Provenance(origin=origin, description=val.words, loop=val.loop, program_id_axis=val.pid_axis, detail=detail)
