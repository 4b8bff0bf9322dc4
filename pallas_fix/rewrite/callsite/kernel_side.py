"""Call-site expressions written inside the kernel: `x.shape[0] // BS` at the pallas_call becomes
`x_ref.shape[0] // BS` in the kernel body (grid-to-loop writes the grid's sizes as loop bounds)."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from pallas_fix.analysis.context import ModuleContext
from pallas_fix.analysis.values.same_value import same_value_at
from pallas_fix.core.model import KernelSite
from pallas_fix.rewrite.callsite.call_timing import closure_change, operand_change
from pallas_fix.rewrite.callsite.reading import CallSite
from pallas_fix.rewrite.text.scopes import bindings, param_names


class KernelSide:
    """`x.shape[0] // BS` at the call becomes `x_ref.shape[0] // BS` in the kernel.

    A name keeps its meaning when the kernel sees the same binding (module level, or a wrapper
    both sit in); a call-site local assigned once is inlined; a value bound with
    functools.partial becomes the kernel parameter it was bound to; an input's shape becomes its
    ref's shape. Anything else has no kernel-side form: None."""

    def __init__(self, ctx: ModuleContext, site: KernelSite, cs: CallSite, env) -> None:
        self.ctx = ctx
        self.site = site
        self.cs = cs
        self.env = env
        self.kernel = site.kernel
        self.kernel_chain = [site.kernel] + ctx.scope_chain(site.kernel)
        self.why: Optional[str] = None  # a name rebound before the kernel gets it (rewrite.call_timing)

    def __call__(self, expr: cst.BaseExpression, depth: int = 0, at: Optional[cst.CSTNode] = None) -> Optional[cst.BaseExpression]:
        """`at`: where `expr` is written (its names resolve from there); default the pallas_call."""
        at = at if at is not None else self.site.call
        if depth > 12:
            return None
        if isinstance(expr, cst.Integer):
            return expr
        if isinstance(expr, cst.Name):
            return self._name(expr, depth, at)
        if isinstance(expr, cst.Subscript):
            return self._shape(expr, depth, at)
        if isinstance(expr, cst.BinaryOperation):
            left, right = self(expr.left, depth + 1, at), self(expr.right, depth + 1, at)
            if left is None or right is None:
                return None
            return expr.with_changes(left=_paren(left, expr.left), right=_paren(right, expr.right))
        if isinstance(expr, cst.UnaryOperation):
            inner = self(expr.expression, depth + 1, at)
            return None if inner is None else expr.with_changes(expression=_paren(inner, expr.expression))
        if isinstance(expr, cst.Call) and not any(a.star for a in expr.args):
            func = expr.func
            known = self.ctx.imports.qualify(func) is not None or (
                isinstance(func, cst.Name) and func.value in ("min", "max", "int", "abs")
            )
            if not known or self._shadowed_in_kernel(_head(func)):
                return None
            args = []
            for a in expr.args:
                v = self(a.value, depth + 1, at)
                if v is None:
                    return None
                args.append(a.with_changes(value=v))
            return expr.with_changes(args=args)
        return None

    def _name(self, name: cst.Name, depth: int, at: cst.CSTNode) -> Optional[cst.BaseExpression]:
        value = name.value
        for param, bound in self.site.partial_kwargs.items():
            if isinstance(bound, cst.Name) and bound.value == value and not self._rebound_in_kernel(param) and same_value_at(self.ctx, bound, at):
                return cst.Name(param)
        for scope in self.ctx.scope_chain(at):
            if isinstance(scope, cst.Module):
                return None if self._shadowed_in_kernel(value) else name
            if not _binds(self.ctx, scope, value):
                continue
            if scope in self.kernel_chain and not self._shadowed_in_kernel(value, below=scope):
                # a wrapper's local that the kernel closes over: read when the call runs
                self.why = closure_change(self.ctx, self.site, value, at) or self.why
                return None if self.why else name
            values = self.ctx.assignments(value, scope)
            params = param_names(scope)
            if len(values) == 1 and value not in params:
                return self(values[0], depth + 1, values[0])
            return None
        return None

    def _shape(self, sub: cst.Subscript, depth: int, at: cst.CSTNode) -> Optional[cst.BaseExpression]:
        base = sub.value
        if not (isinstance(base, cst.Attribute) and base.attr.value == "shape" and isinstance(base.value, cst.Name)):
            return None
        for slot in self.cs.slots.values():
            if slot.kind == "in" and isinstance(slot.arg, cst.Name) and slot.arg.value == base.value.value:
                self.why = operand_change(self.ctx, self.site, slot.arg, at) or self.why
                if self._rebound_in_kernel(slot.param) or self.why:
                    return None  # the kernel's ref is not the array `x` names here (rewrite.call_timing)
                return sub.with_changes(value=base.with_changes(value=cst.Name(slot.param)))
        inner = self._name(base.value, depth + 1, at)
        if inner is None or not isinstance(inner, cst.Name):
            return None
        return sub.with_changes(value=base.with_changes(value=inner))

    def _rebound_in_kernel(self, name: str) -> bool:
        return bool(self.ctx.assignments(name, self.kernel)) or name in bindings(self.kernel.body, nested=True)

    def _shadowed_in_kernel(self, name: Optional[str], below: Optional[cst.CSTNode] = None) -> bool:
        """Bound in the kernel or in a function between the kernel and `below` (default: module)."""
        if name is None:
            return True
        for scope in self.kernel_chain:
            if scope is below or isinstance(scope, cst.Module):
                return False
            if _binds(self.ctx, scope, name):
                return True
        return False



def _binds(ctx: ModuleContext, scope, name: str) -> bool:
    if isinstance(scope, cst.Lambda):
        return name in {p.name.value for p in scope.params.params}
    if name in param_names(scope):
        return True
    if ctx.assignments(name, scope) or name in ctx.local_defs(scope):
        return True
    return name in bindings(scope.body, nested=True)


def _head(func: cst.BaseExpression) -> Optional[str]:
    while isinstance(func, cst.Attribute):
        func = func.value
    return func.value if isinstance(func, cst.Name) else None


def _paren(expr: cst.BaseExpression, original: cst.BaseExpression) -> cst.BaseExpression:
    """Parenthesise a substituted operand (an inlined `n // bs` inside `2 * n`)."""
    if isinstance(original, (cst.BinaryOperation, cst.UnaryOperation)):
        return expr  # rebuilt in place: same operator, same precedence
    if isinstance(expr, (cst.BinaryOperation, cst.UnaryOperation)) and not expr.lpar:
        return expr.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    return expr
