"""The dynamic indices of one subscript of a ref: each becomes an `IndexUse`.

A dim counts when its `pl.ds` start or size is traced, when a plain slice bound is traced, or
when it is indexed by a traced integer array. Subscripts of `*refs` lists and the slices a DMA
descriptor is rebuilt with only to `.wait()` on it move no data and give none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import libcst as cst

from pallas_fix.core import names as N
from pallas_fix.analysis.context import ModuleContext
from pallas_fix.analysis.provenance import Env
from pallas_fix.analysis.values import STATIC, Val
from pallas_fix.core.model import IndexUse, KernelSite, Origin, Provenance

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
    starred: bool  # the index tuple has a *starred element: later dims are unknown

    def use(self, dim, element, start, size, kind, sval: Val, zval: Optional[Val], stride=None) -> IndexUse:
        ctx = self.env.ctx
        owner = self.fn if isinstance(self.fn, cst.FunctionDef) else ctx.enclosing_function(self.fn)
        return IndexUse(
            ctx.code(self.ref_expr), self.sub, dim, element, start, size, kind,
            to_provenance(sval), to_provenance(zval) if zval is not None else None, ctx.span(self.sub),
            function=owner,  # type: ignore[arg-type]
            via_at=self.via_at, stride=stride, env=self.env, kernel_site=self.site, starred=self.starred,
        )


def index_uses(site: KernelSite, sub: cst.Subscript, fn, env: Env) -> list[IndexUse]:
    """The dynamic indices of `sub`, in dim order."""
    ctx = env.ctx
    base = sub.value
    via_at = isinstance(base, cst.Attribute) and base.attr.value == "at"
    ref_expr = base.value if via_at else base
    if isinstance(ref_expr, cst.Attribute) and ref_expr.attr.value in ("shape", "strides", "at"):
        return []
    base_val = env.value(ref_expr)
    if base_val.vtype == "reflist" or _only_waited(ctx, sub):
        return []
    elements, starred = _index_elements(sub)
    access = _Access(site, sub, fn, env, ref_expr, via_at, starred)
    uses = [_dim_use(access, base_val.is_ref or via_at, dim, sl) for dim, sl in elements]
    return [u for u in uses if u is not None]


def _index_elements(sub: cst.Subscript) -> tuple[list[tuple[int, cst.BaseSlice]], bool]:
    """(dim, element) pairs, and whether a starred element hides the dims after it."""
    if len(sub.slice) == 1 and isinstance(sub.slice[0].slice, cst.Index):
        packed = sub.slice[0].slice.value
        if isinstance(packed, (cst.Tuple, cst.List)):
            # `ref[(*batch, pl.ds(s, 16), slice(None))]`: a tuple built in place. After a starred
            # element the dims are unknown, so codemods will not touch these windows.
            starred = any(isinstance(e, cst.StarredElement) for e in packed.elements)
            dims = [(dim, cst.Index(e.value)) for dim, e in enumerate(packed.elements) if not isinstance(e, cst.StarredElement)]
            return dims, starred
    return [(dim, e.slice) for dim, e in enumerate(sub.slice)], False


def _dim_use(access: _Access, is_ref: bool, dim: int, sl: cst.BaseSlice) -> Optional[IndexUse]:
    env = access.env
    if isinstance(sl, cst.Slice):
        bounds = [b for b in (sl.lower, sl.upper, sl.step) if b is not None]
        dyn = [v for v in (env.value(b) for b in bounds) if v.dynamic]
        return access.use(dim, sl, sl.lower, None, "slice", dyn[0], None) if is_ref and dyn else None
    value = sl.value
    ds = env.ds_call(value)
    if ds is not None:
        parts = env.ds_parts(value)
        if parts is None:
            return None
        start, size = parts
        sval = env.value(start)
        if sval.origin is Origin.TRACED_CONST and _bare_constant(env, start):
            sval = STATIC  # jax folds `pl.ds(jnp.int32(3), n)` into a literal start
        zval = env.value(size) if size is not None else None
        if sval.dynamic or (zval is not None and zval.dynamic):
            return access.use(dim, value, start, size, "ds", sval, zval, _ds_stride(ds))
        return None
    if not is_ref:
        return None
    val = env.value(value)
    if val.dynamic and val.vtype in ("array", "array1"):
        return access.use(dim, value, value, None, "int_array", val, None)
    return None


def _only_waited(ctx: ModuleContext, sub: cst.Subscript) -> bool:
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
