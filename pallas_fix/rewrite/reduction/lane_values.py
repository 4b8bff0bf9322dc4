"""Which values of an R2 step are lane-dense stand-ins, and the step's statements with them
widened where they meet exact values (reduction.lanes says why and when). A class per value:
L, a `(rows, 128)` stand-in for a `(rows, 1)` value; C, an exact value that broadcasts against
`(rows, 1)` into `(rows, 1)` (a number, a keepdims reduction over the last axis); F, any other
exact value. Raises NoLanes where an L value has a use this cannot keep exact.

May import core, analysis and rewrite.text."""

from __future__ import annotations

from typing import Optional, Protocol

import libcst as cst

from pallas_fix.analysis.context import walk
from pallas_fix.rewrite.text.syntax import code, names_in

L, C, F = "L", "C", "F"
_UNARY = frozenset(
    f"jax.numpy.{f}" for f in (
        "exp", "exp2", "log", "log2", "log1p", "expm1", "sqrt", "abs", "absolute", "negative", "tanh", "sin",
        "cos", "square", "reciprocal", "sign", "floor", "ceil", "isnan", "isinf", "isfinite", "logical_not",
    )
) | frozenset(f"jax.lax.{f}" for f in ("exp", "exp2", "log", "log1p", "expm1", "sqrt", "rsqrt", "abs", "tanh", "logistic", "neg"))
_NARY = frozenset(
    f"jax.numpy.{f}" for f in (
        "maximum", "minimum", "add", "subtract", "multiply", "divide", "true_divide", "power", "where",
        "logaddexp", "fmax", "fmin", "greater", "less", "equal", "logical_and", "logical_or",
    )
)
_REDUCTIONS = frozenset(f"jax.numpy.{f}" for f in ("max", "min", "sum", "mean", "amax", "amin", "prod"))
_REDUCTION_METHODS = frozenset({"max", "min", "sum", "mean", "prod"})
_ARITH = (cst.Add, cst.Subtract, cst.Multiply, cst.Divide, cst.FloorDivide, cst.Modulo, cst.Power)


class NoLanes(Exception):
    """The carry keeps its `(rows, 1)` layout; why is for tests and debugging only."""


class Widening(Protocol):
    helper: str  # the function that widens an L value to an exact operand's last dim
    scalars: frozenset[str]  # names holding Python numbers (class C)


# -- statements -------------------------------------------------------------------------------------------
def statement(ctx, layout: Widening, s: cst.BaseStatement, env: dict, final: bool) -> cst.BaseStatement:
    lane_names = {k for k, v in env.items() if v == L}
    if not isinstance(s, cst.SimpleStatementLine):
        if mentions(s, lane_names):
            raise NoLanes(f"a lane-dense value is used in `{code(s).strip().splitlines()[0]}`")
        for n in walk(s):  # a name bound in a branch holds an exact value
            if isinstance(n, cst.Name):
                env.pop(n.value, None)
        return s
    return s.with_changes(body=[_small(ctx, layout, small, env, final) for small in s.body])


def _small(ctx, layout: Widening, small: cst.BaseSmallStatement, env: dict, final: bool) -> cst.BaseSmallStatement:
    if isinstance(small, cst.Assign):
        value, cls = expression(ctx, layout, small.value, env, final)
        targets = [t.target for t in small.targets]
        if len(targets) == 1 and isinstance(targets[0], cst.Name):
            env[targets[0].value] = cls
        elif cls == L:
            value = _narrow(value, final, "a lane-dense value is unpacked or stored")
        else:
            for t in targets:
                _bind_exact(t, env)
        return small.with_changes(value=value)
    if isinstance(small, cst.AugAssign) and isinstance(small.target, cst.Name) and isinstance(small.operator, _aug_ops()):
        target = small.target.value
        value, cls = expression(ctx, layout, small.value, env, final)
        mine = env.get(target, F)
        if mine == L and cls == F:
            raise NoLanes(f"`{target}` is lane-dense and meets a value of unknown shape in place")
        if mine != L and cls == L:
            value = _widen(layout, value, small.target)
        env[target] = L if mine == L else (C if mine == C and cls == C else F)
        return small.with_changes(value=value)
    lane_names = {k for k, v in env.items() if v == L}
    if mentions(small, lane_names):
        if isinstance(small, cst.Expr):
            value, cls = expression(ctx, layout, small.value, env, final)
            return small.with_changes(value=_narrow(value, final, "a lane-dense value is passed on")) if cls == L else small.with_changes(value=value)
        raise NoLanes(f"a lane-dense value is used in `{code(small)}`")
    return small


def _aug_ops():
    return (cst.AddAssign, cst.SubtractAssign, cst.MultiplyAssign, cst.DivideAssign)


def _bind_exact(target: cst.CSTNode, env: dict) -> None:
    for n in walk(target):
        if isinstance(n, cst.Name):
            env[n.value] = F


def mentions(node: cst.CSTNode, names: set[str]) -> bool:
    return bool(names & names_in(node))


# -- expressions ------------------------------------------------------------------------------------------
def expression(ctx, layout: Widening, e: cst.BaseExpression, env: dict, final: bool) -> tuple[cst.BaseExpression, str]:
    """(the expression with L values widened where they meet F ones, its class)."""
    if isinstance(e, cst.Name):
        return e, env.get(e.value, C if e.value in layout.scalars else F)
    if isinstance(e, (cst.Integer, cst.Float)):
        return e, C
    if isinstance(e, cst.Attribute) and (ctx.imports.qualify(e) or "") in ("jax.numpy.inf", "numpy.inf", "math.inf"):
        return e, C
    if isinstance(e, cst.UnaryOperation) and isinstance(e.operator, (cst.Minus, cst.Plus)):
        inner, cls = expression(ctx, layout, e.expression, env, final)
        return e.with_changes(expression=inner), cls
    if isinstance(e, cst.BinaryOperation) and isinstance(e.operator, _ARITH):
        (left, right), cls = _elementwise(ctx, layout, [e.left, e.right], env, final)
        return e.with_changes(left=left, right=right), cls
    if isinstance(e, cst.Comparison) and len(e.comparisons) == 1 and not isinstance(e.comparisons[0].operator, (cst.In, cst.NotIn, cst.Is, cst.IsNot)):
        (left, right), cls = _elementwise(ctx, layout, [e.left, e.comparisons[0].comparator], env, final)
        return e.with_changes(left=left, comparisons=[e.comparisons[0].with_changes(comparator=right)]), cls
    if isinstance(e, cst.Call):
        return _call(ctx, layout, e, env, final)
    lane_names = {k for k, v in env.items() if v == L}
    if mentions(e, lane_names):
        if not final:
            raise NoLanes(f"a lane-dense value is used in `{code(e)}`")
        return _narrow_inside(ctx, layout, e, env), F
    return e, F


def _call(ctx, layout: Widening, e: cst.Call, env: dict, final: bool) -> tuple[cst.BaseExpression, str]:
    q = ctx.imports.qualify(e.func) or ""
    positional = all(a.keyword is None and not a.star for a in e.args)
    if q in _UNARY and len(e.args) == 1 and positional:
        arg, cls = expression(ctx, layout, e.args[0].value, env, final)
        return e.with_changes(args=[e.args[0].with_changes(value=arg)]), cls
    if q in _NARY and positional and e.args:
        values, cls = _elementwise(ctx, layout, [a.value for a in e.args], env, final)
        return e.with_changes(args=[a.with_changes(value=v) for a, v in zip(e.args, values)]), cls
    if isinstance(e.func, cst.Attribute) and e.func.attr.value == "astype" and len(e.args) == 1:
        inner, cls = expression(ctx, layout, e.func.value, env, final)
        lane_names = {k for k, v in env.items() if v == L}
        if not mentions(e.args[0], lane_names):
            return e.with_changes(func=e.func.with_changes(value=inner)), cls
    reduced = _keepdims_last(ctx, e, q)
    if reduced is not None:
        operand, cls = expression(ctx, layout, reduced, dict(env), final)
        if cls != L:
            return _with_operand(e, reduced, operand), C
    lane_names = {k for k, v in env.items() if v == L}
    if not mentions(e, lane_names):
        return e, F
    if not final:
        raise NoLanes(f"a lane-dense value is passed to `{code(e.func)}`")
    return _narrow_inside(ctx, layout, e, env), F


def _keepdims_last(ctx, e: cst.Call, q: str) -> Optional[cst.BaseExpression]:
    """The reduced operand of `jnp.max(x, axis=-1, keepdims=True)` / `x.sum(axis=1, keepdims=True)`
    (axis -1, or 1 for the 2-D values of a softmax; see the module's doc)."""
    kw = {a.keyword.value: a.value for a in e.args if a.keyword is not None}
    pos = [a.value for a in e.args if a.keyword is None and not a.star]
    if any(a.star for a in e.args) or not (isinstance(kw.get("keepdims"), cst.Name) and kw["keepdims"].value == "True"):
        return None
    if q in _REDUCTIONS and len(pos) in (1, 2):
        operand, axis = pos[0], kw.get("axis", pos[1] if len(pos) == 2 else None)
    elif isinstance(e.func, cst.Attribute) and e.func.attr.value in _REDUCTION_METHODS and len(pos) <= 1 and not q:
        operand, axis = e.func.value, kw.get("axis", pos[0] if pos else None)
    else:
        return None
    if set(kw) - {"axis", "keepdims"} or axis is None:
        return None
    last = isinstance(axis, cst.Integer) and axis.evaluated_value == 1
    last = last or (isinstance(axis, cst.UnaryOperation) and isinstance(axis.operator, cst.Minus)
                    and isinstance(axis.expression, cst.Integer) and axis.expression.evaluated_value == 1)
    return operand if last else None


def _with_operand(e: cst.Call, old: cst.BaseExpression, new: cst.BaseExpression) -> cst.Call:
    """The reduction `e` over `new` in place of its operand `old` (an argument or the method's object)."""
    if old is new:
        return e
    if isinstance(e.func, cst.Attribute) and e.func.value is old:
        return e.with_changes(func=e.func.with_changes(value=new))
    return e.with_changes(args=[a.with_changes(value=new) if a.value is old else a for a in e.args])


def _elementwise(ctx, layout: Widening, operands: list, env: dict, final: bool) -> tuple[list, str]:
    """Operands of an elementwise operation; L ones widened to an F operand's last dim."""
    done = [expression(ctx, layout, o, env, final) for o in operands]
    classes = {cls for _, cls in done}
    if L not in classes:
        return [v for v, _ in done], (C if classes <= {C} else F)
    if F not in classes:
        return [v for v, _ in done], L
    like = next((v for v, cls in done if cls == F and isinstance(v, cst.Name)), None)
    if like is None:
        raise NoLanes("a lane-dense value meets an unnamed value of unknown shape")
    return [_widen(layout, v, like) if cls == L else v for v, cls in done], F


def _widen(layout: Widening, value: cst.BaseExpression, like: cst.Name) -> cst.BaseExpression:
    return cst.parse_expression(f"{layout.helper}({code(value)}, {like.value})")


def _narrow(value: cst.BaseExpression, final: bool, why: str) -> cst.BaseExpression:
    """The exact `(rows, 1)` value an L value stands for (after the loop only: once, off the
    step's path)."""
    if not final:
        raise NoLanes(why)
    tight = isinstance(value, (cst.Name, cst.Call, cst.Attribute, cst.Subscript))
    return cst.parse_expression(f"{code(value)}[..., :1]" if tight else f"({code(value)})[..., :1]")


def _narrow_inside(ctx, layout: Widening, e: cst.BaseExpression, env: dict) -> cst.BaseExpression:
    """`e` with each L name in it narrowed to its exact value."""
    lane_names = {k for k, v in env.items() if v == L}
    if any(isinstance(n, (cst.NamedExpr, cst.Lambda, cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp))
           for n in walk(e)):
        raise NoLanes(f"`{code(e)}` binds names of its own")  # a bound name is not a read to narrow

    class Narrow(cst.CSTTransformer):
        def leave_Name(self, original: cst.Name, updated: cst.Name):
            return cst.parse_expression(f"{updated.value}[..., :1]") if updated.value in lane_names else updated

        def visit_Attribute(self, node: cst.Attribute) -> bool:
            return True

        def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute):
            return updated.with_changes(attr=original.attr)  # `m.shape`: narrow `m`, keep the attribute name

        def leave_Arg(self, original: cst.Arg, updated: cst.Arg):
            return updated.with_changes(keyword=original.keyword)

    return e.visit(Narrow())
