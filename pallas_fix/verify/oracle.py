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

Works with jax 0.10.x (``ClosedJaxpr`` sub-jaxprs) and 0.12.x (plain ``Jaxpr``
everywhere) by duck typing: anything with ``.eqns`` or ``.jaxpr.eqns`` is a
jaxpr.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

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
            out.extend(_as_jaxprs(p[key]))
    return out

# Primitives that only wait on / signal something already described by another
# equation (the DMA start, the barrier): counting them would double count.
_SKIP_PRIMITIVES = frozenset({
    "dma_wait",
    "wait_gmem_to_smem",
    "wait_smem_to_gmem",
    "wait_load_tmem",
    "wgmma_wait",
})
_SKIP_SUBSTRINGS = ("semaphore", "barrier")

_MAX_STACK = 16


@dataclass(frozen=True)
class DynamicAccess:
    """One traced (non-static) index of one ref access equation.

    ``dim`` is the position in the indexer it belongs to: the dimension of the
    ref (or of the ``.at[...]`` view, when ``transform`` > 0) being indexed.
    ``file``/``line``/``column``/``end_line`` come from the innermost user
    frame of the equation (see ``stack`` for all user frames, innermost first).
    ``index_line`` is the user line of the equation that computed the traced
    start/index (``None`` when it is a binder such as a loop index, or a
    kernel argument): for a DMA built on one line (``.at[pl.ds(i * bs, bs)]``)
    and started on another (``.start()``) it points at the slice's line.
    """

    primitive: str
    kind: str  # "slice" | "int_array" | "scalar"
    dim: int
    dynamic_start: bool
    dynamic_size: bool
    file: str | None
    line: int | None
    kernel: str | None
    call_index: int = -1
    operand: str = "ref"  # "ref" for get/swap/..., "src"/"dst" for copies
    transform: int = 0  # which NDIndexer in the ref's transform chain
    column: int | None = None
    end_line: int | None = None
    index_line: int | None = None
    start_aval: str | None = None  # e.g. "int32[]"; "int32[1]" is a GPU hazard
    stack: tuple[tuple[str, int], ...] = field(default=(), compare=False, repr=False)

    @property
    def is_dynamic_slice(self) -> bool:
        return self.kind in ("slice", "int_array")


def _same_file(a: str | None, b: str | None) -> bool:
    """Compare two paths robustly: realpath if both exist, else basename."""
    if a is None or b is None:
        return False
    if a == b:
        return True
    ra, rb = os.path.realpath(a), os.path.realpath(b)
    if ra == rb:
        return True
    if os.path.basename(ra) != os.path.basename(rb):
        return False
    # Same basename, different real paths: different files only if both exist.
    return not (os.path.exists(ra) and os.path.exists(rb))


@dataclass
class OracleReport:
    accesses: list[DynamicAccess]
    pallas_calls: int  # kernel equations found (pallas_call + core_map)
    kernels: list[str | None] = field(default_factory=list)  # name per call_index

    def dynamic_slices(self) -> list[DynamicAccess]:
        """Accesses with a dynamic slice start/size or an integer-array index."""
        return [a for a in self.accesses if a.kind in ("slice", "int_array")]

    def scalars(self) -> list[DynamicAccess]:
        return [a for a in self.accesses if a.kind == "scalar"]

    def lines(self, file: str | None = None, *, through_calls: bool = False) -> set[int]:
        """Source lines of ``dynamic_slices()``.

        With ``file``, only accesses whose innermost user frame is in that file
        (compared by realpath, falling back to basename when a path does not
        exist, e.g. ``<string>``).  With ``through_calls=True``, an access made
        in a helper in another file is attributed to the innermost frame that
        *is* in ``file`` (the line calling the helper).
        """
        out: set[int] = set()
        for a in self.dynamic_slices():
            if file is None:
                if a.line is not None:
                    out.add(a.line)
                continue
            if _same_file(a.file, file):
                if a.line is not None:
                    out.add(a.line)
            elif through_calls:
                for f, ln in a.stack:
                    if _same_file(f, file):
                        out.add(ln)
                        break
        return out

    def by_kernel(self) -> dict[int, list[DynamicAccess]]:
        res: dict[int, list[DynamicAccess]] = {}
        for a in self.accesses:
            res.setdefault(a.call_index, []).append(a)
        return res


# --------------------------------------------------------------------------
# jaxpr duck typing


def _as_jaxprs(v: Any) -> Iterator[Any]:
    """Yield the open jaxprs contained in a param value (Jaxpr, ClosedJaxpr,
    or lists/tuples of them).  Callables (thunks) are ignored."""
    if v is None or isinstance(v, (str, bytes, int, float, bool)):
        return
    if hasattr(v, "eqns") and hasattr(v, "invars"):
        yield v
        return
    inner = getattr(v, "jaxpr", None)
    if inner is not None and hasattr(inner, "eqns") and hasattr(inner, "invars"):
        yield inner
        return
    if isinstance(v, (list, tuple)):
        for x in v:
            yield from _as_jaxprs(x)


def _sub_jaxprs(eqn) -> Iterator[Any]:
    for v in eqn.params.values():
        yield from _as_jaxprs(v)


def _open(jaxpr: Any) -> Any:
    if hasattr(jaxpr, "eqns"):
        return jaxpr
    inner = getattr(jaxpr, "jaxpr", None)
    if inner is not None and hasattr(inner, "eqns"):
        return inner
    raise TypeError(f"not a jaxpr: {type(jaxpr).__name__}")


# --------------------------------------------------------------------------
# source info


@functools.lru_cache(maxsize=None)
def _siu():
    from jax._src import source_info_util

    return source_info_util


# A frame is (file, line, column, end_line).  Sub-jaxprs (loop bodies, cond
# branches, run_scoped bodies, the kernel itself) are traced under a
# TracebackScope, so an equation's own traceback stops at the boundary of the
# trace that created it: the user's line calling e.g. ``pltpu.sync_copy`` is only
# in the traceback of the enclosing ``run_scoped`` equation.  Like JAX's MLIR
# lowering (``eqn.traceback + outer_traceback``), we append the enclosing
# equations' user frames to get the full user stack.
_Frame = tuple  # (file, line, column, end_line)


def _own_frames(source_info) -> list[_Frame]:
    siu = _siu()
    tb = getattr(source_info, "traceback", source_info)
    if tb is None:
        return []
    try:
        it = siu.user_frames(tb)
    except TypeError:  # an API taking the SourceInfo itself
        try:
            it = siu.user_frames(source_info)
        except Exception:
            return []
    except Exception:
        return []
    out: list[_Frame] = []
    try:
        for f in it:
            out.append((f.file_name, _frame_line(f), getattr(f, "start_column", None),
                        getattr(f, "end_line", None)))
            if len(out) >= _MAX_STACK:
                break
    except Exception:
        pass
    return out


def _frame_line(f) -> int | None:
    ln = getattr(f, "start_line", None)
    if ln is None:
        ln = getattr(f, "line_num", None)
    return ln


def _stack(eqn, outer: tuple[_Frame, ...]) -> tuple[_Frame, ...]:
    return (tuple(_own_frames(eqn.source_info)) + outer)[:_MAX_STACK]


# --------------------------------------------------------------------------
# indexer extraction


def _core():
    from jax._src import core

    return core


def _is_var(x) -> bool:
    """A traced jaxpr variable (not a Literal, not a Python/NumPy constant)."""
    core = _core()
    if isinstance(x, core.Literal):
        return False
    return isinstance(x, core.Var)


def _is_treedef(v) -> bool:
    from jax import tree_util

    return isinstance(v, tree_util.PyTreeDef)


def _is_ndindexer(x) -> bool:
    return (hasattr(x, "indices") and hasattr(x, "shape")
            and hasattr(x, "int_indexer_shape"))


def _is_slice(x) -> bool:
    return hasattr(x, "start") and hasattr(x, "size") and hasattr(x, "stride")


def _find_indexers(obj: Any, depth: int = 0) -> list[Any]:
    """All NDIndexers in a rebuilt operand (transform tuple, TransformedRef...),
    in transform-chain order."""
    if depth > 8 or obj is None:
        return []
    if _is_ndindexer(obj):
        return [obj]
    if isinstance(obj, (tuple, list)):
        out = []
        for x in obj:
            out.extend(_find_indexers(x, depth + 1))
        return out
    if isinstance(obj, dict):
        out = []
        for x in obj.values():
            out.extend(_find_indexers(x, depth + 1))
        return out
    transforms = getattr(obj, "transforms", None)
    if transforms is not None and hasattr(obj, "ref"):
        return _find_indexers(transforms, depth + 1)
    return []


def _unflatten(tree, leaves):
    return tree.unflatten(list(leaves))


def _operands(eqn) -> list[tuple[str, Any]]:
    """(label, rebuilt operand/transforms) pairs whose indexers matter."""
    name = eqn.primitive.name
    if name in _SKIP_PRIMITIVES or any(s in name for s in _SKIP_SUBSTRINGS):
        return []
    try:
        return _known_operands(eqn)
    except Exception:  # a layout this jax version does not use
        return _generic_operands(eqn)


def _known_operands(eqn) -> list[tuple[str, Any]]:
    name = eqn.primitive.name
    p = eqn.params
    iv = list(eqn.invars)
    if name == "get" and "tree" in p:
        return [("ref", _unflatten(p["tree"], iv[1:]))]
    if name in ("swap", "addupdate") and "tree" in p:
        return [("ref", _unflatten(p["tree"], iv[2:]))]
    if name in ("masked_load", "masked_swap") and "args_tree" in p:
        parts = _unflatten(p["args_tree"], iv)
        return [("ref", parts[1])]
    if name == "dma_start" and "tree" in p:
        src, dst, *_sems_and_device = _unflatten(p["tree"], iv)
        return [("src", src), ("dst", dst)]
    if name in ("copy_smem_to_gmem", "copy_gmem_to_smem"):
        s_tree = p["src_transforms_treedef"]
        d_tree = p["dst_transforms_treedef"]
        off = 2 + (1 if p.get("has_barrier") else 0)
        ns, nd = s_tree.num_leaves, d_tree.num_leaves
        return [("src", _unflatten(s_tree, iv[off:off + ns])),
                ("dst", _unflatten(d_tree, iv[off + ns:off + ns + nd]))]
    if name == "async_prefetch" and "ref_transforms_treedef" in p:
        t = p["ref_transforms_treedef"]
        return [("ref", _unflatten(t, iv[1:1 + t.num_leaves]))]
    if name == "async_store_smem" and "ref_transforms_treedef" in p:
        t = p["ref_transforms_treedef"]
        return [("dst", _unflatten(t, iv[4:4 + t.num_leaves]))]
    if name in ("load", "store") and "tree" in p:  # Mosaic GPU load/store
        t = p["tree"]
        return [("ref", _unflatten(t, iv[len(iv) - t.num_leaves:]))]
    return _generic_operands(eqn)


def _label(key: str) -> str:
    if key in ("tree", "args_tree"):
        return "ref"
    for suffix in ("_transforms_treedef", "_transforms_tree", "_treedef", "_tree"):
        if key.endswith(suffix) and len(key) > len(suffix):
            return key[: -len(suffix)]
    return key


def _generic_operands(eqn) -> list[tuple[str, Any]]:
    """Best effort for primitives not handled explicitly: find the treedef
    params and the run of invars they were flattened from."""
    p = eqn.params
    iv = list(eqn.invars)
    trees = [(k, v) for k, v in p.items() if _is_treedef(v)]
    if not trees:
        return []
    if len(trees) == 1:
        k, t = trees[0]
        n = t.num_leaves
        offsets = [0] if n == len(iv) else []
        offsets.append(len(iv) - n)
        if p.get("has_user_predicate"):
            offsets.append(len(iv) - n - 1)
        for off in offsets:
            if off < 0:
                continue
            try:
                obj = _unflatten(t, iv[off:off + n])
            except Exception:
                continue
            if _find_indexers(obj):
                return [(_label(k), obj)]
        return []
    # several trees: consecutive runs after the leading ref operands
    lead = 0
    for v in iv:
        aval = getattr(v, "aval", None)
        if aval is not None and hasattr(aval, "inner_aval"):
            lead += 1
        else:
            break
    out = []
    off = lead
    for k, t in trees:
        n = t.num_leaves
        try:
            out.append((_label(k), _unflatten(t, iv[off:off + n])))
        except Exception:
            return []
        off += n
    return out


def _aval_str(x) -> str | None:
    aval = getattr(x, "aval", None)
    if aval is None:
        return None
    try:
        return aval.str_short()
    except Exception:
        return str(aval)


def _ndim(x) -> int:
    aval = getattr(x, "aval", None)
    shape = getattr(aval, "shape", ())
    try:
        return len(shape)
    except TypeError:
        return 0


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
        for eqn in _open(jaxpr).eqns:
            bodies = _kernel_bodies(eqn)
            if bodies:
                ctx = _KernelCtx(_kernel_name(eqn), len(self.kernels))
                self.kernels.append(ctx.name)
                stack = _stack(eqn, outer)
                for kj in bodies:
                    self.walk_kernel(kj, ctx, stack)
                continue
            subs = list(_sub_jaxprs(eqn))
            if subs:
                stack = _stack(eqn, outer)
                for sub in subs:
                    self.walk_outer(sub, stack)

    # kernel body ---------------------------------------------------------
    def walk_kernel(self, jaxpr, ctx: _KernelCtx, outer: tuple = (),
                    inherited: dict | None = None) -> None:
        jaxpr = _open(jaxpr)
        # var -> (defining eqn, outer stack of its jaxpr), for index_line
        defs = dict(inherited or {})
        for eqn in jaxpr.eqns:
            for ov in eqn.outvars:
                if _is_var(ov):
                    defs[ov] = (eqn, outer)
        for eqn in jaxpr.eqns:
            self.visit_eqn(eqn, ctx, defs, outer)
            subs = list(_sub_jaxprs(eqn))
            if subs:
                stack = _stack(eqn, outer)
                for sub in subs:
                    sub = _open(sub)
                    self.walk_kernel(sub, ctx, stack, _inherit_defs(eqn, sub, defs))

    def visit_eqn(self, eqn, ctx: _KernelCtx, defs: dict, outer: tuple) -> None:
        try:
            operands = _operands(eqn)
        except Exception:
            operands = []
        if not operands:
            return
        stack = None
        for label, obj in operands:
            for t_idx, indexer in enumerate(_find_indexers(obj)):
                for dim, idx in enumerate(indexer.indices):
                    rec = self._classify(idx)
                    if rec is None:
                        continue
                    kind, dyn_start, dyn_size, traced = rec
                    if stack is None:
                        stack = _stack(eqn, outer)
                    file, line, col, end_line = stack[0] if stack else (None,) * 4
                    self.accesses.append(DynamicAccess(
                        primitive=eqn.primitive.name,
                        kind=kind,
                        dim=dim,
                        dynamic_start=dyn_start,
                        dynamic_size=dyn_size,
                        file=file,
                        line=line,
                        kernel=ctx.name,
                        call_index=ctx.index,
                        operand=label,
                        transform=t_idx,
                        column=col,
                        end_line=end_line,
                        index_line=_def_line(traced, defs),
                        start_aval=_aval_str(traced),
                        stack=tuple((f[0], f[1]) for f in stack),
                    ))

    @staticmethod
    def _classify(idx):
        if _is_slice(idx):
            ds, dz = _is_var(idx.start), _is_var(idx.size)
            if not (ds or dz):
                return None
            return "slice", ds, dz, (idx.start if ds else idx.size)
        if _is_var(idx):
            if _ndim(idx) >= 1:
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
        if _is_var(o) and o in defs:
            out[b] = defs[o]
    return out


def _def_line(var, defs: dict) -> int | None:
    """User line of the equation computing ``var`` (looking through trivial
    wrappers such as broadcast_to when they carry no user frame)."""
    if var is None or not _is_var(var):
        return None
    entry = defs.get(var)
    for _ in range(4):
        if entry is None:
            return None
        eqn, outer = entry
        stack = _stack(eqn, outer)
        if stack:
            return stack[0][1]
        nxt = [v for v in eqn.invars if _is_var(v)]
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


def iter_kernel_jaxprs(jaxpr) -> Iterable[tuple[Any, Any]]:
    """Yield (kernel equation, kernel jaxpr) for every kernel in ``jaxpr``."""
    for eqn in _open(jaxpr).eqns:
        bodies = _kernel_bodies(eqn)
        if bodies:
            for kj in bodies:
                yield eqn, kj
            continue
        for sub in _sub_jaxprs(eqn):
            yield from iter_kernel_jaxprs(sub)
