"""Rewrite a kernel-side static expression so that it means the same at the pallas_call site.

Block sizes and trip counts are written inside kernels (`bs`, `x_ref.shape[0] // bs`) but grids
and BlockSpecs live at the call site, where `bs` may be `block_size` (bound by
functools.partial) and `x_ref` is the argument `x`. Returns None when some name has no
call-site meaning; the caller then refuses the rewrite. A size that has one but holds another
value there (rebound before the call runs, rewrite.call_timing) raises CallSiteError: the reason.
"""

from __future__ import annotations

import copy
from typing import Callable, Optional

import libcst as cst

from pallas_fix.analysis.context import ModuleContext
from pallas_fix.analysis.discovery.helper_calls import HelperEnv, static_argument
from pallas_fix.core import names as N
from pallas_fix.core.model import KernelSite
from pallas_fix.analysis.values.bindings import Unpack, scope_bindings, single_binding
from pallas_fix.analysis.values.provenance import Env
from pallas_fix.analysis.values.reaching import OUTER
from pallas_fix.analysis.values.same_value import same_value_at
from pallas_fix.rewrite.callsite.call_timing import call_anchor, closure_change
from pallas_fix.rewrite.callsite.spelling.operands import CallSiteError

def grid_placeholder(axis: int) -> str:
    """The name standing for grid axis `axis`'s index in a Translator.grid_expression."""
    return f"__grid{axis}__"


RefShape = Callable[[str, int], Optional[cst.BaseExpression]]  # (ref param, dim) -> call-site dim


class Translator:
    def __init__(self, ctx: ModuleContext, site: KernelSite, ref_shape: RefShape, ref_rank=None, ref_dtype=None) -> None:
        self.ctx = ctx
        self.site = site
        self.ref_shape = ref_shape
        self.ref_rank = ref_rank  # ref param -> rank of the kernel's view, when known
        self.ref_dtype = ref_dtype  # ref param -> its dtype written at the call site, when known
        # Where the text is written and run: the pallas_call, or the helper's call that passes
        # this kernel its own specs (KernelSite.forwarded).
        self.at = call_anchor(ctx, site)
        self.call_scopes = ctx.scope_chain(self.at)
        self.program_ids = False  # grid_expression: pl.program_id(k) becomes grid_placeholder(k)

    def grid_expression(self, expr: cst.BaseExpression, env: Env) -> Optional[cst.BaseExpression]:
        """`expr`, a function of pl.program_id and of values the call site can write (causal
        attention's `(qi + 1) * block_q // block_k`), written for an index_map: each
        `pl.program_id(k)` as the name `grid_placeholder(k)`, which the index_map's writer
        replaces by its parameter for grid axis k. None when some part has no such form."""
        with_ids = copy.copy(self)
        with_ids.program_ids = True
        return with_ids(expr, env)

    def __call__(self, expr: cst.BaseExpression, env: Env, depth: int = 0) -> Optional[cst.BaseExpression]:
        if depth > 16:
            return None
        if isinstance(expr, (cst.Integer, cst.Float)):
            return expr
        if isinstance(expr, cst.Name):
            return self._name(expr, env, depth)
        if isinstance(expr, cst.Subscript):
            return self._shape_dim(expr, env)
        if isinstance(expr, cst.Attribute) and self.ctx.imports.qualify(expr) is not None:
            return expr  # `jnp.float32`: an imported name means the same everywhere
        if isinstance(expr, cst.Attribute) and expr.attr.value == "shape" and isinstance(expr.value, cst.Name):
            return self._whole_shape(expr.value.value, env)
        if isinstance(expr, cst.Attribute) and expr.attr.value == "dtype" and isinstance(expr.value, cst.Name):
            return self._dtype(expr.value.value, env)
        if isinstance(expr, (cst.Tuple, cst.List)):
            items = self._each(expr.elements, env, depth)
            return None if items is None else expr.with_changes(elements=items)
        if isinstance(expr, cst.BinaryOperation):
            left = self(expr.left, env, depth + 1)
            right = self(expr.right, env, depth + 1)
            if left is None or right is None:
                return None
            return expr.with_changes(left=_paren(left), right=_paren(right))
        if isinstance(expr, cst.UnaryOperation):
            inner = self(expr.expression, env, depth + 1)
            return None if inner is None else expr.with_changes(expression=_paren(inner))
        if isinstance(expr, cst.Call) and self.program_ids and (self.ctx.imports.qualify(expr.func) or "") in N.PROGRAM_ID:
            axis = env.static_int(expr.args[0].value) if len(expr.args) == 1 and expr.args[0].keyword is None else None
            return None if axis is None else cst.Name(grid_placeholder(axis))
        if isinstance(expr, cst.Call) and self._module_level_callable(expr.func):
            args = self._each(expr.args, env, depth)
            return None if args is None else expr.with_changes(args=args)
        return None

    def _each(self, parts, env: Env, depth: int) -> Optional[list]:
        """Tuple elements or call arguments, each with its value translated; None if one fails."""
        out = []
        for part in parts:
            value = self(part.value, env, depth + 1)
            if value is None:
                return None
            out.append(part.with_changes(value=value))
        return out

    def _module_level_callable(self, func: cst.BaseExpression) -> bool:
        # `pl.cdiv`, `math.ceil`, `min`: names that mean the same everywhere in the module.
        if isinstance(func, cst.Name):
            return func.value in ("min", "max", "int", "abs") or self.ctx.imports.qualify(func) is not None
        return self.ctx.imports.qualify(func) is not None

    def _name(self, name: cst.Name, env: Env, depth: int) -> Optional[cst.BaseExpression]:
        owner = env.owner(name.value)
        if owner is None:
            # Module-level (or builtin): the same name works at the call site unless shadowed.
            if self._shadowed_at_call(name.value):
                return None
            return name
        if isinstance(owner.scope, cst.Module):
            return None if self._shadowed_at_call(name.value) else name
        if owner.scope in self.call_scopes:
            # A wrapper's name seen from a nested kernel: visible at the call too, if assigned
            # before it. We accept it only when the call sits in that same wrapper, and only when
            # nothing rebinds it before the call runs (the kernel reads it then).
            reason = closure_change(self.ctx, self.site, name.value)
            if reason is not None:
                raise CallSiteError(reason)
            return name
        if isinstance(owner, HelperEnv) and name.value in owner.params:  # a slice helper's size: its caller's argument
            caller, arg = static_argument(owner, name)
            return None if arg is name else self(arg, caller, depth + 1)
        if name.value in owner.params and owner.bindings().get(name.value):
            # A parameter the body rebinds (`BT = k_ref.shape[1]`) holds no single value: the read
            # means the binding that reaches it in straight-line code, or nothing pallas-fix knows.
            return self._rebound_param(name, owner, depth)
        return self._bound_once(name, owner, depth)

    def _rebound_param(self, name: cst.Name, owner, depth: int) -> Optional[cst.BaseExpression]:
        found = owner.reaching(name)
        if found is None:
            return None
        binder, binding = found
        if binding is OUTER:  # read before any rebinding: the argument the call passed
            return self._param(name, binder, depth)
        how, node = binding
        return self._held(node, binder, depth) if how == "assign" else None

    def _bound_once(self, name: cst.Name, owner, depth: int) -> Optional[cst.BaseExpression]:
        if name.value in owner.params:
            return self._param(name, owner, depth)
        value = single_binding(owner.bindings().get(name.value, []))
        return None if value is None else self._held(value, owner, depth)

    def _held(self, value, owner, depth: int) -> Optional[cst.BaseExpression]:
        """What an assignment binds, at the call: `rows, cols = x_ref.shape` the call-site dim of
        the ref's view, an expression its translation (a traced one only for a grid expression)."""
        if isinstance(value, Unpack):
            inner = value.value
            if isinstance(inner, cst.Attribute) and inner.attr.value == "shape" and isinstance(inner.value, cst.Name):
                return self.ref_shape(inner.value.value, value.index)
            return None
        if not isinstance(value, cst.BaseExpression) or (owner.value(value).dynamic and not self.program_ids):
            return None
        return self(value, owner, depth + 1)

    def _param(self, name: cst.Name, owner, depth: int) -> Optional[cst.BaseExpression]:
        """A kernel (or helper) parameter the read sees as passed: what the call site binds it to."""
        bound = owner.param_exprs.get(name.value)
        if bound is None:
            return None
        if name.value in self.site.partial_kwargs or bound in self.site.partial_args:
            # written at the call site already, unless a name in it was rebound since the partial
            return bound if same_value_at(self.ctx, bound, self.at) else None
        return self(bound, owner.parent or owner, depth + 1)  # a default value

    def _shape_dim(self, sub: cst.Subscript, env: Env) -> Optional[cst.BaseExpression]:
        base = sub.value
        if not (isinstance(base, cst.Attribute) and base.attr.value == "shape" and isinstance(base.value, cst.Name)):
            return None
        if len(sub.slice) != 1 or not isinstance(sub.slice[0].slice, cst.Index):
            return None
        dim = env.static_int(sub.slice[0].slice.value)
        if dim is None:
            return None
        return self.ref_shape(base.value.value, dim)

    def _whole_shape(self, ref: str, env: Env) -> Optional[cst.BaseExpression]:
        """`o_ref.shape` as a call-site tuple, dim by dim (the kernel sees the block's shape)."""
        if self.ref_rank is None:
            return None
        rank = self.ref_rank(ref)
        if rank is None:
            return None
        dims = []
        for d in range(rank):
            dim = self.ref_shape(ref, d)
            if dim is None:
                return None
            dims.append(cst.Element(dim))
        return cst.Tuple(dims)

    def _dtype(self, ref: str, env: Env) -> Optional[cst.BaseExpression]:
        """`x_ref.dtype` of a kernel ref parameter, written at the call site."""
        owner = env.owner(ref)
        if self.ref_dtype is None or owner is None or ref not in owner.params or owner.scope is not self.site.kernel:
            return None
        return self.ref_dtype(ref)

    def _shadowed_at_call(self, name: str) -> bool:
        for scope in self.call_scopes:
            if isinstance(scope, cst.Module):
                return False
            if isinstance(scope, cst.FunctionDef):
                params = {p.name.value for p in scope.params.params} | {p.name.value for p in scope.params.kwonly_params}
                # Any binding shadows: `B, H = x.shape` as much as `H = ...`.
                if name in params or name in scope_bindings(self.ctx, scope):
                    return True
        return False


def _paren(expr: cst.BaseExpression) -> cst.BaseExpression:
    if isinstance(expr, (cst.BinaryOperation, cst.UnaryOperation)) and not expr.lpar:
        return expr.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    return expr


def simplify(expr: cst.BaseExpression) -> cst.BaseExpression:
    """Simplify, then drop parentheses around the whole result (it stands alone)."""
    out = _simplify(expr)
    return out.with_changes(lpar=[], rpar=[]) if getattr(out, "lpar", None) else out


def _simplify(expr: cst.BaseExpression) -> cst.BaseExpression:
    """Undo the arithmetic that translation stacks up: `(n + 1) - 1` -> `n`, `(n * bs) // bs` -> `n`,
    and parentheses around atoms. Only identities that hold for every integer."""

    def code(node: cst.CSTNode) -> str:
        return cst.Module([]).code_for_node(node.with_changes(lpar=[], rpar=[]) if hasattr(node, "lpar") else node)

    def bare(node: cst.BaseExpression) -> cst.BaseExpression:
        if isinstance(node, (cst.Name, cst.Attribute, cst.Subscript, cst.Integer, cst.Call)) and node.lpar:
            return node.with_changes(lpar=[], rpar=[])
        return node

    if isinstance(expr, cst.BinaryOperation):
        left, right = _simplify(expr.left), _simplify(expr.right)
        expr = expr.with_changes(left=left, right=right)
        inner = left
        if isinstance(expr.operator, cst.Subtract) and isinstance(inner, cst.BinaryOperation) and isinstance(inner.operator, cst.Add):
            if code(inner.right) == code(right):
                return _keep_parens(bare(inner.left), expr)
        if isinstance(expr.operator, cst.FloorDivide) and isinstance(inner, cst.BinaryOperation) and isinstance(inner.operator, cst.Multiply):
            if code(inner.right) == code(right):
                return _keep_parens(bare(inner.left), expr)
            if code(inner.left) == code(right):
                return _keep_parens(bare(inner.right), expr)
        return expr.with_changes(left=bare(expr.left) if not isinstance(expr.left, cst.BinaryOperation) else expr.left,
                                 right=bare(expr.right) if not isinstance(expr.right, cst.BinaryOperation) else expr.right)
    return bare(expr)


def _keep_parens(result: cst.BaseExpression, original: cst.BaseExpression) -> cst.BaseExpression:
    if isinstance(result, cst.BinaryOperation) and getattr(original, "lpar", None):
        return result.with_changes(lpar=original.lpar, rpar=original.rpar)
    return result
