"""Where a value inside a kernel comes from: a Python value, a loop index, program_id, a ref load...

An `Env` maps the names visible in one function to `Val`s. Kernel parameters are refs (or Python
values when `functools.partial` binds them); loop-body parameters are induction variables; other
names take the value of their assignments. The value model itself lives in analysis.values.values, the
binding syntax in analysis.values.bindings, loop discovery in analysis.loops.loops and the values of calls in
analysis.values.call_values; their names are re-exported here for the modules that import them from here.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

import libcst as cst

from pallas_fix.core import names as N
from pallas_fix.analysis.values.bindings import Bindings, Unpack, scope_bindings, single_binding
from pallas_fix.analysis.values.call_values import call_value
from pallas_fix.analysis.context import ModuleContext, own_nodes
from pallas_fix.analysis.loops.loops import describe_loop, find_loops
from pallas_fix.analysis.values.positional import PositionalReads
from pallas_fix.analysis.values.values import REF, REFLIST, STATIC, STATIC_FLOAT, Val, combine, int_binop
from pallas_fix.core.model import LoopInfo, Origin
from pallas_fix.core.names import call_arg

__all__ = ["Env", "Val", "REF", "REFLIST", "STATIC", "STATIC_FLOAT", "combine", "describe_loop", "find_loops"]


class Env(PositionalReads):
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
        self._bindings: Optional[Bindings] = None
        self._at: dict[int, Optional[Val]] = {}  # id(name node) -> its value where it is read
        self._augmented: dict[int, cst.BinaryOperation] = {}
        self._params_read: dict[str, Val] = {}
        self._growth: Optional[dict[str, list[cst.BaseExpression]]] = None

    # -- bindings -------------------------------------------------------------------------------
    def bindings(self) -> Bindings:
        """name -> [(how, node)] for names bound in this scope's own body."""
        if self._bindings is None:
            self._bindings = scope_bindings(self.ctx, self.scope)
        return self._bindings

    def _plain_value(self, name: str) -> Optional[cst.BaseExpression]:
        """The expression `name` is bound to by its one plain assignment here (not `a, b = v`,
        except `q, r = divmod(a, b)`: `a // b`, `a % b`)."""
        value = single_binding(self.bindings().get(name, []))
        if isinstance(value, Unpack):
            return value.divmod_part()
        return value if isinstance(value, cst.BaseExpression) else None

    def single_assignment(self, name: str) -> Optional[cst.BaseExpression]:
        env = self.owner(name)
        return env._plain_value(name) if env is not None else None

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
            return self.param_value(name)
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
            vals = [self._binding_val(how, node) for how, node in binds] + self._grown(name)
        finally:
            self._busy.discard(name)
        val = combine(vals)
        if len(vals) == 1:
            val = vals[0]
        self._cache[name] = val
        return val

    def _binding_val(self, how: str, node) -> Val:
        if isinstance(self.scope, cst.Module) or how not in ("assign", "augassign", "for"):
            return STATIC  # module-level names, defs and `with ... as` targets are Python values
        if how == "augassign":
            return combine([self.value(node.value)])
        leaf = self._leaf_induction(node)
        if leaf is not None and leaf.induction is not None:
            return leaf
        base = self.value(node.value if isinstance(node, Unpack) else node)
        if how == "for" and isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value == "range":
            return base if base.dynamic else STATIC
        # `a, b = refs` / `for r in refs`: each name is one ref.
        return REF if base.vtype == "reflist" and (how == "for" or isinstance(node, Unpack)) else base

    def _grown(self, name: str) -> list[Val]:
        """The values `name.append(v)` / `.extend(vs)` / `.insert(i, v)` add in this scope: a list
        bound empty (`idx = []`) and grown in a loop (`idx.append((i0 + k) % n)`) holds what was
        appended, traced arrays here, not the empty list's nothing (nufftax's gather indices)."""
        if self._growth is None:
            self._growth = {}
            body = self.scope.body if isinstance(self.scope, cst.FunctionDef) else None
            for node in own_nodes(body) if body is not None else ():
                if (isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.args
                        and isinstance(node.func.value, cst.Name)
                        and node.func.attr.value in ("append", "extend", "insert")):
                    self._growth.setdefault(node.func.value.value, []).append(node.args[-1].value)
        return [self.value(e) for e in self._growth.get(name, [])]

    # -- expressions ----------------------------------------------------------------------------
    def value(self, expr: cst.BaseExpression) -> Val:
        if isinstance(expr, (cst.Integer, cst.SimpleString, cst.ConcatenatedString, cst.FormattedString)):
            return STATIC
        if isinstance(expr, (cst.Float, cst.Imaginary)):
            return STATIC_FLOAT
        if isinstance(expr, cst.Name):
            if expr.value in ("True", "False", "None"):
                return STATIC
            reached = self._value_at(expr)
            return reached if reached is not None else self.lookup(expr.value)
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
            return call_value(self, expr)
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
            arms = [self.value(expr.body), self.value(expr.orelse)]
            if any(v.is_ref for v in arms) and all(v.is_ref or _is_none(e) for v, e in zip(arms, (expr.body, expr.orelse))):
                return REF  # `next(it) if has_bias else None`: an optional ref
            return combine([self.value(expr.test), *arms])
        if isinstance(expr, (cst.Tuple, cst.List)):
            vals = [self.value(e.value) for e in expr.elements if isinstance(e, cst.Element)]
            if vals and all(v.is_ref for v in vals):
                return REFLIST
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
            sliced = len(expr.slice) == 1 and isinstance(expr.slice[0].slice, cst.Slice)
            return REFLIST if sliced else REF  # refs[:n_in] is a list of refs, refs[0] one ref
        if base.is_ref:
            return self.ref_load(expr)
        # Indexing an array value: a scalar element of it.
        if base.dynamic:
            if base.vtype in ("array", "array1"):
                inner = [self.value(e.slice.value) for e in expr.slice if isinstance(e.slice, cst.Index)]
                scalar = all(isinstance(e.slice, cst.Index) for e in expr.slice) and not any(
                    v.vtype in ("array", "array1") for v in inner
                )
                if base.vtype == "array1" and scalar:
                    return Val(Origin.REF_LOAD, "int", base.words.replace("a one-element slice ", "a value "))
                return replace(base, vtype="int" if scalar and base.vtype == "array1" else base.vtype)
            return base
        return STATIC

    def ref_load(self, expr: cst.Subscript) -> Val:
        """`x_ref[i]` is an int loaded from memory, `x_ref[pl.ds(i, 1)]` a one-element array,
        anything with a window, `...` or an index array an array (also read through a load call:
        `pltriton.load(x_ref.at[i])`)."""
        one_element = 0
        arrayish = False
        for el in (e.slice for e in expr.slice):
            if not isinstance(el, cst.Index) or isinstance(el.value, cst.Ellipsis):
                arrayish = True
                continue
            ds = self.ds_parts(el.value)
            if ds is not None:
                start, size = ds
                self.value(start)  # unused, but evaluating it fills the lookup cache as it always has
                if size is not None and self.static_int(size) == 1:
                    one_element += 1
                else:
                    arrayish = True
            elif self.value(el.value).vtype in ("array", "array1"):
                arrayish = True
        ref_words = f"a value loaded from `{self.ctx.code(expr)}`"
        if arrayish and self._whole_scalar_ref(expr):
            return Val(Origin.REF_LOAD, "int", ref_words)
        if arrayish:
            return Val(Origin.REF_LOAD, "array", ref_words)
        if one_element:
            return Val(Origin.NON_INT_SCALAR, "array1", f"a one-element slice loaded from `{self.ctx.code(expr)}`")
        return Val(Origin.REF_LOAD, "int", ref_words)

    def _whole_scalar_ref(self, expr: cst.Subscript) -> bool:
        """`pos_ref[...]` of a 0-d ref (`pl.BlockSpec((None,), ...)`): the one scalar it holds."""
        if not all(isinstance(e.slice, cst.Index) and isinstance(e.slice.value, cst.Ellipsis) for e in expr.slice):
            return False
        return self.value(expr.value).scalar_ref

    # -- helpers used by detection and codemods --------------------------------------------------
    def ds_parts(self, expr: cst.BaseExpression) -> Optional[tuple[cst.BaseExpression, Optional[cst.BaseExpression]]]:
        call = self.ds_call(expr)
        if call is None:
            return None
        start = call_arg(call, 0, "start")
        size = call_arg(call, 1, "size")
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
            return int_binop(expr.operator, left, right)
        if isinstance(expr, cst.Name):
            value = self.static_value_expr(expr.value)
            if value is not None:
                return self.static_int(value, depth + 1)
        return None

    def received_from(self, name: str) -> Optional[cst.Call]:
        """The call whose argument the parameter `name` receives, for a helper analysed at one
        call (analysis.discovery.helper_calls.HelperEnv); None here: a kernel or loop body."""
        return None

    def static_value_expr(self, name: str) -> Optional[cst.BaseExpression]:
        """The expression a static name stands for: partial-bound value, default or assignment."""
        env = self.owner(name)
        if env is None:
            values = self.ctx.assignments(name, self.ctx.module)
            return values[0] if len(values) == 1 else None
        if name in env.params:
            return env.param_exprs.get(name)
        return env._plain_value(name)




def _is_none(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Name) and expr.value == "None"
