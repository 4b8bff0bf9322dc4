"""Find every dynamic index into a ref inside kernels and the helpers they call.

Each kernel gets an `Env` for its parameters (refs, or Python values bound by functools.partial
or defaults); nested defs get theirs from their role (fori_loop / pl.loop body, pl.when body,
run_scoped body, or a helper called with arguments; see analysis.discovery.roles). Module-level helpers
called from a kernel are analysed with their parameters bound to the call's arguments. What one
subscript contributes is analysis.accesses' job.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Optional

import libcst as cst

from pallas_fix.core import names as N
from pallas_fix.analysis.accesses import atomic_index_uses, index_uses
from pallas_fix.analysis.context import ModuleContext, own_nodes, walk
from pallas_fix.analysis.discovery.helper_calls import HelperEnv, partial_arguments
from pallas_fix.analysis.discovery.operand_refs import scalar_block_refs
from pallas_fix.analysis.loops.loops import find_loops
from pallas_fix.analysis.values.provenance import Env
from pallas_fix.analysis.discovery.roles import Params, bind_args, kernel_params, role_params, unknown_params
from pallas_fix.analysis.values.values import STATIC, Val
from pallas_fix.core.model import IndexUse, KernelSite, LoopInfo

@dataclass
class Detection:
    uses: list[IndexUse] = field(default_factory=list)
    loops: dict[cst.CSTNode, LoopInfo] = field(default_factory=dict)
    # Each analysed function -> the kernel sites it was reached from.
    reached: dict[cst.CSTNode, list[KernelSite]] = field(default_factory=dict)
    envs: dict[cst.CSTNode, Env] = field(default_factory=dict)
    # Each kernel that calls a name bound to one of several functions (`kernel = _a if f else _b;
    # kernel(...)`) -> that call and the names it may be bound to (analysis.discovery.kernel_entry).
    dispatches: dict[cst.CSTNode, tuple[cst.Call, list[str]]] = field(default_factory=dict)


def detect(ctx: ModuleContext, sites: list[KernelSite]) -> Detection:
    result = Detection(loops=find_loops(ctx))
    seen: set[tuple[int, int]] = set()
    module_env = Env(ctx, ctx.module, None, {}, result.loops)
    for site in sites:
        if site.kernel is None:
            continue
        parent = _enclosing_env(ctx, site.kernel, module_env, result.loops)
        params, exprs = kernel_params(site)
        for name in scalar_block_refs(site, module_env) & set(params):
            params[name] = replace(params[name], scalar_ref=True)
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
            nested: list[cst.FunctionDef] = []
            for node in own_nodes(fn.body):
                kind = type(node)
                if kind is cst.FunctionDef:
                    nested.append(node)  # type: ignore[arg-type]
                elif kind is cst.Lambda:
                    self.nested_lambda(node, env)  # type: ignore[arg-type]
                elif kind is cst.Subscript:
                    self.subscript(node, fn, env)  # type: ignore[arg-type]
                elif kind is cst.Call:
                    self.record(atomic_index_uses(self.site, node, fn, env))  # type: ignore[arg-type]
                    self.call(node, env)  # type: ignore[arg-type]
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
        inner = Env(self.ctx, fn, env, params, self.result.loops) if params is not None else self._helper_env(fn, env)
        self.function(fn, inner)

    def nested_lambda(self, lam: cst.Lambda, env: Env) -> None:
        params = self._role_params(lam, env)
        if params is None:
            params = unknown_params(lam, lambda p: f"lambda parameter `{p}`")
        self.function(lam, Env(self.ctx, lam, env, params, self.result.loops))

    def _role_params(self, fn, env: Env) -> Params | None:
        return role_params(self.ctx, self.result.loops, fn, env)

    def _helper_env(self, fn: cst.FunctionDef, env: Env) -> Env:
        """A nested helper's parameters, bound to the arguments of its first call."""
        name = fn.name.value
        scope = env.scope
        for node in walk(scope):
            if isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value == name:
                caller_env = self._env_at(node, env)
                return HelperEnv(self.ctx, fn, env, bind_args(fn, node, caller_env), self.result.loops, node, caller_env)
        return Env(self.ctx, fn, env, unknown_params(fn, lambda p: f"parameter `{p}` of `{name}`"), self.result.loops)

    def _env_at(self, node: cst.CSTNode, default: Env) -> Env:
        for anc in self.ctx.ancestors(node):
            if anc in self.result.envs:
                return self.result.envs[anc]
        return default

    # -- calls into module-level helpers ----------------------------------------------------------
    def call(self, call: cst.Call, env: Env) -> None:
        if self.ctx.imports.is_(call.func, N.FORI_LOOP):
            # A loop body defined at module level or beside a nested kernel (often bound with
            # functools.partial); one defined inside the kernel is analysed where it stands.
            for body, loop in self.result.loops.items():
                if loop.call is call and isinstance(body, cst.FunctionDef) and body not in self.active:
                    parent = self._helper_parent(body)
                    if parent is not None:
                        params = self._role_params(body, env) or {}
                        self.function(body, self._loop_body_env(body, call, params, env, parent))
            return
        if not isinstance(call.func, cst.Name):
            return
        target = self.ctx.resolve_def(call.func.value, call)
        if target is None:
            options, chosen = self._dispatched(call, env)
            # Only a variant given refs depends on the blocks a rewrite would give them
            # (an activation picked by a flag and called on values does not).
            if chosen and self.site.kernel is not None and any(env.value(a.value).is_ref for a in call.args):
                self.result.dispatches.setdefault(self.site.kernel, (call, options))
            for fn in chosen:
                self._module_helper(fn, call, env)
            return
        self._module_helper(target, call, env)

    def _loop_body_env(self, body: cst.FunctionDef, call: cst.Call, params, env: Env, parent: Env) -> Env:
        """A loop body defined outside the kernel: with `functools.partial(body, x_ref=x_ref)` as
        the loop's body, the names the partial binds stand for the kernel's arguments (as a
        helper's do); `parent` reads its free names (the module's, or a wrapper's)."""
        bound = partial_arguments(self.ctx, body, call)
        if bound is None:
            return Env(self.ctx, body, parent, params, self.result.loops)
        partial, args = bound
        inner = HelperEnv(self.ctx, body, parent, params, self.result.loops, partial, env)
        inner.args = args
        return inner

    def _dispatched(self, call: cst.Call, env: Env) -> tuple[list[str], list[cst.FunctionDef]]:
        """`kernel = _variant_a if flag else ...` / assigned in each arm of an `if`, then
        `kernel(...)`: the names the scope binding it assigns to it, and the defs among them."""
        name = call.func.value  # type: ignore[attr-defined]
        owner = env.owner(name)
        names: list[str] = []
        found: list[cst.FunctionDef] = []
        for value in self.ctx.assignments(name, owner.scope) if owner is not None else ():
            for option in [value.body, value.orelse] if isinstance(value, cst.IfExp) else [value]:
                if not isinstance(option, cst.Name):
                    continue
                names.append(option.value)
                fn = self.ctx.resolve_def(option.value, call)
                if fn is not None and fn not in found:
                    found.append(fn)
        return names, found

    def _module_helper(self, target: cst.FunctionDef, call: cst.Call, env: Env) -> None:
        if target in self.active or target is self.site.kernel:
            return
        parent = self._helper_parent(target)
        if parent is None:
            return
        params = bind_args(target, call, env)
        self.function(target, HelperEnv(self.ctx, target, parent, params, self.result.loops, call, env))

    def _helper_parent(self, target: cst.FunctionDef) -> Optional[Env]:
        """Where a called helper's free names are read: the module, or for a helper defined
        beside a nested kernel (`def _tile(...)` next to `def kernel` in `def make_kernel(bs)`)
        the wrappers around it, whose names are Python values when the kernel is traced. A def
        inside the kernel (or one of its own functions) is handled where it is defined."""
        scope = self.ctx.scope_of(target)
        if scope is self.ctx.module:
            return self.module_env
        kernel = self.site.kernel
        if kernel is None or not any(s is scope for s in self.ctx.scope_chain(kernel)):
            return None
        return _enclosing_env(self.ctx, target, self.module_env, self.result.loops)

    # -- the accesses themselves -------------------------------------------------------------------
    def subscript(self, sub: cst.Subscript, fn, env: Env) -> None:
        self.record(index_uses(self.site, sub, fn, env))

    def record(self, uses: list[IndexUse]) -> None:
        for use in uses:
            key = (id(use.subscript), use.dim)
            if key not in self.seen:
                self.seen.add(key)
                self.result.uses.append(use)
