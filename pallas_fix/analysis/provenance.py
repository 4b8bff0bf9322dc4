"""Where a value inside a kernel comes from: a Python value, a loop index, program_id, a ref load...

An `Env` maps the names visible in one function to `Val`s. Kernel parameters are refs (or Python
values when `functools.partial` binds them); loop-body parameters are induction variables; other
names take the value of their assignments. The rank order of `Origin` decides what an expression
combining several sources is called: `pid * nk + i` is driven by the loop.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

import libcst as cst

from pallas_fix.core import names as N
from pallas_fix.analysis.context import ModuleContext, walk
from pallas_fix.core.model import ORIGIN_RANK, LoopInfo, Origin
from pallas_fix.core.names import call_arg as _arg


@dataclass(frozen=True)
class Val:
    origin: Origin
    vtype: str = "int"  # int | float | bool | array1 | array | ref | reflist | unknown
    words: str = ""
    loop: Optional[LoopInfo] = None
    pid_axis: Optional[int] = None
    is_index: bool = False  # the loop's induction variable itself, not arithmetic on it

    @property
    def dynamic(self) -> bool:
        return self.origin is not Origin.STATIC

    @property
    def is_ref(self) -> bool:
        return self.vtype in ("ref", "reflist")


STATIC = Val(Origin.STATIC, "int", "a Python value")
STATIC_FLOAT = Val(Origin.STATIC, "float", "a Python value")
REF = Val(Origin.STATIC, "ref", "a ref")


def combine(vals: list[Val], vtype: Optional[str] = None) -> Val:
    if not vals:
        return STATIC
    top = max(vals, key=lambda v: ORIGIN_RANK[v.origin])
    if vtype is None:
        dyn = [v for v in vals if v.dynamic]
        types = {v.vtype for v in dyn} or {v.vtype for v in vals}
        if "array" in types:
            vtype = "array"
        elif "array1" in types:
            vtype = "array1"
        elif "float" in types or (dyn and any(v.vtype == "float" for v in vals)):
            vtype = "float"
        elif "bool" in types and len(types) == 1:
            vtype = "bool"
        else:
            vtype = "int"
    loop = top.loop or next((v.loop for v in vals if v.loop), None)
    pid = top.pid_axis if top.pid_axis is not None else next((v.pid_axis for v in vals if v.pid_axis is not None), None)
    return Val(top.origin, vtype, top.words, loop, pid)


def find_loops(ctx: ModuleContext) -> dict[cst.CSTNode, LoopInfo]:
    """Every fori_loop / pl.loop body (def or lambda) in the module, mapped to its loop."""
    loops: dict[cst.CSTNode, LoopInfo] = {}
    for node in walk(ctx.module):
        if isinstance(node, cst.Call) and ctx.imports.is_(node.func, N.FORI_LOOP):
            info = _fori_loop(ctx, node)
            if info is not None:
                loops[info.body] = info
        elif isinstance(node, cst.FunctionDef):
            for dec in node.decorators:
                if isinstance(dec.decorator, cst.Call) and ctx.imports.is_(dec.decorator.func, N.PL_LOOP):
                    info = _pl_loop(ctx, node, dec.decorator)
                    if info is not None:
                        loops[node] = info
    return loops




def _params(fn: cst.FunctionDef | cst.Lambda) -> list[str]:
    return [p.name.value for p in fn.params.params]


def _fori_loop(ctx: ModuleContext, call: cst.Call) -> Optional[LoopInfo]:
    lower, upper = _arg(call, 0, "lower"), _arg(call, 1, "upper")
    body_expr, init = _arg(call, 2, "body_fun"), _arg(call, 3, "init_val")
    if lower is None or upper is None or body_expr is None:
        return None
    body: Optional[cst.FunctionDef | cst.Lambda] = None
    bound: set[str] = set()  # parameters functools.partial fills before the loop's (i, carry)
    if isinstance(body_expr, cst.Lambda):
        body = body_expr
    elif isinstance(body_expr, cst.Name):
        body = ctx.resolve_def(body_expr.value, call)
    elif isinstance(body_expr, cst.Call) and ctx.imports.is_(body_expr.func, N.PARTIAL) and body_expr.args:
        inner = body_expr.args[0].value
        if isinstance(inner, cst.Name):
            body = ctx.resolve_def(inner.value, call)
        if body is not None:
            names = _params(body)
            n_pos = sum(1 for a in body_expr.args[1:] if a.keyword is None and not a.star)
            bound = set(names[:n_pos]) | {a.keyword.value for a in body_expr.args[1:] if a.keyword is not None}
    if body is None:
        return None
    free = [p for p in _params(body) if p not in bound]
    if not free:
        return None
    carries = _body_carries(ctx, body, init, free)
    stmt = ctx.statement_of(call)
    target = None
    parent = ctx.parent(call)
    if isinstance(parent, cst.Assign) and len(parent.targets) == 1:
        target = parent.targets[0].target
    return LoopInfo(
        kind="fori_loop",
        call=call,
        body=body,
        index_name=free[0],
        lower=lower,
        upper=upper,
        step=None,
        carries=carries,
        statement=stmt,
        init=init,
        result_target=target,
    )


def _pl_loop(ctx: ModuleContext, fn: cst.FunctionDef, dec: cst.Call) -> Optional[LoopInfo]:
    lower, upper = _arg(dec, 0, "lower"), _arg(dec, 1, "upper")
    if lower is None or upper is None or not _params(fn):
        return None
    init = _arg(dec, 99, "init_carry")
    return LoopInfo(
        kind="pl.loop",
        call=dec,
        body=fn,
        index_name=_params(fn)[0],
        lower=lower,
        upper=upper,
        step=_arg(dec, 99, "step"),
        carries=init is not None and not (isinstance(init, cst.Name) and init.value == "None"),
        statement=fn,
        init=init,
    )


def _body_carries(ctx: ModuleContext, body, init, params: Optional[list[str]] = None) -> bool:
    if init is None or (isinstance(init, cst.Name) and init.value == "None"):
        return False
    params = params if params is not None else _params(body)
    if len(params) < 2:
        return True
    carry = params[1]
    if isinstance(body, cst.Lambda):
        return not (isinstance(body.body, cst.Name) and body.body.value == carry)
    returns = [n for n in _own_nodes(body) if isinstance(n, cst.Return)]
    if not returns:
        return True
    if not all(isinstance(r.value, cst.Name) and r.value.value == carry for r in returns):
        return True
    # `acc += x; return acc` returns the carry's name but a new value.
    for n in _own_nodes(body):
        if isinstance(n, cst.AugAssign) and isinstance(n.target, cst.Name) and n.target.value == carry:
            return True
        if isinstance(n, (cst.Assign, cst.AnnAssign)):
            targets = [t.target for t in n.targets] if isinstance(n, cst.Assign) else [n.target]
            for t in targets:
                names = [t] if isinstance(t, cst.Name) else [e.value for e in getattr(t, "elements", [])]
                if any(isinstance(x, cst.Name) and x.value == carry for x in names):
                    return True
    return False


def _own_nodes(fn: cst.FunctionDef):
    stack = list(reversed(fn.body.children))
    while stack:
        cur = stack.pop()
        yield cur
        if isinstance(cur, (cst.FunctionDef, cst.Lambda)):
            continue
        stack.extend(reversed(cur.children))


def describe_loop(ctx: ModuleContext, loop: LoopInfo) -> str:
    head = "pl.loop" if loop.kind == "pl.loop" else "lax.fori_loop"
    line = ctx.span(loop.call).line
    carry = "carries a value (a reduction)" if loop.carries else "carries nothing"
    return (
        f"the index `{loop.index_name}` of {head}({ctx.code(loop.lower)}, {ctx.code(loop.upper)}) "
        f"on line {line}, which {carry}"
    )


class Env:
    """Names visible inside one function of a kernel."""

    def __init__(
        self,
        ctx: ModuleContext,
        scope: cst.FunctionDef | cst.Lambda | cst.Module,
        parent: Optional["Env"],
        params: dict[str, Val],
        loops: dict[cst.CSTNode, LoopInfo],
        param_exprs: Optional[dict[str, cst.BaseExpression]] = None,
    ) -> None:
        self.ctx = ctx
        self.param_exprs = param_exprs or {}
        self.scope = scope
        self.parent = parent
        self.params = params
        self.loops = loops
        self._cache: dict[str, Val] = {}
        self._busy: set[str] = set()
        self._bindings: Optional[dict[str, list[tuple[str, cst.CSTNode]]]] = None

    # -- bindings -------------------------------------------------------------------------------
    def bindings(self) -> dict[str, list[tuple[str, cst.CSTNode]]]:
        """name -> [(how, node)] for names bound in this scope's own body."""
        if self._bindings is not None:
            return self._bindings
        out: dict[str, list[tuple[str, cst.CSTNode]]] = {}
        if isinstance(self.scope, cst.Lambda):
            self._bindings = out
            return out
        roots = self.ctx.body_statements(self.scope)
        stack = list(reversed(roots))
        while stack:
            node = stack.pop()
            if isinstance(node, cst.Assign):
                for t in node.targets:
                    _bind_target(out, t.target, ("assign", node.value))
            elif isinstance(node, cst.AnnAssign) and node.value is not None:
                _bind_target(out, node.target, ("assign", node.value))
            elif isinstance(node, cst.AugAssign):
                _bind_target(out, node.target, ("augassign", node))
            elif isinstance(node, cst.For):
                _bind_target(out, node.target, ("for", node.iter))
            elif isinstance(node, cst.WithItem) and node.asname is not None:
                _bind_target(out, node.asname.name, ("with", node.item))
            elif isinstance(node, cst.NamedExpr):
                _bind_target(out, node.target, ("assign", node.value))
            elif isinstance(node, cst.FunctionDef):
                out.setdefault(node.name.value, []).append(("def", node))
                continue
            elif isinstance(node, cst.Lambda):
                continue
            stack.extend(reversed(node.children))
        self._bindings = out
        return out

    def single_assignment(self, name: str) -> Optional[cst.BaseExpression]:
        env = self.owner(name)
        if env is None:
            return None
        binds = env.bindings().get(name, [])
        if len(binds) == 1 and binds[0][0] == "assign" and isinstance(binds[0][1], cst.BaseExpression):
            value = binds[0][1]
            return value if not isinstance(value, _Unpack) else None
        return None

    def owner(self, name: str) -> Optional["Env"]:
        env: Optional[Env] = self
        while env is not None:
            if name in env.params or name in env.bindings():
                return env
            env = env.parent
        return None

    # -- lookup ---------------------------------------------------------------------------------
    def lookup(self, name: str) -> Val:
        if name in self.params:
            return self.params[name]
        if name in self._cache:
            return self._cache[name]
        binds = self.bindings().get(name)
        if not binds:
            if self.parent is not None:
                return self.parent.lookup(name)
            return STATIC
        if name in self._busy:
            return STATIC  # `acc = acc + x`: the other assignments decide
        self._busy.add(name)
        try:
            vals = [self._binding_val(name, how, node) for how, node in binds]
        finally:
            self._busy.discard(name)
        val = combine(vals)
        if len(vals) == 1:
            val = vals[0]
        self._cache[name] = val
        return val

    def _binding_val(self, name: str, how: str, node) -> Val:
        if isinstance(self.scope, cst.Module):
            return STATIC  # module-level names are Python values
        if how == "def":
            return STATIC
        if how == "assign":
            if isinstance(node, _Unpack):
                base = self.value(node.value)
                if base.vtype == "reflist":
                    return REF
                return base
            return self.value(node)
        if how == "augassign":
            return combine([self.value(node.value)])
        if how == "for":
            it = self.value(node)
            if isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value == "range":
                return it if it.dynamic else STATIC
            if it.vtype == "reflist":
                return REF
            return it
        if how == "with":
            return STATIC
        return STATIC

    # -- expressions ----------------------------------------------------------------------------
    def value(self, expr: cst.BaseExpression) -> Val:
        if isinstance(expr, (cst.Integer, cst.SimpleString, cst.ConcatenatedString, cst.FormattedString)):
            return STATIC
        if isinstance(expr, (cst.Float, cst.Imaginary)):
            return STATIC_FLOAT
        if isinstance(expr, cst.Name):
            if expr.value in ("True", "False", "None"):
                return STATIC
            return self.lookup(expr.value)
        if isinstance(expr, cst.Attribute):
            if expr.attr.value in ("shape", "ndim", "dtype", "size", "itemsize"):
                return STATIC
            if expr.attr.value == "at":
                return self.value(expr.value)
            if expr.attr.value == "T":
                return self.value(expr.value)
            base = self.value(expr.value)
            return base if base.dynamic or base.is_ref else STATIC
        if isinstance(expr, cst.Subscript):
            return self._subscript_value(expr)
        if isinstance(expr, cst.Call):
            return self._call_value(expr)
        if isinstance(expr, cst.BinaryOperation):
            left, right = self.value(expr.left), self.value(expr.right)
            val = combine([left, right])
            if not val.dynamic and (isinstance(expr.operator, cst.Divide) or "float" in (left.vtype, right.vtype)):
                return STATIC_FLOAT  # `a / b` of Python ints is a Python float
            if val.dynamic and isinstance(expr.operator, cst.Divide):
                return replace(val, vtype="float")
            if val.dynamic and (left.vtype == "float" or right.vtype == "float") and val.vtype in ("int", "bool"):
                return replace(val, vtype="float")
            if val.dynamic and val.vtype == "bool" and not (left.vtype == right.vtype == "bool"):
                return replace(val, vtype="int")
            return val
        if isinstance(expr, cst.UnaryOperation):
            val = self.value(expr.expression)
            if isinstance(expr.operator, cst.Not) and val.dynamic:
                return replace(val, vtype="bool")
            return val
        if isinstance(expr, cst.Comparison):
            parts = [self.value(expr.left)] + [self.value(c.comparator) for c in expr.comparisons]
            val = combine(parts)
            return replace(val, vtype="bool") if val.dynamic else STATIC
        if isinstance(expr, cst.BooleanOperation):
            val = combine([self.value(expr.left), self.value(expr.right)])
            return replace(val, vtype="bool") if val.dynamic else STATIC
        if isinstance(expr, cst.IfExp):
            return combine([self.value(expr.test), self.value(expr.body), self.value(expr.orelse)])
        if isinstance(expr, (cst.Tuple, cst.List)):
            vals = [self.value(e.value) for e in expr.elements if isinstance(e, cst.Element)]
            if vals and all(v.is_ref for v in vals):
                return Val(Origin.STATIC, "reflist", "refs")
            return combine(vals) if vals else STATIC
        if isinstance(expr, cst.Lambda):
            return STATIC
        return Val(Origin.TRACED, "unknown", f"`{self.ctx.code(expr)}`")

    def _subscript_value(self, expr: cst.Subscript) -> Val:
        base_expr = expr.value
        via_at = isinstance(base_expr, cst.Attribute) and base_expr.attr.value == "at"
        if via_at:
            return REF
        if isinstance(base_expr, cst.Attribute) and base_expr.attr.value in ("shape", "strides"):
            return STATIC
        base = self.value(base_expr)
        if base.vtype == "reflist":
            return REF  # refs[0]
        if base.is_ref:
            elements = [e.slice for e in expr.slice]
            idx_vals: list[Val] = []
            one_element = 0
            arrayish = False
            for el in elements:
                if isinstance(el, cst.Index):
                    ds = self.ds_parts(el.value)
                    if ds is not None:
                        start, size = ds
                        idx_vals.append(self.value(start))
                        if size is not None and self.static_int(size) == 1:
                            one_element += 1
                        else:
                            arrayish = True
                    elif isinstance(el.value, cst.Ellipsis):
                        arrayish = True
                    else:
                        v = self.value(el.value)
                        idx_vals.append(v)
                        if v.vtype in ("array", "array1"):
                            arrayish = True
                else:
                    arrayish = True
            ref_words = f"loaded from `{self.ctx.code(expr)}`"
            if arrayish:
                return Val(Origin.REF_LOAD, "array", ref_words)
            if one_element:
                return Val(Origin.NON_INT_SCALAR, "array1", f"a one-element slice {ref_words}")
            return Val(Origin.REF_LOAD, "int", ref_words)
        # Indexing an array value: a scalar element of it.
        if base.dynamic:
            if base.vtype in ("array", "array1"):
                inner = [self.value(e.slice.value) for e in expr.slice if isinstance(e.slice, cst.Index)]
                scalar = all(isinstance(e.slice, cst.Index) for e in expr.slice) and not any(
                    v.vtype in ("array", "array1") for v in inner
                )
                if base.vtype == "array1" and scalar:
                    return Val(Origin.REF_LOAD, "int", base.words.replace("a one-element slice ", ""))
                return replace(base, vtype="int" if scalar and base.vtype == "array1" else base.vtype)
            return base
        return STATIC

    def _call_value(self, call: cst.Call) -> Val:
        imports = self.ctx.imports
        func = call.func
        args = [a.value for a in call.args]
        if imports.is_(func, N.PROGRAM_ID | N.NUM_PROGRAMS):
            axis = self.static_int(args[0]) if args else None
            which = "program_id" if imports.is_(func, N.PROGRAM_ID) else "num_programs"
            return Val(Origin.PROGRAM_ID, "int", f"`pl.{which}({self.ctx.code(args[0]) if args else ''})`", pid_axis=axis)
        if imports.is_(func, N.MULTIPLE_OF) and args:
            inner = self.value(args[0])
            if not inner.dynamic:
                # multiple_of binds a primitive even on a Python int: the result is traced.
                return Val(Origin.TRACED_CONST, "int", f"the traced constant `{self.ctx.code(call)}`")
            return inner
        if imports.is_(func, N.DS | N.SLICE):
            return combine([self.value(a) for a in args])
        if imports.is_(func, N.ARANGE):
            vals = [self.value(a) for a in args if not isinstance(a, cst.Name) or a.value not in ("None",)]
            base = combine(vals)
            return Val(
                Origin.TRACED_CONST if not base.dynamic else base.origin,
                "array",
                f"`{self.ctx.code(call)}`",
                base.loop,
                base.pid_axis,
            )
        if imports.is_(func, N.INT_DTYPES | N.ARRAY_CTORS):
            inner = combine([self.value(a) for a in args[:1]])
            if not inner.dynamic:
                vtype = "array" if (args and isinstance(args[0], (cst.List, cst.Tuple))) else "int"
                if imports.is_(func, N.ARRAY_CTORS) and args and isinstance(args[0], cst.Float):
                    vtype = "float"
                return Val(Origin.TRACED_CONST, vtype, f"the traced constant `{self.ctx.code(call)}`")
            if imports.is_(func, N.INT_DTYPES):
                return replace(inner, vtype="int" if inner.vtype in ("float", "bool") else inner.vtype)
            return inner
        if imports.is_(func, N.FLOAT_DTYPES):
            inner = combine([self.value(a) for a in args[:1]])
            if not inner.dynamic:
                return Val(Origin.TRACED_CONST, "float", f"the traced constant `{self.ctx.code(call)}`")
            return replace(inner, vtype="float")
        if imports.is_(func, N.BOOL_DTYPES):
            inner = combine([self.value(a) for a in args[:1]])
            return replace(inner, vtype="bool") if inner.dynamic else Val(Origin.TRACED_CONST, "bool", "traced bool")
        if isinstance(func, cst.Attribute) and func.attr.value == "astype":
            inner = self.value(func.value)
            if not inner.dynamic or not args:
                return inner
            return replace(inner, vtype=self._dtype_kind(args[0], inner.vtype))
        if imports.qualify(func) == "jax.lax.convert_element_type" and len(args) >= 2:
            inner = self.value(args[0])
            return replace(inner, vtype=self._dtype_kind(args[1], inner.vtype)) if inner.dynamic else inner
        if isinstance(func, cst.Name) and func.value in ("int", "len", "range", "min", "max", "abs", "round"):
            vals = [self.value(a) for a in args]
            return combine(vals) if any(v.dynamic for v in vals) else STATIC
        if isinstance(func, cst.Name) and func.value == "float":
            return STATIC_FLOAT
        qual = imports.qualify(func) or ""
        vals = [self.value(a) for a in args]
        dyn = [v for v in vals if v.dynamic]
        if qual.startswith("jax.numpy.") or qual.startswith("jax.lax."):
            if dyn:
                return combine(dyn)
            if qual in ("jax.numpy.zeros", "jax.numpy.ones", "jax.numpy.full", "jax.numpy.zeros_like"):
                return Val(Origin.TRACED_CONST, "array", f"`{self.ctx.code(call)}`")
            return STATIC
        if qual.startswith(N.PALLAS) or qual.startswith("math."):
            return combine(dyn) if dyn else STATIC
        if isinstance(func, cst.Attribute) and func.attr.value in ("reshape", "sum", "max", "min", "squeeze", "item"):
            inner = self.value(func.value)
            if inner.dynamic and func.attr.value in ("item", "squeeze") and inner.vtype == "array1":
                return replace(inner, vtype="int", origin=Origin.REF_LOAD)
            return inner
        if dyn:
            return combine(dyn)
        if isinstance(func, cst.Name):
            # A local helper returning a value: only traced when its arguments are.
            return STATIC
        return STATIC

    def _dtype_kind(self, dtype: cst.BaseExpression, current: str) -> str:
        imports = self.ctx.imports
        if imports.is_(dtype, N.FLOAT_DTYPES) or (isinstance(dtype, cst.Name) and dtype.value == "float"):
            return "float"
        if imports.is_(dtype, N.BOOL_DTYPES) or (isinstance(dtype, cst.Name) and dtype.value == "bool"):
            return "bool"
        if imports.is_(dtype, N.INT_DTYPES) or (isinstance(dtype, cst.Name) and dtype.value == "int"):
            return "int" if current in ("int", "float", "bool") else current
        if isinstance(dtype, cst.SimpleString):
            text = dtype.evaluated_value
            if isinstance(text, str):
                if "float" in text:
                    return "float"
                if "bool" in text:
                    return "bool"
                if "int" in text:
                    return "int"
        return current

    # -- helpers used by detection and codemods --------------------------------------------------
    def ds_parts(self, expr: cst.BaseExpression) -> Optional[tuple[cst.BaseExpression, Optional[cst.BaseExpression]]]:
        call = self.ds_call(expr)
        if call is None:
            return None
        start = _arg(call, 0, "start")
        size = _arg(call, 1, "size")
        if start is None:
            return None
        return start, size

    def ds_call(self, expr: cst.BaseExpression) -> Optional[cst.Call]:
        """`pl.ds(...)` itself, or a local name bound once to one."""
        if isinstance(expr, cst.Call) and self.ctx.imports.is_(expr.func, N.DS | N.SLICE):
            return expr
        if isinstance(expr, cst.Name):
            value = self.single_assignment(expr.value)
            if isinstance(value, cst.Call) and self.ctx.imports.is_(value.func, N.DS | N.SLICE):
                return value
        return None

    def static_int(self, expr: cst.BaseExpression, depth: int = 0) -> Optional[int]:
        """The integer value of a static expression when it can be computed from literals."""
        if depth > 12:
            return None
        if isinstance(expr, cst.Integer):
            return int(expr.evaluated_value)
        if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus):
            inner = self.static_int(expr.expression, depth + 1)
            return None if inner is None else -inner
        if isinstance(expr, cst.BinaryOperation):
            left = self.static_int(expr.left, depth + 1)
            right = self.static_int(expr.right, depth + 1)
            if left is None or right is None:
                return None
            op = expr.operator
            if isinstance(op, cst.Add):
                return left + right
            if isinstance(op, cst.Subtract):
                return left - right
            if isinstance(op, cst.Multiply):
                return left * right
            if isinstance(op, cst.FloorDivide) and right:
                return left // right
            if isinstance(op, cst.Modulo) and right:
                return left % right
            if isinstance(op, cst.Power) and 0 <= right < 64:
                return left**right
            if isinstance(op, cst.LeftShift) and 0 <= right < 64:
                return left << right
            return None
        if isinstance(expr, cst.Name):
            value = self.static_value_expr(expr.value)
            if value is not None:
                return self.static_int(value, depth + 1)
        return None

    def static_value_expr(self, name: str) -> Optional[cst.BaseExpression]:
        """The expression a static name stands for: partial-bound value, default or assignment."""
        env = self.owner(name)
        if env is None:
            values = self.ctx.assignments(name, self.ctx.module)
            return values[0] if len(values) == 1 else None
        if name in env.params:
            return env.param_exprs.get(name)
        binds = env.bindings().get(name, [])
        if len(binds) == 1 and binds[0][0] == "assign" and not isinstance(binds[0][1], _Unpack):
            return binds[0][1]
        return None


class _Unpack:
    """Marks `a, b = value`: each target takes `value` as a whole (a pytree we do not split)."""

    def __init__(self, value: cst.BaseExpression, index: int) -> None:
        self.value = value
        self.index = index


def _bind_target(out: dict, target: cst.BaseExpression, binding: tuple[str, object]) -> None:
    how, node = binding
    if isinstance(target, cst.Name):
        out.setdefault(target.value, []).append(binding)
    elif isinstance(target, (cst.Tuple, cst.List)):
        for i, el in enumerate(target.elements):
            inner = el.value
            if how == "assign" and isinstance(node, (cst.Tuple, cst.List)) and i < len(node.elements):
                _bind_target(out, inner, ("assign", node.elements[i].value))
            elif how == "assign":
                _bind_target(out, inner, ("assign", _Unpack(node, i)))  # type: ignore[arg-type]
            else:
                _bind_target(out, inner, binding)
    elif isinstance(target, cst.StarredElement):
        _bind_target(out, target.value, binding)
