"""A carry's shape written with kernel-local names, rewritten for the pallas_call (R2's scratch).

The translator (translate.py) already writes partial-bound keywords, defaults, module constants
and `x_ref.shape[i]` (the block's size, from the ref's BlockSpec) at the call site. Kernels also
size their carries from values they loaded: `q = q_ref[...].astype(jnp.float32)`, then
`d = q.shape[-1]` and `jnp.zeros((bq, d), jnp.float32)`. Such a value has the shape of the ref
it was loaded from, so `q.shape[-1]` is `q_ref.shape[1]`, which the translator can write.

The value's shape is followed only through what keeps it exactly: a whole-ref load (`x_ref[...]`,
`x_ref[:, :]`, `x_ref[0]` dropping integer-indexed dims), `.astype(...)`, unary minus, arithmetic
with a numeric literal, and elementwise jnp functions of one array. Each name must be bound once
at the kernel's top level, or, for the value, by top-level assignments of which the last one
before the read decides. A dim of a ref the rewrite blocks along the new axis is refused: after
the lift the kernel would read the block's size there, not the extent the carry was sized by."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from pallas_fix.core.plans import Refuse
from pallas_fix.rewrite.text.scopes import bindings
from pallas_fix.rewrite.text.statements import body_statements

_ELEMENTWISE = frozenset({
    "exp", "log", "abs", "sqrt", "tanh", "negative", "square", "sin", "cos", "sign", "reciprocal", "asarray",
})


def call_site_shape(ctx, region, shape: cst.BaseExpression, translate, blocked: set[tuple[str, int]]) -> Optional[cst.BaseExpression]:
    """`shape` written at the call site; None when some name has no call-site meaning.
    `blocked`: (ref, dim) pairs the rewrite blocks along the new axis."""
    env = region.env
    direct = translate(shape, env)
    if direct is not None:
        return direct
    rewritten = _ShapeReads(ctx, region, translate, blocked).rewrite(shape)
    return translate(rewritten, env) if rewritten is not None else None


class _ShapeReads:
    """Rewrites `d` (bound to `q.shape[-1]`) and `q.shape` into reads of ref shapes."""

    def __init__(self, ctx, region, translate, blocked: set[tuple[str, int]]) -> None:
        self.ctx = ctx
        kernel = region.site.kernel
        self.stmts = body_statements(kernel)
        self.loop_at = self.stmts.index(region.statement)
        self.refs = {p.name.value for p in kernel.params.params}
        # Keyword-only parameters (what functools.partial binds): static Python values.
        self.static_params = {p.name.value for p in kernel.params.kwonly_params}
        self.translate = translate
        self.blocked = blocked

    def rewrite(self, expr: cst.BaseExpression) -> Optional[cst.BaseExpression]:
        if isinstance(expr, (cst.Tuple, cst.List)):
            items = [self.rewrite(e.value) for e in expr.elements]
            if any(i is None for i in items):
                return None
            return expr.with_changes(elements=[e.with_changes(value=i) for e, i in zip(expr.elements, items)])
        if isinstance(expr, cst.Attribute) and expr.attr.value == "shape":
            dims = self._value_dims(expr.value, None)
            return None if dims is None else cst.Tuple([cst.Element(d) for d in dims])
        if isinstance(expr, cst.Subscript):
            return self._shape_dim(expr, None) or expr
        if isinstance(expr, cst.Name):
            return self._shape_name(expr) or expr  # else the translator decides (a parameter, a constant)
        if isinstance(expr, cst.BinaryOperation):
            left, right = self.rewrite(expr.left), self.rewrite(expr.right)
            return None if left is None or right is None else expr.with_changes(left=left, right=right)
        return expr

    def _shape_name(self, name: cst.Name) -> Optional[cst.BaseExpression]:
        """`d` bound once at the kernel's top level by `d = v.shape[-1]` or `n, d = v.shape`."""
        stmt = self._single_binding(name.value)
        if stmt is None:
            return None
        assign = stmt.body[0]
        target, value = assign.targets[0].target, assign.value
        if isinstance(target, cst.Name):
            return self._shape_dim(value, stmt) if isinstance(value, cst.Subscript) else None
        names = [e.value for e in target.elements] if isinstance(target, (cst.Tuple, cst.List)) else []
        if not (isinstance(value, cst.Attribute) and value.attr.value == "shape") or not all(isinstance(n, cst.Name) for n in names):
            return None
        dims = self._value_dims(value.value, stmt)
        if dims is None or len(dims) != len(names):
            return None
        return dims[[n.value for n in names].index(name.value)]

    def _single_binding(self, name: str) -> Optional[cst.SimpleStatementLine]:
        """The one top-level `name = ...` / `a, name = ...` statement binding `name` in the kernel."""
        found = [s for s in self.stmts if name in set(bindings(s, nested=False))]
        if len(found) != 1 or any(name in set(bindings(s, nested=True)) for s in self.stmts if s is not found[0]):
            return None
        stmt = found[0]
        small = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 else None
        if not (isinstance(small, cst.Assign) and len(small.targets) == 1):
            return None
        return stmt

    def _shape_dim(self, sub: cst.Subscript, at) -> Optional[cst.BaseExpression]:
        """`v.shape[i]` as a ref shape read, when `v`'s shape follows from a ref."""
        base = sub.value
        if not (isinstance(base, cst.Attribute) and base.attr.value == "shape" and len(sub.slice) == 1):
            return None
        index = sub.slice[0].slice
        if not isinstance(index, cst.Index):
            return None
        dims = self._value_dims(base.value, at)
        i = _int(index.value)
        if dims is None or i is None or not -len(dims) <= i < len(dims):
            return None
        return dims[i]

    def _value_dims(self, value: cst.BaseExpression, at) -> Optional[list[cst.BaseExpression]]:
        """The kernel-side dims of an array value, as `x_ref.shape[j]` reads."""
        if isinstance(value, cst.Name) and value.value in self.refs:
            rank = self._rank(value.value)  # unknown is not 0-d: `()` would make the carry a scalar
            return self._ref_dims(value.value, range(rank)) if rank is not None else None
        if isinstance(value, cst.Name):
            return self._name_dims(value.value, at)
        if isinstance(value, cst.Subscript) and isinstance(value.value, cst.Name) and value.value.value in self.refs:
            return self._load_dims(value)
        if isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value == "astype":
            return self._value_dims(value.func.value, at)
        if isinstance(value, cst.Call) and len(value.args) == 1 and self._elementwise(value.func):
            return self._value_dims(value.args[0].value, at)
        if isinstance(value, cst.UnaryOperation) and isinstance(value.operator, cst.Minus):
            return self._value_dims(value.expression, at)
        if isinstance(value, cst.BinaryOperation):
            if self._static_scalar(value.right):
                return self._value_dims(value.left, at)
            if self._static_scalar(value.left):
                return self._value_dims(value.right, at)
        return None

    def _static_scalar(self, expr: cst.BaseExpression, depth: int = 0) -> bool:
        """A Python number the kernel is handed or computes (`sm_scale`, `1.0 / math.sqrt(d)`):
        arithmetic with it keeps an array's shape. (Were it an array after all, the scratch
        buffer's shape would not match and the rewrite would fail to trace, not run wrong.)"""
        if depth > 8:
            return False
        if _is_number(expr):
            return True
        if isinstance(expr, cst.Name):
            if expr.value in self.static_params:
                return True
            stmt = self._single_binding(expr.value)
            value = stmt.body[0].value if stmt is not None and isinstance(stmt.body[0].targets[0].target, cst.Name) else None
            return value is not None and self._static_scalar(value, depth + 1)
        if isinstance(expr, cst.UnaryOperation):
            return self._static_scalar(expr.expression, depth + 1)
        if isinstance(expr, cst.BinaryOperation):
            return self._static_scalar(expr.left, depth + 1) and self._static_scalar(expr.right, depth + 1)
        if isinstance(expr, cst.Call) and (self.ctx.imports.qualify(expr.func) or "").startswith("math."):
            return all(self._static_scalar(a.value, depth + 1) for a in expr.args)
        return False

    def _load_dims(self, sub: cst.Subscript) -> Optional[list[cst.BaseExpression]]:
        """`x_ref[...]`, `x_ref[:, :]`, `x_ref[0]`: the dims a whole-ref load keeps."""
        ref = sub.value.value  # type: ignore[attr-defined]
        rank = self._rank(ref)
        if rank is None:
            return None
        items = [e.slice for e in sub.slice]
        if len(items) == 1 and isinstance(items[0], cst.Index) and isinstance(items[0].value, cst.Ellipsis):
            return self._ref_dims(ref, range(rank))
        if len(items) > rank:
            return None
        kept = []
        for d, item in enumerate(items):
            if isinstance(item, cst.Slice) and item.lower is None and item.upper is None and item.step is None:
                kept.append(d)
            elif not (isinstance(item, cst.Index) and _int(item.value) is not None):
                return None  # a window or an ellipsis inside: not the whole dim
        return self._ref_dims(ref, [*kept, *range(len(items), rank)])

    def _ref_dims(self, ref: str, dims) -> Optional[list[cst.BaseExpression]]:
        out = []
        for d in dims:
            if (ref, d) in self.blocked:
                raise Refuse(f"the carry is sized by `{ref}`'s dim {d}, which the rewrite blocks along the new axis")
            out.append(cst.parse_expression(f"{ref}.shape[{d}]"))
        return out

    def _rank(self, ref: str) -> Optional[int]:
        rank_of = getattr(self.translate, "ref_rank", None)
        return rank_of(ref) if rank_of is not None else None

    def _elementwise(self, func: cst.BaseExpression) -> bool:
        q = self.ctx.imports.qualify(func) or ""
        return q.startswith(("jax.numpy.", "jax.lax.")) and q.rsplit(".", 1)[1] in _ELEMENTWISE

    def _bindings(self, name: str) -> Optional[list[tuple[cst.SimpleStatementLine, cst.BaseExpression]]]:
        """Each top-level `name = value` of the kernel; None when another kind of binding exists."""
        found = []
        for stmt in self.stmts:
            if name not in set(bindings(stmt, nested=False)):
                continue
            small = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 else None
            if not (isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name)):
                return None
            found.append((stmt, small.value))
        return found

    def _name_dims(self, name: str, at) -> Optional[list[cst.BaseExpression]]:
        """The dims of the value `name` holds at statement `at`: its last top-level assignment
        before `at`. `at` None: somewhere before the loop (the carry's init), so every
        assignment before the loop must give the same dims."""
        found = self._bindings(name)
        if not found:
            return None
        limit = self.stmts.index(at) if at is not None else self.loop_at
        before = [(s, v) for s, v in found if self.stmts.index(s) < limit]
        if not before:
            return None
        candidates = before[-1:] if at is not None else before
        dims = [self._value_dims(v, s) for s, v in candidates]
        if any(d is None for d in dims) or len({tuple(_text(x) for x in d) for d in dims}) != 1:  # type: ignore[union-attr]
            return None
        return dims[0]


def _text(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)


def _int(expr: cst.BaseExpression) -> Optional[int]:
    if isinstance(expr, cst.Integer):
        return int(expr.evaluated_value)
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus) and isinstance(expr.expression, cst.Integer):
        return -int(expr.expression.evaluated_value)
    return None


def _is_number(expr: cst.BaseExpression) -> bool:
    if isinstance(expr, (cst.Integer, cst.Float)):
        return True
    if isinstance(expr, cst.UnaryOperation):
        return _is_number(expr.expression)
    if isinstance(expr, cst.BinaryOperation):
        return _is_number(expr.left) and _is_number(expr.right)
    return False

