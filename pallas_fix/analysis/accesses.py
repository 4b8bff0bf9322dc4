"""The dynamic indices of one subscript of a ref: each becomes an `IndexUse`.

A dim counts when its `pl.ds` start or size is traced, when a plain slice bound is traced, or
when it is indexed by a traced integer array. Subscripts of `*refs` lists and the slices a DMA
descriptor is rebuilt with only to `.wait()` on it move no data and give none.

A traced integer scalar index (`x_ref[r, :]`, `h_ref[idx, 0]`) is a "scalar" use only on an
input or output ref of the kernel itself (not scalar prefetch, not scratch, not placed whole in a
memory space), in a subscript with no other dynamic element (a window's planner squeezes such dims
itself; a program-id row beside windows that only loop indices drive is a use of its own, since
the loop may stay) that is a write or keeps a dim, and only when it is driven by a loop index or
`pl.program_id` (it could become a squeezed block dim) or by data or a traced value with no loop
or grid term (`o_ref[page, :] = v` with `page` a table entry: a scatter or gather of whole rows,
reported with no fix). Every other scalar index (a table entry `idx_ref[b]`,
a buffer slot `buf.at[slot]`) is the usual, recommended form and no finding (a read `x_ref[b]`
of a whole slab looks like a table entry and is not reported either); `scalar_index_dims`
still lists them all, for the jaxpr oracle's comparison.

An atomic indexes its ref by an argument (`atomic_add(o_ref, idx, v)`): a traced integer array
there is an "int_array" use standing at the call (`atomic_index_uses`), refused by every planner.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

import libcst as cst

from pallas_fix.core import names as N
from pallas_fix.analysis.context import ModuleContext, walk
from pallas_fix.analysis.discovery.helper_calls import caller_window, home_env, index_tuple, passed_through, slice_helper
from pallas_fix.analysis.discovery.operand_refs import operand_ref
from pallas_fix.analysis.effects.calls import writer
from pallas_fix.analysis.values.provenance import Env
from pallas_fix.analysis.values.values import STATIC, Val
from pallas_fix.core.model import IndexUse, KernelSite, Origin, Provenance
from pallas_fix.core.names import call_arg

_DESCRIPTORS = frozenset({N.TPU + ".make_async_copy", N.TPU + ".make_async_remote_copy"})


@dataclass(frozen=True)
class _Access:
    """One subscript of a ref, as seen from the function `fn` analysed under `env`."""

    site: KernelSite
    sub: cst.Subscript
    fn: cst.FunctionDef | cst.Lambda
    env: Env
    ref_expr: cst.BaseExpression
    via_at: bool
    # The position of the first *starred element or `...` of the index: from there on an
    # element's position is not its dim (that needs the ref's rank or the unpacked length).
    unknown_from: Optional[int]
    ellipsis: bool = False  # what hides the dims from `unknown_from` on is a `...`
    positions: int = 0  # how many entries the index has

    def use(self, dim, element, start, size, kind, sval: Val, zval: Optional[Val], stride=None, through=None,
            env: Optional[Env] = None) -> IndexUse:
        ctx = self.env.ctx
        owner = self.fn if isinstance(self.fn, cst.FunctionDef) else ctx.enclosing_function(self.fn)
        provenance = to_provenance(sval)
        hidden = self.unknown_from is not None and dim >= self.unknown_from  # its position is not its dim
        through = through or passed_through(self.env, self._named_index(element))
        if through is not None:  # the slice object comes from a caller: say which call
            provenance = replace(provenance, description=f"{provenance.description}; {through}")
        return IndexUse(
            ctx.code(self.ref_expr), self.sub, dim, element, start, size, kind,
            provenance, to_provenance(zval) if zval is not None else None, ctx.span(self.sub),
            function=owner,  # type: ignore[arg-type]
            via_at=self.via_at, stride=stride, env=env or (home_env(self.env, start) if start is not None else self.env),
            kernel_site=self.site, starred=hidden, after_ellipsis=self.ellipsis and hidden, positions=self.positions,
        )

    def _named_index(self, element: cst.BaseExpression) -> cst.BaseExpression:
        """The name a slice is passed in: the element itself, or the name the whole index tuple
        is written as (`x_ref[rows]` with `rows = (pl.ds(...), slice(None))`)."""
        if isinstance(self.sub, cst.Subscript) and len(self.sub.slice) == 1 and isinstance(self.sub.slice[0].slice, cst.Index):
            whole = self.sub.slice[0].slice.value
            if isinstance(whole, cst.Name) and whole is not element:
                return whole
        return element


def index_uses(site: KernelSite, sub: cst.Subscript, fn, env: Env) -> list[IndexUse]:
    """The dynamic indices of `sub`, in dim order."""
    ctx = env.ctx
    base = sub.value
    via_at = isinstance(base, cst.Attribute) and base.attr.value == "at"
    ref_expr = base.value if via_at else base
    if isinstance(ref_expr, cst.Attribute) and ref_expr.attr.value in ("shape", "strides", "at"):
        return []
    base_val = env.value(ref_expr)
    if base_val.vtype == "reflist" or only_waited(ctx, sub):
        return []
    elements, unknown_from, ellipsis = _index_elements(sub, env)
    positions = len(elements)  # the `...` among them (read only where no element is starred)
    access = _Access(site, sub, fn, env, ref_expr, via_at, unknown_from, ellipsis, positions)
    starred = unknown_from is not None and not ellipsis  # a *starred element: no dim is known
    is_ref = base_val.is_ref or via_at
    uses = [u for u in (_dim_use(access, is_ref, dim, sl) for dim, sl in elements) if u is not None]
    if uses and is_ref and not starred and operand_ref(site, env, ref_expr):
        return sorted(uses + _grid_rows(access, elements, uses), key=lambda u: u.dim)
    if uses or not is_ref or starred or not operand_ref(site, env, ref_expr) or _element_load(env, sub, elements):
        return uses
    return [u for u in (_scalar_use(access, dim, sl) for dim, sl in elements) if u is not None]


def atomic_index_uses(site: KernelSite, call: cst.Call, fn, env: Env) -> list[IndexUse]:
    """`atomic_add(o_ref, idx, v)`: the index is the call's argument, not a subscript, and jax
    indexes the ref with it as `o_ref[idx]` would. A traced integer array there is a scatter at
    positions the kernel computes (what atomics are for): each such dim is an "int_array" use
    standing at the call. Windows and scalars written there are not modelled (planners rewrite
    subscripts only)."""
    if not env.ctx.imports.is_(call.func, N.INDEXED_ATOMICS):
        return []
    ref_expr, index = call_arg(call, 0, "x_ref_or_view"), call_arg(call, 1, "idx")
    if ref_expr is None or index is None:
        return []
    via_at = isinstance(ref_expr, cst.Subscript) and isinstance(ref_expr.value, cst.Attribute) and ref_expr.value.attr.value == "at"
    base = ref_expr.value.value if via_at else ref_expr  # type: ignore[union-attr]
    if not env.value(base).is_ref or env.value(base).vtype == "reflist":
        return []
    access = _Access(site, call, fn, env, base, via_at, None)  # type: ignore[arg-type]
    packed = index_tuple(env, index)
    elements = [e.value for e in packed.elements] if packed is not None else [index]
    if any(isinstance(e, cst.StarredElement) for e in (packed.elements if packed is not None else ())):
        return []
    uses = [_dim_use(access, True, dim, cst.Index(value)) for dim, value in enumerate(elements)]
    return [u for u in uses if u is not None and u.kind == "int_array"]


def _element_load(env: Env, sub: cst.Subscript, elements) -> bool:
    """A read whose every index is a traced scalar (`lens_ref[b]`, `pages_ref[b, j]`): how a
    kernel reads one entry of a table, whose value then feeds a start or a mask. Such reads are
    not reported; a read that keeps a dim (`x_ref[r, :]`, `h_ref[idx, 0]`) or any write is."""
    return not _written(env, sub) and not _contracted(env, sub) and all(_traced_int_scalar(env, sl) for _, sl in elements)


def _written(env: Env, sub: cst.Subscript) -> bool:
    """`ref[...] = v`, `ref[...] += v`, or the view a library store or atomic writes through
    (`pltriton.store(o_ref.at[r, c], v)`, `atomic_add(o_ref.at[r], 0, v)`)."""
    ctx = env.ctx
    parent = ctx.parent(sub)
    if isinstance(parent, cst.AssignTarget) or (isinstance(parent, cst.AugAssign) and parent.target is sub):
        return True
    call = ctx.parent(parent) if isinstance(parent, cst.Arg) else None
    if not isinstance(call, cst.Call):
        return False
    found = writer(ctx.imports.qualify(call.func) or "")
    if found is None:
        return False
    positional = [a for a in call.args if a.keyword is None and not a.star]
    for position, keyword in found.positions:
        if parent.keyword is not None and parent.keyword.value == keyword:  # type: ignore[union-attr]
            return True
        if position < len(positional) and positional[position] is parent:
            return True
    return False


def _contracted(env: Env, sub: cst.Subscript) -> bool:
    """`jnp.dot(x, w_ref[e])`, `x @ w_ref[e]`: the read keeps dims (one expert's weight matrix,
    as in a loop over experts), so its index is a block index, not a table entry."""
    parent = env.ctx.parent(sub)
    if isinstance(parent, cst.BinaryOperation):
        return isinstance(parent.operator, cst.MatrixMultiply)
    call = env.ctx.parent(parent) if isinstance(parent, cst.Arg) else None
    return isinstance(call, cst.Call) and env.ctx.imports.is_(call.func, N.CONTRACTIONS)


def _grid_rows(access: _Access, elements, uses: list[IndexUse]) -> list[IndexUse]:
    """Scalar dims indexed by a program id alone, beside windows that no program id drives
    (`x_ref[row, pl.ds(j * bn, bn)]` in a loop). Each is a block index of its own grid axis
    whatever the loop's planner does: the row moves to a squeezed block dim even when the loop
    beside it stays (a Triton reduction), and every grid step still owns its block. Beside a
    window a program id drives, the window's planner squeezes the row itself: lifting the row
    alone would leave one output block shared by the steps the window tells apart."""
    if any(u.provenance.origin not in _BESIDE_ROWS or u.provenance.program_id_axis is not None for u in uses):
        return []  # a data-chosen window (R6) gathers its block with the row in it
    taken = {u.dim for u in uses}
    rows = []
    for dim, sl in elements:
        if dim in taken or not _traced_int_scalar(access.env, sl):
            continue
        val = access.env.value(sl.value)  # type: ignore[attr-defined]
        if val.origin is Origin.PROGRAM_ID and not val.loop:
            rows.append(access.use(dim, sl.value, sl.value, None, "scalar", val, None))  # type: ignore[attr-defined]
    return rows


# Windows a program-id row beside them leaves to its own use: a loop index, or a traced value
# pallas-fix cannot name (a `while_loop` carry); not data (R6 gathers the row with its window).
_BESIDE_ROWS = (Origin.LOOP, Origin.TRACED)


def _scalar_use(access: _Access, dim: int, sl: cst.BaseSlice) -> Optional[IndexUse]:
    if not _traced_int_scalar(access.env, sl):
        return None
    value = sl.value  # type: ignore[attr-defined]
    val = access.env.value(value)
    if val.origin not in _LIFTABLE_SCALARS and (val.origin not in _OPAQUE_SCALARS or val.loop or val.pid_axis is not None):
        return None
    return access.use(dim, value, value, None, "scalar", val, None)


# Where a scalar index must come from to be a block index: a grid axis, or a loop that can become one.
_LIFTABLE_SCALARS = (Origin.LOOP, Origin.PROGRAM_ID)
# Data or a traced value pallas-fix cannot name, with no loop or grid term (`o_ref[page, off] = v`
# with `page` loaded from a table, `off` from a 0-d ref): a scatter or gather of whole rows of the
# ref, reported with no fix. A row mixing a loop index with data (`t = eos - 1 - (i - bos)`) is
# left alone: neither origin says what it is.
_OPAQUE_SCALARS = (Origin.REF_LOAD, Origin.TRACED)


def scalar_index_dims(sub: cst.Subscript, env: Env) -> list[int]:
    """Every dim of `sub` indexed by a traced integer scalar, whatever the ref and the index's
    origin: what the jaxpr oracle calls a "scalar" index."""
    base = sub.value
    via_at = isinstance(base, cst.Attribute) and base.attr.value == "at"
    ref_expr = base.value if via_at else base
    if isinstance(ref_expr, cst.Attribute) and ref_expr.attr.value in ("shape", "strides", "at"):
        return []
    base_val = env.value(ref_expr)
    if not (base_val.is_ref or via_at) or base_val.vtype == "reflist" or only_waited(env.ctx, sub):
        return []
    elements, _, _ = _index_elements(sub, env)
    return [dim for dim, sl in elements if _traced_int_scalar(env, sl)]


def _traced_int_scalar(env: Env, sl: cst.BaseSlice) -> bool:
    if not isinstance(sl, cst.Index) or env.ds_call(sl.value) is not None:
        return False
    val = env.value(sl.value)
    return val.dynamic and val.vtype == "int" and _built_window(env, sl.value) is None


def _index_elements(sub: cst.Subscript, env: Env) -> tuple[list[tuple[int, cst.BaseSlice]], Optional[int], bool]:
    """(position, element) pairs, the position from which a position is no longer the dim (None
    when every one is) and whether a `...` is what hides them. A tuple written in place, bound to
    a name or passed to a helper's parameter gives one element per position."""
    if len(sub.slice) == 1 and isinstance(sub.slice[0].slice, cst.Index):
        packed = index_tuple(env, sub.slice[0].slice.value)
        if packed is not None:
            # `ref[(*batch, pl.ds(s, 16), slice(None))]`: a tuple built in place. With a starred
            # element the dims are unknown, so codemods will not touch these windows (strip
            # mines count the unpacked lengths themselves); after `...` they are too.
            dots = next((i for i, e in enumerate(packed.elements) if _is_ellipsis(e.value)), None)
            starred = any(isinstance(e, cst.StarredElement) for e in packed.elements)
            dims = [(dim, cst.Index(e.value)) for dim, e in enumerate(packed.elements) if not isinstance(e, cst.StarredElement)]
            return dims, 0 if starred else dots, dots is not None and not starred
    # `qa_ref[..., heads]`: `...` stands for as many dims as the ref has beyond the other
    # indices, so what follows it is at a dim counted from the end, which needs the rank.
    dots = next((i for i, e in enumerate(sub.slice) if isinstance(e.slice, cst.Index) and _is_ellipsis(e.slice.value)), None)
    return [(dim, e.slice) for dim, e in enumerate(sub.slice)], dots, dots is not None


def _is_ellipsis(node: cst.BaseExpression) -> bool:
    """`...`, or the builtin's name (a tuple built as `(Ellipsis, heads)`)."""
    return isinstance(node, cst.Ellipsis) or (isinstance(node, cst.Name) and node.value == "Ellipsis")


def _dim_use(access: _Access, is_ref: bool, dim: int, sl: cst.BaseSlice) -> Optional[IndexUse]:
    env = access.env
    if isinstance(sl, cst.Slice):
        bounds = [b for b in (sl.lower, sl.upper, sl.step) if b is not None]
        dyn = [v for v in (env.value(b) for b in bounds) if v.dynamic]
        return access.use(dim, sl, sl.lower, None, "slice", dyn[0], None) if is_ref and dyn else None
    value = sl.value
    ds = env.ds_call(value)
    helper = slice_helper(env, value) if ds is None else None  # `x_ref[queries]`, queries = _queries(bq)
    if helper is not None:
        env, ds = helper
    if ds is not None:
        parts = env.ds_parts(ds)
        if parts is None:
            return None
        start, size = parts
        written = start
        start, size = caller_window(env, start, size)  # `pl.ds(start, bs)` with `start` a helper's parameter
        env = home_env(env, start)  # a slice object or start a caller built is evaluated where it is written
        sval = env.value(start)
        if sval.origin is Origin.TRACED_CONST and _bare_constant(env, start):
            sval = STATIC  # jax folds `pl.ds(jnp.int32(3), n)` into a literal start
        zval = home_env(helper[0] if helper else access.env, size).value(size) if size is not None else None
        if sval.dynamic or (zval is not None and zval.dynamic):
            through = passed_through(access.env, written) if start is not written else None
            if helper is not None:
                through = f"through the slice that `{env.ctx.code(helper[0].call)}` returns (line {env.ctx.span(helper[0].call).line})"
            return access.use(dim, value, start, size, "ds", sval, zval, _ds_stride(ds), through, helper[0] if helper else None)
        return None
    if not is_ref:
        return None
    built = _built_window(env, value)
    if built is not None:
        start, size, source = built
        sval = Val(Origin.TRACED, "int", f"a comprehension building windows from `{_short(env, source)}`")
        return access.use(dim, value, start, size, "ds", sval, None)
    val = env.value(value)
    if val.dynamic and val.vtype in ("array", "array1"):
        return access.use(dim, value, value, None, "int_array", val, None)
    return None


def _built_window(env: Env, expr: cst.BaseExpression) -> Optional[tuple]:
    """(start, size, what it iterates) of the `pl.ds(start, size)` an index tuple built by a comprehension holds
    (`index = tuple(pl.ds(s * b, b) for s, b in zip(starts, block))`, also sliced or joined:
    `index[:1] + index[2:]`), when the comprehension names something traced; None otherwise.
    Its dims are not known statically, so the windows are reported, never rewritten."""
    for _ in range(8):
        if isinstance(expr, cst.Name):
            expr = env.single_assignment(expr.value)
        elif isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name) and expr.func.value in ("tuple", "list") and expr.args:
            expr = expr.args[0].value
        elif isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Add):
            expr = expr.left
        elif isinstance(expr, cst.Subscript):
            expr = expr.value
        else:
            break
        if expr is None:
            return None
    if not isinstance(expr, (cst.GeneratorExp, cst.ListComp)) or not isinstance(expr.elt, cst.Call):
        return None
    if not env.ctx.imports.is_(expr.elt.func, N.DS | N.SLICE) or not expr.elt.args:
        return None
    traced = any(env.value(n).dynamic for n in walk(expr.for_in) if isinstance(n, cst.Call))
    args = [a.value for a in expr.elt.args]
    return (args[0], args[1] if len(args) > 1 else None, expr.for_in.iter) if traced else None


def _short(env: Env, node: cst.CSTNode) -> str:
    text = " ".join(env.ctx.code(node).split())
    return text if len(text) <= 60 else text[:57] + "..."


def only_waited(ctx: ModuleContext, sub: cst.Subscript) -> bool:
    """`make_async_copy(x.at[...], ...).wait()` rebuilds a descriptor only to wait on its
    semaphore: no data moves through that slice."""
    for anc in ctx.ancestors(sub):
        if isinstance(anc, cst.Call) and ctx.imports.is_(anc.func, _DESCRIPTORS):
            attr = ctx.parent(anc)
            call = ctx.parent(attr) if attr is not None else None
            return (
                isinstance(attr, cst.Attribute)
                and attr.attr.value == "wait"
                and isinstance(call, cst.Call)
                and call.func is attr
            )
        if isinstance(anc, (cst.BaseStatement, cst.FunctionDef, cst.Lambda)):
            return False
    return False


def _bare_constant(env: Env, expr: cst.BaseExpression) -> bool:
    """`jnp.int32(3)` itself (possibly through a name), not arithmetic on it."""
    for _ in range(8):
        if isinstance(expr, cst.Name):
            value = env.single_assignment(expr.value)
            if value is None:
                return False
            expr = value
            continue
        if isinstance(expr, cst.Call) and env.ctx.imports.is_(expr.func, N.MULTIPLE_OF) and expr.args:
            expr = expr.args[0].value
            continue
        break
    return isinstance(expr, cst.Call) and env.ctx.imports.is_(expr.func, N.INT_DTYPES | N.ARRAY_CTORS)


def _ds_stride(call: cst.Call) -> Optional[cst.BaseExpression]:
    positional = [a for a in call.args if a.keyword is None]
    for a in call.args:
        if a.keyword is not None and a.keyword.value == "stride":
            return a.value
    return positional[2].value if len(positional) > 2 else None


def to_provenance(val: Val) -> Provenance:
    origin = val.origin
    detail = None
    if val.dynamic and val.vtype in ("float", "bool", "array1"):
        detail = {"float": "float", "bool": "bool", "array1": "one_element"}[val.vtype]
        origin = Origin.NON_INT_SCALAR
    return Provenance(origin=origin, description=val.words, loop=val.loop, program_id_axis=val.pid_axis, detail=detail)
