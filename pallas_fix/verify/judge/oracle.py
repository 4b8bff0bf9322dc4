"""Jaxpr oracle: ground truth for "which ref accesses in a Pallas kernel are dynamic".

The linter works on source text; this module works on what JAX actually traced.
``trace_report(fn, *args)`` runs ``jax.make_jaxpr`` (no interpreter, no
compilation), finds every ``pallas_call`` (and ``core_map``, i.e. ``pl.kernel`` /
``plgpu.kernel``) equation anywhere in the outer jaxpr, and walks each kernel
jaxpr recursively.  Every ref access equation (``get`` / ``swap`` /
``addupdate``, ``masked_load`` / ``masked_swap``, TPU ``dma_start``, Mosaic GPU
copies / loads / stores, ...) has its indexers rebuilt from the flattened
operands and each indexer element is classified:

* ``Slice`` whose start or size is a jaxpr ``Var`` -> kind ``"slice"``
  (``dynamic_start`` / ``dynamic_size`` say which);
* an integer index array (ndim >= 1) that is a ``Var`` -> ``"int_array"``;
* a traced scalar index (ndim 0, e.g. ``idx_ref[k]``) -> ``"scalar"``: recorded
  but not a dynamic slice (it is the recommended fix form).

A ``Literal`` (e.g. ``pl.ds(jnp.int32(3), 8)``, folded at trace time) or a
Python int is static and is not recorded.

jax is imported lazily, inside the functions: importing this module is cheap
and keeps the linter's start-up jax-free.

Works with jax 0.10.x and 0.12.x by duck typing (:mod:`pallas_fix.verify.judge.jaxprs`).
This module walks the jaxprs; :mod:`~pallas_fix.verify.judge.ref_indexers` rebuilds an
equation's indexers, :mod:`~pallas_fix.verify.judge.source_frames` finds its user lines,
and :mod:`~pallas_fix.verify.judge.oracle_report` holds the results.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Iterable

from pallas_fix.verify.judge.jaxprs import as_jaxprs, open_jaxpr, sub_jaxprs
from pallas_fix.verify.judge.oracle_report import DynamicAccess, OracleReport
from pallas_fix.verify.judge.ref_indexers import aval_str, find_indexers, is_slice, is_var, ndim, operands
from pallas_fix.verify.judge.source_frames import user_stack

__all__ = [
    "DynamicAccess",
    "OracleReport",
    "trace_report",
    "report_from_jaxpr",
    "KERNEL_PRIMITIVES",
]

#: Outer-jaxpr primitives whose ``params["jaxpr"]`` (or ``params["jaxprs"]``)
#: is a Pallas kernel body: ``pallas_call``; ``core_map`` (``pl.kernel`` /
#: ``pl.core_map``); ``mpmd_map`` (``plgpu.kernel`` in jax 0.12).
KERNEL_PRIMITIVES = ("pallas_call", "core_map", "mpmd_map")


def _kernel_bodies(eqn) -> list:
    if eqn.primitive.name not in KERNEL_PRIMITIVES:
        return []
    p = eqn.params
    out = []
    for key in ("jaxpr", "jaxprs"):
        if key in p:
            out.extend(as_jaxprs(p[key]))
    return out


# --------------------------------------------------------------------------
# walking


@dataclass
class _KernelCtx:
    name: str | None
    index: int


class _Walker:
    def __init__(self) -> None:
        self.accesses: list[DynamicAccess] = []
        self.kernels: list[str | None] = []

    # outer program -------------------------------------------------------
    def walk_outer(self, jaxpr, outer: tuple = ()) -> None:
        for eqn in open_jaxpr(jaxpr).eqns:
            bodies = _kernel_bodies(eqn)
            if bodies:
                ctx = _KernelCtx(_kernel_name(eqn), len(self.kernels))
                self.kernels.append(ctx.name)
                stack = user_stack(eqn, outer)
                for kj in bodies:
                    self.walk_kernel(kj, ctx, stack)
                continue
            subs = list(sub_jaxprs(eqn))
            if subs:
                stack = user_stack(eqn, outer)
                for sub in subs:
                    self.walk_outer(sub, stack)

    # kernel body ---------------------------------------------------------
    def walk_kernel(self, jaxpr, ctx: _KernelCtx, outer: tuple = (),
                    inherited: dict | None = None) -> None:
        jaxpr = open_jaxpr(jaxpr)
        # var -> (defining eqn, outer stack of its jaxpr), for index_line
        defs = dict(inherited or {})
        for eqn in jaxpr.eqns:
            for ov in eqn.outvars:
                if is_var(ov):
                    defs[ov] = (eqn, outer)
        for eqn in jaxpr.eqns:
            self.visit_eqn(eqn, ctx, defs, outer)
            subs = list(sub_jaxprs(eqn))
            if subs:
                stack = user_stack(eqn, outer)
                for sub in subs:
                    sub = open_jaxpr(sub)
                    self.walk_kernel(sub, ctx, stack, _inherit_defs(eqn, sub, defs))

    def visit_eqn(self, eqn, ctx: _KernelCtx, defs: dict, outer: tuple) -> None:
        try:
            rebuilt = operands(eqn)
        except Exception:
            rebuilt = []
        found = [(label, t_idx, dim, rec)
                 for label, obj in rebuilt
                 for t_idx, indexer in enumerate(find_indexers(obj))
                 for dim, idx in enumerate(indexer.indices)
                 if (rec := self._classify(idx)) is not None]
        if not found:
            return
        stack = user_stack(eqn, outer)
        file, line, column, end_line = stack[0] if stack else (None,) * 4
        frames = tuple((f[0], f[1]) for f in stack)
        for label, t_idx, dim, (kind, dyn_start, dyn_size, traced) in found:
            self.accesses.append(DynamicAccess(
                eqn.primitive.name, kind, dim, dyn_start, dyn_size, file, line, ctx.name,
                call_index=ctx.index, operand=label, transform=t_idx, column=column, end_line=end_line,
                index_line=_def_line(traced, defs), start_aval=aval_str(traced), stack=frames,
            ))

    @staticmethod
    def _classify(idx):
        if is_slice(idx):
            ds, dz = is_var(idx.start), is_var(idx.size)
            if not (ds or dz):
                return None
            return "slice", ds, dz, (idx.start if ds else idx.size)
        if is_var(idx):
            if ndim(idx) >= 1:
                return "int_array", False, False, idx
            return "scalar", False, False, idx
        # a TransformedRef used as an indexer (ref of indices)
        if hasattr(idx, "ref") and hasattr(idx, "transforms"):
            return "int_array", False, False, idx.ref
        return None


def _inherit_defs(eqn, sub, defs: dict) -> dict:
    """Map a sub-jaxpr's binders to the outer equations defining the operands,
    for non-looping primitives only (a loop carry is not its initial value)."""
    name = eqn.primitive.name
    outer = list(eqn.invars)
    constvars = list(getattr(sub, "constvars", ()))
    invars = list(sub.invars)
    pairs: list = []
    if name == "run_scoped":
        if len(constvars) == len(outer):
            pairs = list(zip(constvars, outer))
        else:
            binders = constvars + invars
            pairs = list(zip(binders[:len(outer)], outer))
    elif name == "cond":
        if len(invars) == len(outer) - 1:
            pairs = list(zip(invars, outer[1:]))
    elif name in ("pjit", "jit", "closed_call", "core_call", "remat", "checkpoint",
                  "custom_jvp_call", "custom_vjp_call", "custom_vjp_call_jaxpr"):
        if len(invars) == len(outer):
            pairs = list(zip(invars, outer))
    out = {}
    for b, o in pairs:
        if is_var(o) and o in defs:
            out[b] = defs[o]
    return out


def _def_line(var, defs: dict) -> int | None:
    """User line of the equation computing ``var`` (looking through trivial
    wrappers such as broadcast_to when they carry no user frame)."""
    if var is None or not is_var(var):
        return None
    entry = defs.get(var)
    for _ in range(4):
        if entry is None:
            return None
        eqn, outer = entry
        stack = user_stack(eqn, outer)
        if stack:
            return stack[0][1]
        nxt = [v for v in eqn.invars if is_var(v)]
        entry = defs.get(nxt[0]) if nxt else None
    return None


def _kernel_name(eqn) -> str | None:
    p = eqn.params
    name = p.get("name")
    if isinstance(name, str) and name:
        return name
    nsi = p.get("name_and_src_info")
    if nsi is not None and getattr(nsi, "name", None):
        return nsi.name
    meta = p.get("metadata")
    if isinstance(meta, dict) and isinstance(meta.get("name"), str):
        return meta["name"]
    for kj in _kernel_bodies(eqn):
        dbg = getattr(kj, "debug_info", None)
        src = getattr(dbg, "func_src_info", None) if dbg is not None else None
        if isinstance(src, str) and src:
            return src.split(" at ", 1)[0]
        fname = getattr(dbg, "func_name", None) if dbg is not None else None
        if isinstance(fname, str) and fname:
            return fname
    return None


# --------------------------------------------------------------------------
# public entry points


def report_from_jaxpr(jaxpr) -> OracleReport:
    """Report for an already traced jaxpr (``Jaxpr`` or ``ClosedJaxpr``).

    If ``jaxpr`` is itself a kernel body (no pallas_call inside, but ref
    accesses), pass it to ``report_from_kernel_jaxpr`` instead."""
    w = _Walker()
    w.walk_outer(jaxpr)
    return OracleReport(accesses=w.accesses, pallas_calls=len(w.kernels),
                        kernels=w.kernels)


def report_from_kernel_jaxpr(jaxpr, kernel: str | None = None) -> OracleReport:
    """Report for a kernel body jaxpr (e.g. ``eqn.params["jaxpr"]``)."""
    w = _Walker()
    w.kernels.append(kernel)
    w.walk_kernel(jaxpr, _KernelCtx(kernel, 0))
    return OracleReport(accesses=w.accesses, pallas_calls=1, kernels=w.kernels)


def trace_report(fn, *args, **kwargs) -> OracleReport:
    """Trace ``fn(*args, **kwargs)`` with ``jax.make_jaxpr`` and report.

    ``kwargs`` are static: bound with ``functools.partial`` before tracing.
    ``args`` may be arrays or ``jax.ShapeDtypeStruct``s.  Nothing is run.
    """
    import jax

    f = functools.partial(fn, **kwargs) if kwargs else fn
    closed = jax.make_jaxpr(f)(*args)
    return report_from_jaxpr(closed)


def example_report(entry, example) -> OracleReport:
    """The report for one example call (a :class:`~pallas_fix.core.examples.Example`) of
    `entry`: its array arguments, positional or keyword, traced as ShapeDtypeStructs (also
    inside lists and tuples), every other value static."""
    import jax
    import jax.numpy as jnp

    from pallas_fix.core.examples import ArgSpec

    def abstract(value):
        if isinstance(value, ArgSpec):
            return jax.ShapeDtypeStruct(value.shape, jnp.dtype(value.numpy_dtype))
        if isinstance(value, (list, tuple)):
            return type(value)(abstract(v) for v in value)
        return value

    def is_array(value) -> bool:
        if isinstance(value, (list, tuple)):
            return any(is_array(v) for v in value)
        return isinstance(value, jax.ShapeDtypeStruct)

    args = [abstract(a) for a in example.args]
    kwargs = {k: abstract(v) for k, v in example.kwargs.items()}

    def call(*arrays):
        it = iter(arrays)
        pos = [next(it) if is_array(a) else a for a in args]
        return entry(*pos, **{k: (next(it) if is_array(v) else v) for k, v in kwargs.items()})

    return trace_report(call, *[a for a in args if is_array(a)], *[v for v in kwargs.values() if is_array(v)])


def iter_kernel_jaxprs(jaxpr) -> Iterable[tuple[Any, Any]]:
    """Yield (kernel equation, kernel jaxpr) for every kernel in ``jaxpr``."""
    for eqn in open_jaxpr(jaxpr).eqns:
        bodies = _kernel_bodies(eqn)
        if bodies:
            for kj in bodies:
                yield eqn, kj
            continue
        for sub in sub_jaxprs(eqn):
            yield from iter_kernel_jaxprs(sub)
