"""R4 — a traced constant in a slice start becomes a Python int (fixes PF104).

Before:
    third = jnp.int32(3)
    o_ref[...] = x_ref[pl.ds(third * BS, BS)] + x_ref[pl.ds(jnp.array(2) * BS, BS)]
After:
    third = 3
    o_ref[...] = x_ref[pl.ds(third * BS, BS)] + x_ref[pl.ds(2 * BS, BS)]

A jax integer constructor (`jnp.int32(3)`, `jnp.array(2)`, ...) around a Python int, or
`pl.multiple_of` around a Python int, makes arithmetic on it traced, so the slice is dynamic in
the jaxpr although its value is fixed. Removing the wrapper keeps the value and makes the start a
Python int again.

Preconditions (each failure is a refusal with the reason):
- the wrapped value is a Python int (`jnp.int32(7 / 2)` truncates: not the same number);
- a name bound to the constant is bound once, by `name = ...`, in the kernel, and every read of
  it feeds a slice start through integer arithmetic; otherwise (`x * third` would change dtype
  promotion) the start gets the value inlined when it means the same there, or the use is refused;
- the arithmetic stays integer (`/` would make a float) and its other operands are Python ints or
  int32 indices (loop index over Python bounds, program_id), so dtypes cannot change;
- narrow or unsigned constructors (`jnp.int8`, `jnp.uint32`, ...) wrap around; they are removed
  only when every intermediate value is known and in range; int32 arithmetic is range-checked
  whenever its values are known, and a start that becomes a known negative Python int is refused
  (traced, it wraps; static, Pallas rejects it).

A start past the end of the ref is clamped silently when traced but rejected at trace time ("Out
of bound slice") once it is a Python int. So the fix is safe only where every pallas_call running
the kernel shapes the ref so that the window fits (or the start is 0); a window provably past the
end is refused, and one pallas-fix cannot place is an unsafe fix that waits for verification.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Optional

import libcst as cst

from pallas_fix.analysis.context import walk
from pallas_fix.analysis.discovery.kernel_entry import entry_problem
from pallas_fix.analysis.values.values import int_binop

from pallas_fix.core import names as N
from pallas_fix.core.model import FixSafety, IndexUse, Origin
from pallas_fix.core.plans import Outcome, Recipe, Refuse
from pallas_fix.rewrite.proofs.static_windows import static_window_fits
from pallas_fix.rewrite.text.edits import NodeReplacer

from pallas_fix.rewrite import common as C

NAME = "traced-constant"
CODE = "PF104"

_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**31), 2**31 - 1),  # Pallas indices are int32 whatever the constant's width
    "uint8": (0, 2**8 - 1),
    "uint16": (0, 2**16 - 1),
    "uint32": (0, 2**32 - 1),
    "uint64": (0, 2**64 - 1),
}
_WIDE = ("int32", "int64")


class _Plan(C.StartEdits):
    """Edits that remove the traced constants from one start expression."""

    def __init__(self, analysis, use: IndexUse) -> None:
        super().__init__(analysis, use)
        self.ctors: list[tuple[cst.Call, str]] = []  # every constructor removed, with its dtype
        self.followed: dict[int, bool] = {}  # assignments already walked -> Python value after
        root = use.kernel_site.kernel if use.kernel_site and use.kernel_site.kernel else use.function
        self.sizes = C.ds_size_names(self.ctx, root)

    # -- walking the start -----------------------------------------------------------------------
    def strip(self, expr: cst.BaseExpression, env) -> bool:
        """Record edits for `expr`; True when it is a Python value afterwards, False when it stays
        traced through an int32 index (loop index, program_id) that pallas-fix leaves alone."""
        ctx = self.ctx
        val = env.value(expr)
        if not val.dynamic:
            return True
        if isinstance(expr, cst.Call) and ctx.imports.is_(expr.func, N.INT_DTYPES | N.ARRAY_CTORS):
            return self._constructor(expr, env)
        if isinstance(expr, cst.Call) and ctx.imports.is_(expr.func, N.MULTIPLE_OF) and expr.args:
            inner = expr.args[0].value
            if not self.strip(inner, env):
                return False  # the hint still matters for a traced start
            if not env.value(inner).dynamic and not C.provably_int(env, inner, self.sizes):
                raise Refuse(f"`{ctx.code(expr)}` wraps `{ctx.code(inner)}`, which pallas-fix cannot show is an int")
            self._unwrap(expr, f"`{ctx.code(expr)}` → `{ctx.code(inner)}`")
            return True
        if isinstance(expr, cst.Name):
            if val.origin is Origin.TRACED_CONST:
                return self._name(expr, env)
            return self._int32_index(expr, env)
        if isinstance(expr, cst.BinaryOperation):
            if not isinstance(expr.operator, C.INT_OPS):
                raise Refuse(f"`{ctx.code(expr)}` is not integer arithmetic")
            left = self.strip(expr.left, env)
            right = self.strip(expr.right, env)
            return left and right
        if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, (cst.Minus, cst.Plus, cst.BitInvert)):
            return self.strip(expr.expression, env)
        return self._int32_index(expr, env)

    def _int32_index(self, expr: cst.BaseExpression, env) -> bool:
        if C.scalar_int_traced(env, expr):
            return False
        val = env.value(expr)
        raise Refuse(f"`{self.ctx.code(expr)}` is traced ({val.words}); pallas-fix only removes jnp constructors around Python ints")

    def _constructor(self, call: cst.Call, env) -> bool:
        ctx = self.ctx
        positional = [a for a in call.args if a.keyword is None and not a.star]
        keywords = {a.keyword.value: a.value for a in call.args if a.keyword is not None}
        if len(positional) != 1 or any(a.star for a in call.args):
            raise Refuse(f"`{ctx.code(call)}` does not wrap a single value")
        dtype = (ctx.imports.qualify(call.func) or "").rsplit(".", 1)[-1]
        if ctx.imports.is_(call.func, N.ARRAY_CTORS):
            dtype = "int32"
            if set(keywords) - {"dtype"}:
                raise Refuse(f"`{ctx.code(call)}` passes options other than dtype")
            if "dtype" in keywords:
                if not ctx.imports.is_(keywords["dtype"], N.INT_DTYPES):
                    raise Refuse(f"`{ctx.code(call)}` has a dtype pallas-fix cannot read as an integer type")
                dtype = (ctx.imports.qualify(keywords["dtype"]) or "").rsplit(".", 1)[-1]
        elif keywords:
            raise Refuse(f"`{ctx.code(call)}` passes keyword arguments")
        inner = positional[0].value
        if env.value(inner).dynamic:
            return self._int32_index(call, env)  # a cast of a traced value is no constant
        if not C.provably_int(env, inner, self.sizes):
            raise Refuse(
                f"`{ctx.code(call)}` converts `{ctx.code(inner)}`, which pallas-fix cannot show is a Python int"
                " (a float would be truncated by the constructor)"
            )
        self.ctors.append((call, dtype))
        self._unwrap(call, f"`{ctx.code(call)}` → `{ctx.code(inner)}`")
        return True

    def _unwrap(self, call: cst.Call, change: str) -> None:
        parent = self.ctx.parent(call)

        def edit(updated: cst.Call) -> cst.BaseExpression:
            return C.fit_into(parent, updated.args[0].value)

        self.edits[call] = edit
        self.changes.append(change)

    def _name(self, name: cst.Name, env) -> bool:
        ctx = self.ctx
        stmt = self.binding(name, "the traced constant")
        target = stmt.targets[0].target
        def_env = C.env_at(self.analysis, stmt, env)
        if id(stmt) in self.followed:
            return self.followed[id(stmt)]
        if any(isinstance(n, cst.Name) and n.value == name.value for n in walk(stmt.value)):
            raise Refuse(f"`{name.value}` is defined in terms of itself")
        other_use = C.flows_only_into_starts(ctx, target, self._operand_ok)
        if other_use is None:
            self.followed[id(stmt)] = static = self.strip(stmt.value, def_env)
            return static
        return self._inline(name, stmt, def_env, other_use)

    def _operand_ok(self, expr: cst.BaseExpression) -> bool:
        """Operands that keep `constant op operand` an int32 scalar whether the constant is
        traced or a Python int (a narrower traced operand would win the promotion otherwise)."""
        env = C.env_at(self.analysis, expr, self.use.env)
        if not env.value(expr).dynamic:
            return C.provably_int(env, expr, self.sizes)
        return C.scalar_int_traced(env, expr)

    def _inline(self, name: cst.Name, stmt: cst.Assign, def_env, other_use: str) -> bool:
        """The constant is also used as a value elsewhere: keep its binding and write the Python
        int into this start only, when the bound expression means the same here."""
        ctx = self.ctx
        value = stmt.value
        for leaf in _leaf_names(value):
            if def_env.value(leaf).dynamic or not C.same_binding(ctx, leaf.value, name, leaf):
                raise Refuse(f"{other_use}, and `{ctx.code(value)}` cannot be written into the start instead")
        sub = _Plan(self.analysis, self.use)
        if not sub.strip(value, def_env) or not sub.edits:
            raise Refuse(f"{other_use}, and `{ctx.code(value)}` is not a Python value without its constructors")
        new_value = value.visit(NodeReplacer(sub.edits))
        parent = ctx.parent(name)
        self.ctors.extend(sub.ctors)
        self.edits[name] = lambda updated, v=new_value: C.fit_into(parent, v)
        self.changes.append(f"`{name.value}` → `{C.code_of(new_value)}` in this start ({other_use})")
        return True

    # -- value checks ----------------------------------------------------------------------------
    def check_ranges(self, start: cst.BaseExpression, env) -> None:
        values: list[int] = []
        total = self._eval(start, env, values, 0)
        narrow = sorted({d for _, d in self.ctors if d not in _WIDE})
        if narrow:
            lo = max(_RANGES[d][0] for d in narrow)
            hi = min(_RANGES[d][1] for d in narrow)
            if total is None:
                raise Refuse(
                    f"`jnp.{narrow[0]}` arithmetic wraps around and pallas-fix cannot compute this start to show it stays in range"
                )
            bad = [v for v in values if not lo <= v <= hi]
            if bad:
                raise Refuse(f"`jnp.{narrow[0]}` arithmetic wraps around: an intermediate value {bad[0]} is out of its range [{lo}, {hi}], so a Python int gives another start")
        if total is not None and total < 0 and all(not env.value(n).dynamic for n in _leaf_names(start)):
            raise Refuse(
                f"the start is {total}: traced, a negative start wraps around; as a Python int Pallas rejects it"
            )
        if total is None:
            self._check_python_loop_values(start, env)
        if total is not None:
            lo, hi = _RANGES["int32"]
            bad = [v for v in values if not lo <= v <= hi]
            if bad:
                raise Refuse(f"the start arithmetic reaches {bad[0]}, outside int32: the traced form wraps, a Python int does not")

    def window_doubt(self, start: cst.BaseExpression, env) -> Optional[str]:
        """Why the now-static window may run past the end of the ref, or None when every pallas_call
        running the kernel shapes the ref so that it fits. Traced, a start past the end is clamped;
        static, Pallas rejects it at trace time, so an unproved window needs verification."""
        use, ctx = self.use, self.ctx
        size = env.static_int(use.size) if use.size is not None else None
        starts = self._static_starts(start, env)
        if size is None or not starts:
            return "pallas-fix cannot compute the window, so it cannot show it stays inside the ref"
        end = max(starts) + size
        if max(starts) == 0:
            return None  # [0, size) fits wherever the traced window did
        unknown = f"the window ends at {end}, and pallas-fix cannot show dim {use.dim} of `{use.ref_name}` is that long"
        kernel = use.function
        sites = [s for s in self.analysis.sites if s.kernel is kernel]
        if not sites or use.via_at or use.starred or _has_view_dims(use.subscript):
            return unknown
        if use.ref_name not in {p.name.value for p in kernel.params.params} or entry_problem(self.analysis, sites[0]):
            return unknown
        fits = [static_window_fits(self.analysis, s, use.ref_name, use.dim, end) for s in sites]
        if False in fits:
            site = sites[fits.index(False)]
            raise Refuse(
                f"the window ends at {end}, past the end of dim {use.dim} of `{use.ref_name}` as the pallas_call on "
                f"line {C.line(ctx, site.call)} shapes it: traced, the start is clamped to fit; as a Python int Pallas "
                "rejects it. Write the start that is read"
            )
        return None if all(fits) else unknown

    def _static_starts(self, start: cst.BaseExpression, env) -> list[int]:
        """Every value the start takes: one, or one per value of the enclosing Python loops."""
        total = self._eval(start, env, [], 0)
        if total is not None:
            return [total]
        loops = _python_range_loops(self.ctx, start, env)
        if not loops or _combinations(loops) > 4096:
            return []
        values = [self._eval(start, env, [], 0, given) for given in _assignments(loops)]
        return [] if None in values else values  # type: ignore[return-value]

    def _check_python_loop_values(self, start: cst.BaseExpression, env) -> None:
        """A start over the variables of enclosing Python `for ... in range(...)` loops (an unrolled
        loop) takes each of their values: one that is negative is refused, as a known one is."""
        loops = _python_range_loops(self.ctx, start, env)
        if not loops or _combinations(loops) > 4096:
            return
        for given in _assignments(loops):
            value = self._eval(start, env, [], 0, given)
            if value is not None and value < 0:
                at = ", ".join(f"{k} = {v}" for k, v in given.items())
                raise Refuse(
                    f"at `{at}` the start is {value}: traced, a negative start is clamped; as a Python int Pallas rejects it"
                )

    def _eval(self, expr: cst.BaseExpression, env, values: list[int], depth: int, given: Optional[dict] = None) -> Optional[int]:
        if depth > 16:
            return None
        if given and isinstance(expr, cst.Name) and expr.value in given:
            values.append(given[expr.value])
            return given[expr.value]
        ctx = self.ctx
        if isinstance(expr, cst.Call) and ctx.imports.is_(expr.func, N.INT_DTYPES | N.ARRAY_CTORS | N.MULTIPLE_OF) and expr.args:
            return self._eval(expr.args[0].value, env, values, depth + 1, given)
        if isinstance(expr, cst.Name) and env.value(expr).origin is Origin.TRACED_CONST:
            _, stmt, _ = C.single_binding(ctx, expr)
            if stmt is None:
                return None
            return self._eval(stmt.value, C.env_at(self.analysis, stmt, env), values, depth + 1, given)
        if isinstance(expr, cst.BinaryOperation):
            left = self._eval(expr.left, env, values, depth + 1, given)
            right = self._eval(expr.right, env, values, depth + 1, given)
            if left is None or right is None:
                return None
            result = int_binop(expr.operator, left, right)
            if result is not None:
                values.append(result)
            return result
        if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, (cst.Minus, cst.Plus)):
            inner = self._eval(expr.expression, env, values, depth + 1, given)
            if inner is None:
                return None
            result = -inner if isinstance(expr.operator, cst.Minus) else inner
            values.append(result)
            return result
        if env.value(expr).dynamic:
            return None
        result = env.static_int(expr)
        if result is not None:
            values.append(result)
        return result


def _python_range_loops(ctx, start: cst.BaseExpression, env) -> dict[str, range]:
    """The names in `start` bound only by a `for NAME in range(...)` with static bounds."""
    loops: dict[str, range] = {}
    for name in _leaf_names(start):
        loop = C.range_loop(ctx, name)
        bounds = [env.static_int(a.value) for a in loop.iter.args] if loop is not None else [None]  # type: ignore[attr-defined]
        if None not in bounds:
            loops.setdefault(name.value, range(*bounds))
    return loops


def _combinations(loops: dict[str, range]) -> int:
    n = 1
    for r in loops.values():
        n *= len(r)
    return n


def _assignments(loops: dict[str, range]):
    names = list(loops)
    for values in itertools.product(*(loops[n] for n in names)):
        yield dict(zip(names, values))


def _has_view_dims(subscript: cst.Subscript) -> bool:
    """`...` or `None` in the index: tuple positions are not the ref's dims."""
    for el in subscript.slice:
        v = el.slice.value if isinstance(el.slice, cst.Index) else None
        if isinstance(v, cst.Ellipsis) or (isinstance(v, cst.Name) and v.value == "None"):
            return True
    return False


def _leaf_names(expr: cst.BaseExpression) -> list[cst.Name]:
    """Names an expression reads (not called functions' names, not attribute names)."""
    out: list[cst.Name] = []
    stack: list[cst.CSTNode] = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Name):
            out.append(node)
        elif isinstance(node, cst.Call):
            stack.extend(a.value for a in node.args)
        elif isinstance(node, cst.Attribute):
            stack.append(node.value)
        else:
            stack.extend(node.children)
    return out


def plan_use(analysis, use: IndexUse) -> tuple[Outcome, frozenset[int]]:
    start = use.start
    if use.kind != "ds" or start is None:
        raise Refuse("only `pl.ds` starts are rewritten")
    env = C.env_at(analysis, start, use.env)
    plan = _Plan(analysis, use)
    static = plan.strip(start, env)
    if not plan.edits:
        raise Refuse(f"pallas-fix found no jnp constructor or `pl.multiple_of` to remove in `{analysis.ctx.code(start)}`")
    plan.check_ranges(start, env)
    fix, key = plan.plan(NAME, CODE, f"Python ints in the start of `{use.ref_name}`")
    doubt = plan.window_doubt(start, env) if static else None
    if doubt:
        fix = dataclasses.replace(fix, safety=FixSafety.UNSAFE, description=f"{fix.description}; unsafe: {doubt}")
    return fix, key


RECIPE = Recipe(
    NAME, frozenset({CODE}), C.start_planner(NAME, CODE, plan_use), command="TracedConstantToInt",
    description="Write traced constants in slice starts as Python ints (R4, PF104).",
)
