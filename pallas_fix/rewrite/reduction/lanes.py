"""Lane-dense softmax statistics (R2 on TPU): a carry leaf of shape `(rows, 1)` (an online
softmax's running max `m` and sum `l`) lives in a `(rows, 128)` scratch buffer whose every lane
holds the row's value, as JAX's `ops/tpu/flash_attention.py` keeps them. A `(rows, 1)` value
fills one lane of each vector register, and every step loads and stores it lane-masked and
broadcasts it across lanes for `s - m` and `alpha * acc`; lane-dense, the same arithmetic runs
on whole registers, which pays where each step broadcasts the statistics across a wider value
(`s - m`, `alpha * acc`); a carry that only accumulates (row sums) keeps its layout. Measured on a TPU v5e (benchmarks/tpu_experiments/README.md), this alone
brought the lifted flash attention from 0.81x to 1.0x JAX's kernel at the same blocks.

The rewrite keeps the user's arithmetic and changes only what broadcasts. Every value is one of
- L: a lane-dense stand-in, `(rows, 128)` holding a `(rows, 1)` value in all lanes: the leaf's
  loads, and what elementwise arithmetic makes of them with L or C operands;
- C: a value known to broadcast against `(rows, 1)` into `(rows, 1)`: a number, a keepdims
  reduction over the last axis (`jnp.max(s, axis=-1, keepdims=True)`);
- F: everything else, which holds exactly the original's value.
An elementwise operation of an L value with an F one widens the L operand to the F operand's
last dim (`_lanes_like(m_next, s)`: exactly the original's broadcast, whatever the shapes), so
F values stay exact at every shape and only L needs care: an L value may only meet elementwise
operations and the leaf's own store. Anything else (a reduction or a dot of it, a subscript, a
store into another ref, a branch) keeps the `(rows, 1)` layout for the whole carry; after the
loop, where it runs once, an L value in such a place is narrowed back (`l[..., :1]`).

Which axis a keepdims reduction names (`axis=1`) is read as the last when the value is 2-D, a
rank the lifted kernel's fixed block ranks decide once for every call, and which verification
on an example confirms (R2 is an unsafe fix, written once verified)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import libcst as cst

from pallas_fix.analysis.context import walk
from pallas_fix.core.model import Backend
from pallas_fix.core.plans import Refuse
from pallas_fix.rewrite.reduction.carries import Carry, Leaf, built_shape
from pallas_fix.rewrite.reduction.carry_io import body_and_result, unpack_to_drop
from pallas_fix.rewrite.reduction.carry_names import result_target
from pallas_fix.rewrite.reduction.carry_tree import literal_leaves, mirror
from pallas_fix.rewrite.reduction.lane_values import L, NoLanes, expression, mentions, statement
from pallas_fix.rewrite.text.scopes import bindings, underscored
from pallas_fix.rewrite.text.syntax import code, names_in, variable_names

LANES = 128
_SCALAR_TYPES = frozenset({"float32", "float16", "bfloat16", "int32", "int16", "int8", "uint32", "bool_", "finfo", "iinfo"})


@dataclass(frozen=True)
class LaneLayout:
    leaves: frozenset[int]  # the carry leaves kept lane-dense
    helper: str  # the module-level function that widens an L value: `_lanes_like`
    jnp: str  # how the file spells jax.numpy
    scalars: frozenset[str] = frozenset()  # names from outside the loop holding Python numbers (class C)

    def helper_def(self) -> cst.FunctionDef:
        fn = cst.parse_statement(
            f"def {self.helper}(x, like):\n"
            f'    """`x` holds a (rows, 1) value in each of its {LANES} lanes (lane-dense softmax statistics,\n'
            f"    as JAX's flash attention keeps them); the value broadcast as `like`'s last dim broadcasts it.\"\"\"\n"
            f"    n = {self.jnp}.shape(like)[-1] if {self.jnp}.ndim(like) else 1\n"
            f"    if n % {LANES} == 0:\n"
            f"        return {self.jnp}.tile(x, (1,) * (x.ndim - 1) + (n // {LANES},))\n"
            f"    return x[..., :n] if n < {LANES} else {self.jnp}.broadcast_to(x[..., :1], x.shape[:-1] + (n,))\n"
        )
        assert isinstance(fn, cst.FunctionDef)
        return fn.with_changes(leading_lines=[], lines_after_decorators=[])


def lane_layout(ctx, region, carry: Carry, after: list, embedded, backend: Backend, jnp: str) -> Optional[LaneLayout]:
    """The layout for the carry's `(rows, 1)` float32 leaves when every use of them in the loop
    body and after it allows it (see the module's doc); None keeps the carry as it is."""
    if backend is not Backend.TPU or embedded is not None or carry.tree is None or carry.tree.is_leaf:
        return None
    unpack = unpack_to_drop(region, carry)
    if unpack is None:
        return None
    step_names = mirror(carry.tree, unpack.body[0].targets[0].target) or {}  # type: ignore[attr-defined]
    chosen = frozenset(n for n, leaf in enumerate(carry.leaves) if _column_leaf(ctx, leaf) and step_names.get(n, "_") != "_")
    if not chosen:
        return None
    try:
        stmts, result = body_and_result(region.body, drop_unpack=True)
    except Refuse:  # the lift says why itself
        return None
    layout = LaneLayout(chosen, underscored("_lanes_like", names_in(ctx.module)), jnp, _python_numbers(ctx, region, [*stmts, *after]))
    try:
        step, stored = step_statements(ctx, layout, carry, stmts, result, unpack)
        final_statements(ctx, layout, carry, region, after)
    except NoLanes:
        return None
    # Lane-dense pays where each step broadcasts the statistics across a wider value (`s - m`,
    # `alpha * acc`); a carry that only accumulates (row sums) keeps its layout.
    widened = any(mentions(node, {layout.helper}) for node in [*step, stored])
    return layout if widened else None


def lane_leaf(leaf: Leaf) -> Leaf:
    """The leaf with a `(rows, 128)` buffer and initial value."""
    init = leaf.init
    assert isinstance(init, cst.Call)
    args = [a.with_changes(value=_lanes_shape(a.value)) if _is_shape_arg(init, n, a) else a for n, a in enumerate(init.args)]
    assert leaf.shape is not None
    return Leaf(leaf.name, leaf.ref, init.with_changes(args=args), _lanes_shape(leaf.shape), leaf.dtype)


def step_statements(ctx, layout: LaneLayout, carry: Carry, stmts: list, result: cst.BaseExpression,
                    unpack) -> tuple[list, cst.BaseExpression]:
    """The loop body's statements and returned carry with L values widened where they meet F
    ones; raises NoLanes where an L value has another use, or a lane-dense leaf would store a
    value that is not L (or another leaf an L value)."""
    assert carry.tree is not None
    names = mirror(carry.tree, unpack.body[0].targets[0].target) or {}
    env = {names[n]: L for n in layout.leaves}
    out = [statement(ctx, layout, s, env, final=False) for s in stmts]
    by_leaf = literal_leaves(carry.tree, result)
    if by_leaf is None:
        raise NoLanes("the body returns its carry as a computed value")
    stored = {}
    for n, value in by_leaf.items():
        stored[n], cls = expression(ctx, layout, value, dict(env), final=False)
        if (cls == L) != (n in layout.leaves):
            raise NoLanes(f"leaf {n} stores `{code(value)}`")
    if all(stored[n] is v for n, v in by_leaf.items()):
        return out, result
    if not (carry.tree.is_flat() and isinstance(result, (cst.Tuple, cst.List))):
        raise NoLanes("a returned leaf needs widening inside a nested carry")
    return out, result.with_changes(elements=[e.with_changes(value=stored[n]) for n, e in enumerate(result.elements)])


def final_statements(ctx, layout: LaneLayout, carry: Carry, region, after: list) -> list:
    """What follows the loop (it runs once, in `_finalize`), over the loop's result."""
    assert carry.tree is not None
    names = mirror(carry.tree, result_target(region)) or {}
    env = {names[n]: L for n in layout.leaves if names.get(n, "_") != "_"}
    if not env and result_target(region) is not None and any(mentions(s, {code(result_target(region))}) for s in after):
        raise NoLanes("the code after the loop reads the whole result")
    return [statement(ctx, layout, s, env, final=True) for s in after]


def _python_numbers(ctx, region, stmts: list) -> frozenset[str]:
    """Names the statements read but never bind whose kernel-level value is a Python number (a
    literal, a shape, a partial-bound keyword): scalars, which broadcast against anything. A
    module-level numpy or jax.numpy array (`_BIAS = np.ones(128)`) is not one."""
    bound = {n for s in stmts for n in bindings(s, nested=True)}
    if isinstance(region.body, cst.FunctionDef):
        bound |= {p.name.value for p in region.body.params.params}
        bound |= {n for s in region.body.body.body for n in bindings(s, nested=True)}  # the dropped `m, l = carry` too
    params = {p.name.value for p in [*region.site.kernel.params.params, *region.site.kernel.params.kwonly_params]}
    out = set()
    for name in set().union(*map(variable_names, stmts)) - bound:
        val = region.env.value(cst.Name(name))
        if val.dynamic or val.vtype not in ("int", "float", "bool"):
            continue
        value = ctx.resolve_value(cst.Name(name), region.statement)
        if isinstance(value, cst.Name) and name not in params:
            continue  # no single binding to read it from: not known to be a number
        q = (ctx.imports.qualify(value.func) or "") if isinstance(value, cst.Call) else ""
        if q.startswith(("numpy.", "jax.numpy.")) and q.rsplit(".", 1)[1] not in _SCALAR_TYPES:
            continue
        if ctx.imports.qualify(cst.Name(name)) is not None:
            continue  # a module (`jnp`) or an imported function, never an operand
        out.add(name)
    return frozenset(out)


# -- which leaves ---------------------------------------------------------------------------------------
def _column_leaf(ctx, leaf: Leaf) -> bool:
    """A float32 `(rows, 1)` scratch leaf built by zeros / ones / empty / full with that shape."""
    if leaf.ref is None or leaf.scalar or leaf.shape is None or leaf.dtype is None:
        return False
    if (ctx.imports.qualify(leaf.dtype) or "") != "jax.numpy.float32" or not _is_column(leaf.shape):
        return False
    built = built_shape(ctx, leaf.init)  # built, not read whole from a ref (whose layout is the ref's)
    return built is not None and _is_column(built)


def _is_shape_arg(call: cst.Call, n: int, arg: cst.Arg) -> bool:
    """The argument built_shape reads the shape from: the first positional one or `shape=`."""
    return (arg.keyword is None and n == 0 and not arg.star) or (arg.keyword is not None and arg.keyword.value == "shape")


def _is_column(shape: cst.BaseExpression) -> bool:
    if not isinstance(shape, cst.Tuple) or len(shape.elements) != 2:
        return False
    last = shape.elements[-1].value
    return isinstance(last, cst.Integer) and last.evaluated_value == 1


def _lanes_shape(shape: cst.BaseExpression) -> cst.BaseExpression:
    assert isinstance(shape, cst.Tuple)
    last = shape.elements[-1]
    return shape.with_changes(elements=[*shape.elements[:-1], last.with_changes(value=cst.Integer(str(LANES)))])


def lane_dense_kernels(original: str, rewritten: str) -> frozenset[str]:
    """The names of the functions of `rewritten` (kernels, at any depth) that call a lane-dense
    helper it adds, one `original` does not define: the kernels whose lift keeps an online
    softmax's statistics lane-dense. Verification reads them to judge a strip-mined lift's speed
    (verify.judge.lift_cost). Text in, names out, like strip.one_window_per_step."""
    if "def _lanes_like" not in rewritten:  # most rewrites: nothing to parse
        return frozenset()
    try:
        had, module = _lane_helpers(cst.parse_module(original)), cst.parse_module(rewritten)
    except cst.ParserSyntaxError:
        return frozenset()
    added = _lane_helpers(module) - had
    return frozenset(
        fn.name.value for fn in walk(module) if isinstance(fn, cst.FunctionDef) and fn.name.value not in added
        and any(isinstance(c, cst.Call) and isinstance(c.func, cst.Name) and c.func.value in added for c in walk(fn)))


def _lane_helpers(module: cst.Module) -> frozenset[str]:
    return frozenset(s.name.value for s in module.body if isinstance(s, cst.FunctionDef) and s.name.value.startswith("_lanes_like"))
