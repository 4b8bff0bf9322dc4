"""A slice start that is not an integer scalar becomes one (fixes PF107).

(a) A one-element load used as a start:
        off = offsets_ref[pl.ds(e, 1)]        # shape (1,)
        rows = x_ref[pl.ds(off, R), :]
    becomes a scalar load, `off = offsets_ref[e]` (`idx_ref[b, pl.ds(k, 1)]` → `idx_ref[b, k]`),
    when every read of `off` feeds a slice start through integer arithmetic. When `off` is also
    used as an array (stored to a (1,)-shaped output, indexed, ...), only the start changes:
    `x_ref[pl.ds(off[0], R), :]`.
(b) A float start (`i.astype(jnp.float32) * 16`, `i / 2 * 16`) and (c) a bool start get an int32
    cast: `pl.ds((i / 2 * 16).astype(jnp.int32), 16)`.

Why the cast keeps the result: the HLO interpreter discharges a `pl.ds` window into
`lax.dynamic_slice` / `dynamic_update_slice` and converts every start with
`lax.convert_element_type(start, int32)` first (jax/_src/state/discharge.py,
`_maybe_convert_to_dynamic_slice`). `.astype(jnp.int32)` is that same conversion done in the
kernel, so the interpreter then sees the same int32 start (truncation toward zero, then its
usual clamping). Strided windows and subscripts with an integer-array index take the gather path
instead, where a float start is not converted, and `.at[...]` views passed to copy primitives
have their own rules: there the cast is offered as an unsafe fix (measured: a strided float start
fails in the HLO interpreter, "Indexer must have integer or boolean type", and runs once cast).

The one-element form fails wherever it runs (HLO interpreter: "start_indices arguments to
dynamic_slice must be scalars" at lowering; TPU: "Advanced indexers"; GPU interpret mode:
"Dynamic indexing not supported"), so the rewrite gives the start the meaning its author wrote.

Past the end. The rewritten start is data: when a table entry points past the end of the sliced
ref, the HLO interpreter clamps the window and TPU / GPU interpret mode raise IndexError, as for
any start loaded from a ref; the original never ran, so there is no clamp of its own to keep, and
verification (whose index operands stay in range, `pallas_fix.verify.worker.index_ranges`) judges the
in-range tables. What the rewrite must not change is which table entry is read: for a traced
position `pl.ds(k, 1)` and `k` read the same entry (the HLO interpreter normalises and clamps both
alike), but for a Python-int position they do not (`pl.ds(5, 1)` past the end fails at trace
time, `table[5]` is clamped silently, `table[-1]` wraps around). A Python-int position is
rewritten only when the table's own extent bounds it (`_check_table_position`).
"""

from __future__ import annotations

from typing import Optional

import libcst as cst

from pallas_fix.core import names as N
from pallas_fix.core.model import FixSafety, IndexUse
from pallas_fix.core.plans import FixPlan, Outcome, Recipe, Refuse
from pallas_fix.rewrite import common as C
from pallas_fix.rewrite.text import imports
from pallas_fix.rewrite.text.edits import NodeReplacer, apply_edits

NAME = "scalar-start"
CODE = "PF107"


# -- (a) one-element loads -------------------------------------------------------------------------
class _Scalarize(C.StartEdits):
    """Edits that turn the one-element loads feeding one start into scalar loads."""

    def __init__(self, analysis, use: IndexUse) -> None:
        super().__init__(analysis, use)
        self.followed: set[int] = set()

    def walk(self, expr: cst.BaseExpression, env) -> None:
        ctx = self.ctx
        val = env.value(expr)
        if not val.dynamic or val.vtype in ("int", "float", "bool"):
            return  # already a scalar (a float or bool one is cast in a later round)
        if val.vtype != "array1":
            raise Refuse(f"`{ctx.code(expr)}` is not a one-element value pallas-fix can follow")
        if isinstance(expr, cst.Subscript):
            if load_rank(ctx, expr, env) is None:
                raise Refuse(f"`{ctx.code(expr)}` is not a one-element ref load written with `pl.ds(k, 1)`")
            self._scalar_load(expr, env)
            return
        if isinstance(expr, cst.Name):
            self._name(expr, env)
            return
        if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, C.INT_OPS):
            self.walk(expr.left, env)
            self.walk(expr.right, env)
            return
        if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, (cst.Minus, cst.Plus)):
            self.walk(expr.expression, env)
            return
        if isinstance(expr, cst.Call) and ctx.imports.is_(expr.func, N.INT_DTYPES | N.MULTIPLE_OF) and expr.args:
            self.walk(expr.args[0].value, env)
            return
        raise Refuse(f"pallas-fix cannot turn `{ctx.code(expr)}` into a scalar")

    def _scalar_load(self, sub: cst.Subscript, env) -> None:
        ctx = self.ctx
        positions = [i for i, el in enumerate(sub.slice) if _one_element_ds(ctx, el, env) is not None]
        for i in positions:
            if not isinstance(sub.slice[i].slice.value, cst.Call):  # type: ignore[union-attr]
                raise Refuse(
                    f"the one-element window in `{ctx.code(sub)}` is a named slice; pallas-fix rewrites `pl.ds(k, 1)` written in place"
                )
            _check_table_position(ctx, env, sub, i)

        def edit(updated: cst.Subscript) -> cst.Subscript:
            elements = list(updated.slice)
            for i in positions:
                call = elements[i].slice.value  # type: ignore[union-attr]
                start = _ds_start(call)
                elements[i] = elements[i].with_changes(slice=cst.Index(value=start))
            return updated.with_changes(slice=elements)

        self.edits[sub] = edit
        scalar = sub.visit(NodeReplacer({sub: edit}))
        self.changes.append(f"`{ctx.code(sub)}` → `{C.code_of(scalar)}` (a scalar load)")

    def _name(self, name: cst.Name, env) -> None:
        ctx = self.ctx
        stmt = self.binding(name, "the one-element value")
        if id(stmt) in self.followed:
            return
        def_env = C.env_at(self.analysis, stmt, env)
        other_use = C.flows_only_into_starts(ctx, stmt.targets[0].target, self._operand_ok)  # type: ignore[arg-type]
        if other_use is None:
            self.followed.add(id(stmt))
            self.walk(stmt.value, def_env)
            return
        rank = value_rank(self.analysis, stmt.value, def_env)
        if rank is None:
            raise Refuse(f"{other_use}, and pallas-fix cannot tell the shape of `{name.value}` to index it")
        parent = ctx.parent(name)
        zeros = [cst.SubscriptElement(cst.Index(cst.Integer("0"))) for _ in range(rank)]
        elements = [
            z.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))) if k < rank - 1 else z
            for k, z in enumerate(zeros)
        ]
        self.edits[name] = lambda updated: C.fit_into(parent, cst.Subscript(value=updated, slice=elements))
        shown = name.value + "[" + ", ".join("0" for _ in range(rank)) + "]"
        self.changes.append(f"`{name.value}` → `{shown}` in this start ({other_use}, so its load stays)")

    def _operand_ok(self, expr: cst.BaseExpression) -> bool:
        env = C.env_at(self.analysis, expr, self.use.env)
        val = env.value(expr)
        if not val.dynamic:
            return C.provably_int(env, expr, C.ds_size_names(self.ctx, self.use.function))
        return val.vtype in ("int", "array1")


def _one_element_ds(ctx, element: cst.SubscriptElement, env) -> Optional[cst.BaseExpression]:
    if not isinstance(element.slice, cst.Index):
        return None
    parts = env.ds_parts(element.slice.value)
    if parts is None:
        return None
    start, size = parts
    if size is None or env.static_int(size) != 1:
        return None
    return start


def load_rank(ctx, sub: cst.Subscript, env) -> Optional[int]:
    """Number of `pl.ds(k, 1)` dims of a ref load whose other indices are scalars, or None."""
    base = sub.value
    if isinstance(base, cst.Attribute) and base.attr.value == "at":
        return None
    if not env.value(base).is_ref:
        return None
    rank = 0
    for el in sub.slice:
        if not isinstance(el.slice, cst.Index):
            return None
        if _one_element_ds(ctx, el, env) is not None:
            rank += 1
            continue
        if env.ds_call(el.slice.value) is not None or isinstance(el.slice.value, cst.Ellipsis):
            return None
        if env.value(el.slice.value).vtype != "int":
            return None
    return rank or None


def value_rank(analysis, expr: cst.BaseExpression, env, depth: int = 0) -> Optional[int]:
    ctx = analysis.ctx
    if depth > 8:
        return None
    val = env.value(expr)
    if not val.dynamic or val.vtype == "int":
        return 0
    if isinstance(expr, cst.Subscript):
        return load_rank(ctx, expr, env)
    if isinstance(expr, cst.Name):
        _, stmt, _ = C.single_binding(ctx, expr)
        return None if stmt is None else value_rank(analysis, stmt.value, C.env_at(analysis, stmt, env), depth + 1)
    if isinstance(expr, cst.BinaryOperation):
        ranks = {value_rank(analysis, e, env, depth + 1) for e in (expr.left, expr.right)} - {0}
        return ranks.pop() if len(ranks) == 1 and None not in ranks else None
    if isinstance(expr, cst.UnaryOperation):
        return value_rank(analysis, expr.expression, env, depth + 1)
    return None


# -- where in the table ----------------------------------------------------------------------------
def _check_table_position(ctx, env, sub: cst.Subscript, dim: int) -> None:
    """The table entry a one-element load reads must be the one its scalar load reads.

    A traced position reads the same entry either way: the HLO interpreter normalises and clamps
    `pl.ds(k, 1)` and `k` alike (measured: -1 and past-the-end positions give the same entry), and
    TPU / GPU interpret mode reject both. A Python-int position does not: `pl.ds(5, 1)` past the
    end of the table fails at trace time ("Out of bound slice"), but `table[5]` is clamped silently
    and `table[-1]` wraps around. So a Python-int position must be provably inside the table:
    bounded by the table's own extent along that dimension (`for k in range(n)`, `n - 1`, `0`,
    with `n` read from `table.shape`); any other is refused."""
    start = _ds_start(sub.slice[dim].slice.value)  # type: ignore[union-attr]
    if env.value(start).dynamic or _inside_extent(ctx, env, start, sub.value, dim):
        return
    raise Refuse(
        f"the table position `{ctx.code(start)}` in `{ctx.code(sub)}` is a Python int that pallas-fix cannot bound"
        f" by the extent of `{ctx.code(sub.value)}`: past its end, the scalar load would be clamped silently (and a"
        f" negative one wraps around) where the one-element slice fails at trace time; write the position as"
        f" `k` of `for k in range({ctx.code(sub.value)}.shape[{dim}])` or index the table with a traced value"
    )


def _inside_extent(ctx, env, start: cst.BaseExpression, table: cst.BaseExpression, dim: int) -> bool:
    """`0 <= start < table.shape[dim]`, from the code alone."""
    if env.static_int(start) == 0:
        return True
    if isinstance(start, cst.BinaryOperation) and isinstance(start.operator, cst.Subtract):
        return env.static_int(start.right) == 1 and _is_extent(ctx, start.left, table, dim)
    if isinstance(start, cst.Name):
        loop = C.range_loop(ctx, start)
        if loop is None or len(loop.iter.args) > 2:  # type: ignore[attr-defined]
            return False
        args = [a.value for a in loop.iter.args]  # type: ignore[attr-defined]
        low = env.static_int(args[0]) if len(args) == 2 else 0
        return low is not None and low >= 0 and _is_extent(ctx, args[-1], table, dim)
    return False


def _is_extent(ctx, expr: cst.BaseExpression, table: cst.BaseExpression, dim: int, depth: int = 0) -> bool:
    """`expr` is `table.shape[dim]`, or a name bound once to it (`n = t.shape[d]`, `m, n = t.shape`)."""
    if not isinstance(table, cst.Name) or depth > 3:
        return False
    if isinstance(expr, cst.Subscript) and len(expr.slice) == 1 and isinstance(expr.slice[0].slice, cst.Index):
        index = expr.slice[0].slice.value
        return (_is_shape_of(expr.value, table) and isinstance(index, cst.Integer)
                and int(index.evaluated_value) == dim)
    if not isinstance(expr, cst.Name):
        return False
    scope = C.scope_at(ctx, expr)
    found = list(scope[expr.value]) if scope is not None else []
    if len(found) != 1 or not hasattr(found[0], "node"):
        return False
    target = found[0].node
    holder = ctx.parent(target)
    if isinstance(holder, cst.AssignTarget):
        assign = ctx.parent(holder)
        return isinstance(assign, cst.Assign) and _is_extent(ctx, assign.value, table, dim, depth + 1)
    element, tup = holder, ctx.parent(holder)
    if isinstance(element, cst.Element) and isinstance(tup, cst.Tuple):
        holder = ctx.parent(tup)
        assign = ctx.parent(holder) if isinstance(holder, cst.AssignTarget) else None
        position = list(tup.elements).index(element)
        return (isinstance(assign, cst.Assign) and position == dim and _is_shape_of(assign.value, table)
                and not any(isinstance(e, cst.StarredElement) for e in tup.elements))
    return False


def _is_shape_of(expr: cst.BaseExpression, table: cst.Name) -> bool:
    return (isinstance(expr, cst.Attribute) and expr.attr.value == "shape"
            and isinstance(expr.value, cst.Name) and expr.value.value == table.value)


def _ds_start(call: cst.Call) -> cst.BaseExpression:
    for a in call.args:
        if a.keyword is not None and a.keyword.value == "start":
            return a.value
    return [a for a in call.args if a.keyword is None][0].value


# -- (b), (c) float and bool starts ----------------------------------------------------------------
def _int32_spelling(analysis, at: cst.CSTNode) -> imports.Spelling:
    """How to write `jax.numpy` at `at`, with the import to add when the file has none."""
    found = imports.spelling_at(analysis.ctx, imports.NUMPY, at)
    if found is None:
        raise Refuse("the module has no name for `jax.numpy` and `jnp` is already used for something else")
    return found


def _cast_plan(analysis, use: IndexUse) -> tuple[Outcome, frozenset[int]]:
    ctx = analysis.ctx
    start = use.start
    if use.kind != "ds" or start is None:
        raise Refuse(f"only `pl.ds` starts are cast; this is a {use.kind} index")
    numpy = _int32_spelling(analysis, start)
    unsafe = _gather_path(analysis, use)
    int32_expr = cst.parse_expression(f"{numpy.text}.int32")

    def edit(updated: cst.BaseExpression) -> cst.BaseExpression:
        return cst.Call(func=cst.Attribute(value=C.parenthesized(updated), attr=cst.Name("astype")), args=[cst.Arg(int32_expr)])

    edits = {start: edit}

    def rewrite(module: cst.Module) -> cst.Module:
        new, _ = apply_edits(module, edits)  # type: ignore[arg-type]
        return imports.add_imports(new, [numpy.add])

    what = use.provenance.detail
    line = C.line(ctx, use.subscript)
    description = (
        f"{CODE} line {line}: cast the {what} start `{ctx.code(start)}` of `{use.ref_name}` to int32"
        f" (`{C.code_of(edit(start))}`)"
    )
    if unsafe:
        description += f"; unsafe: {unsafe}"
    safety = FixSafety.UNSAFE if unsafe else FixSafety.SAFE
    return FixPlan(NAME, safety, [use], description, rewrite, site=use.kernel_site), frozenset({id(start)})


def _gather_path(analysis, use: IndexUse) -> Optional[str]:
    """Why the HLO interpreter may not convert this start with convert_element_type, if it may not."""
    ctx = analysis.ctx
    if use.stride is not None and use.env.static_int(use.stride) != 1:
        return "a strided window is indexed through a gather, where the start is not converted to int32"
    if use.via_at and isinstance(ctx.parent(use.subscript), cst.Arg):
        return "the `.at[...]` view is passed to a call (a copy primitive has its own start handling)"
    for other in analysis.uses:
        if other.subscript is use.subscript and other.kind == "int_array":
            return "the subscript also has an integer-array index, so it is indexed through a gather"
    return None


# -- planner ---------------------------------------------------------------------------------------
def plan_use(analysis, use: IndexUse) -> tuple[Outcome, frozenset[int]]:
    detail = use.provenance.detail
    if detail in ("float", "bool"):
        return _cast_plan(analysis, use)
    if detail != "one_element":
        raise Refuse("pallas-fix cannot tell what kind of value this start is")
    if use.kind != "ds" or use.start is None:
        raise Refuse(
            f"the one-element value indexes `{use.ref_name}` as an integer array; a scalar index would drop a dimension of the result"
        )
    walker = _Scalarize(analysis, use)
    walker.walk(use.start, C.env_at(analysis, use.start, use.env))
    if not walker.edits:
        raise Refuse(f"pallas-fix found no one-element load in `{analysis.ctx.code(use.start)}`")
    return walker.plan(NAME, CODE, f"integer scalar start for `{use.ref_name}`")

RECIPE = Recipe(
    NAME, frozenset({CODE}), C.start_planner(NAME, CODE, plan_use), command="ScalarStart",
    description="Make slice starts integer scalars: scalar loads instead of one-element slices, int32 casts of"
    " float/bool starts (PF107).",
)
