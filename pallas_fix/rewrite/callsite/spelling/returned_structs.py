"""The list a call of a small builder function returns, written in the call's own names.

    def _fwd_out_shape(r):
        B, N, T, H = r.shape
        return [jax.ShapeDtypeStruct((B, N, T, H), r.dtype),
                jax.ShapeDtypeStruct((B, N, T // CHUNK_LEN, H, H), jnp.float32)]

    launch(kernel, _fwd_out_shape(x), ...)

Read by substitution: the parameter `r` is the argument the call passes (`x`, the very node at
the call), `B` is `x.shape[0]`, `T // CHUNK_LEN` is `x.shape[2] // CHUNK_LEN` with the module's
`CHUNK_LEN`: `returned_value` gives the returned expression so rebuilt (rewrite.callsite.spelling.
grafts), and the caller reads its items. Only a function that is, line by line, what the value is:
plain assignments (names, or unpacking a `.shape` or a tuple) and one final `return`; no branch,
loop or other statement, no parameter rebound, every parameter passed by the call (a default
is evaluated where the def stands), the def the only binding of its name, not decorated. A
function that is not so is a CallSiteError naming what to change; a call of something that is
not a def of this module is not read (None).
"""

from __future__ import annotations

from typing import Optional

import libcst as cst

from pallas_fix.analysis.context import ModuleContext, walk
from pallas_fix.analysis.effects.syntax import param_names
from pallas_fix.analysis.values.bindings import binding_count, declared_elsewhere
from pallas_fix.rewrite.callsite.spelling.grafts import item, substitute
from pallas_fix.rewrite.callsite.spelling.operands import CallSiteError
from pallas_fix.rewrite.text.syntax import elements

_ADVICE = "write the list of `jax.ShapeDtypeStruct`s at the call (sizes named there) to get this fix"


def returned_value(ctx: ModuleContext, call: cst.Call) -> Optional[cst.BaseExpression]:
    """What `call` returns, in the names of the place it stands; None when `call` does not call
    a def of this module by its name."""
    if not isinstance(call.func, cst.Name):
        return None
    fn = ctx.resolve_def(call.func.value, call)
    if fn is None:
        return None
    reader = _Reader(ctx, fn, call)
    return reader.read()


class _Reader:
    def __init__(self, ctx: ModuleContext, fn: cst.FunctionDef, call: cst.Call) -> None:
        self.ctx, self.fn, self.call = ctx, fn, call
        self.what = f"the out_shape `{ctx.code(call).strip()}` is built by `{fn.name.value}`"
        self.values: dict[str, cst.BaseExpression] = {}  # parameter or local -> its value at the call
        self.params: set[str] = set()
        self.bound = _assigned_names(fn)

    def refuse(self, why: str, node: Optional[cst.CSTNode] = None) -> CallSiteError:
        at = f" (line {self.ctx.span(node).line})" if node is not None else ""
        return CallSiteError(f"{self.what}, {why}{at}; pallas-fix reads such a function only when it is plain "
                             f"assignments and one `return` of the list: {_ADVICE}")

    def read(self) -> cst.BaseExpression:
        self._check_def()
        self._bind_parameters()
        body = self.fn.body.body if isinstance(self.fn.body, cst.IndentedBlock) else [self.fn.body]
        returned: Optional[cst.BaseExpression] = None
        for n, stmt in enumerate(body):
            if not isinstance(stmt, (cst.SimpleStatementLine, cst.SimpleStatementSuite)):
                raise self.refuse(f"whose body has {_kind(stmt)}", stmt)
            for small in stmt.body:
                if returned is not None:
                    raise self.refuse("which has code after its `return`", stmt)
                if isinstance(small, cst.Return):
                    if small.value is None:
                        raise self.refuse("which returns nothing", small)
                    returned = self._translate(small.value)
                elif isinstance(small, cst.Assign):
                    self._assign(small)
                elif not (n == 0 and isinstance(small, cst.Expr) and isinstance(small.value, (cst.SimpleString, cst.ConcatenatedString))):
                    raise self.refuse(f"whose body has the statement `{self.ctx.code(small).strip()}`", small)
        if returned is None:
            raise self.refuse("which has no `return` pallas-fix can read")
        return returned

    def _check_def(self) -> None:
        fn, name = self.fn, self.fn.name.value
        if fn.decorators:
            raise self.refuse("which is decorated (the call runs what the decorator returns)", fn)
        if fn.asynchronous is not None:
            raise self.refuse("which is async", fn)
        if binding_count(self.ctx, self.ctx.scope_of(fn), name) != 1 or name in declared_elsewhere(self.ctx):
            raise self.refuse(f"and `{name}` is bound more than once (or named by `global`), so the call may run another function", fn)
        p = fn.params
        if isinstance(p.star_arg, cst.Param) or isinstance(p.star_kwarg, cst.Param):
            raise self.refuse("which takes `*args` or `**kwargs`", fn)

    def _bind_parameters(self) -> None:
        p = self.fn.params
        positional = [*p.posonly_params, *p.params]
        by_name = {q.name.value: q for q in [*positional, *p.kwonly_params]}
        args = self.call.args
        if any(a.star for a in args):
            raise self.refuse("and the call passes `*` or `**` arguments", self.call)
        plain = [a for a in args if a.keyword is None]
        if len(plain) > len(positional):
            raise self.refuse("and the call passes more arguments than it takes", self.call)
        for q, a in zip(positional, plain):
            self.values[q.name.value] = a.value
        for a in args:
            if a.keyword is not None:
                if a.keyword.value not in by_name:
                    raise self.refuse(f"which takes no parameter `{a.keyword.value}`", self.call)
                self.values[a.keyword.value] = a.value
        for name, q in by_name.items():
            if name not in self.values:
                raise self.refuse(f"and the call leaves `{name}` to its default, evaluated where the def stands; pass it", self.call)
        self.params = set(by_name)

    def _assign(self, stmt: cst.Assign) -> None:
        value = self._translate(stmt.value)
        for target in stmt.targets:
            self._bind(target.target, value, stmt)

    def _bind(self, target: cst.BaseExpression, value: cst.BaseExpression, stmt: cst.CSTNode) -> None:
        if isinstance(target, cst.Name):
            if target.value in self.params:
                raise self.refuse(f"which rebinds its parameter `{target.value}`", stmt)
            if target.value in self.values:
                raise self.refuse(f"which binds `{target.value}` twice", stmt)
            self.values[target.value] = value
            return
        targets = elements(target)
        if targets is None:
            raise self.refuse(f"which assigns to `{self.ctx.code(target).strip()}`", stmt)
        items = elements(value)
        if items is None and isinstance(value, cst.Attribute) and value.attr.value == "shape":
            items = [item(value, i) for i in range(len(targets))]  # `B, T = r.shape`: the rank is len(targets), or the original fails
        if items is None or len(items) != len(targets):
            raise self.refuse(f"which unpacks `{self.ctx.code(value).strip()}`, whose items pallas-fix cannot read", stmt)
        for t, v in zip(targets, items):
            self._bind(t, v, stmt)

    def _translate(self, expr: cst.BaseExpression) -> cst.BaseExpression:
        """`expr` in the call's names. A comprehension's own target stays (the list reader
        substitutes it); other scopes inside the expression are not read."""
        own: set[str] = set()
        for node in walk(expr):
            if isinstance(node, (cst.Lambda, cst.SetComp, cst.DictComp, cst.NamedExpr)):
                raise self.refuse(f"which computes with `{self.ctx.code(node).strip()}`", node)
            if isinstance(node, cst.CompFor):
                own |= {n.value for n in walk(node.target) if isinstance(n, cst.Name)}
        return substitute(expr, lambda name: None if name.value in own else self._lookup(name))  # type: ignore[return-value]

    def _lookup(self, name: cst.Name) -> Optional[cst.BaseExpression]:
        if name.value in self.values:
            return self.values[name.value]
        if name.value in self.bound:
            raise self.refuse(f"which reads `{name.value}` before binding it", name)
        if _binding_scope(self.ctx, name.value, name) is not _binding_scope(self.ctx, name.value, self.call):
            raise self.refuse(f"which reads `{name.value}`, a name that means something else at the call "
                              f"(line {self.ctx.span(self.call).line})")
        return None  # a module constant, an import, a builtin: the node itself, read where it is written


def _binding_scope(ctx: ModuleContext, name: str, at: cst.CSTNode):
    for scope in ctx.scope_chain(at):
        params = param_names(scope) if isinstance(scope, (cst.FunctionDef, cst.Lambda)) else ()
        if binding_count(ctx, scope, name) or name in params:
            return scope
    return None


def _assigned_names(fn: cst.FunctionDef) -> set[str]:
    out: set[str] = set()
    for node in walk(fn.body):
        if isinstance(node, cst.AssignTarget):
            out |= {n.value for n in walk(node.target) if isinstance(n, cst.Name)}
    return out


def _kind(stmt: cst.CSTNode) -> str:
    kinds = {cst.If: "a branch (`if`)", cst.For: "a loop (`for`)", cst.While: "a loop (`while`)", cst.With: "a `with`",
             cst.Try: "a `try`", cst.FunctionDef: "a nested `def`", cst.ClassDef: "a class"}
    return next((v for k, v in kinds.items() if isinstance(stmt, k)), f"a `{type(stmt).__name__}` statement")
