"""The parameter names of rebuilt index_maps: one per grid axis (the plan's new axis last),
then the scalar-prefetch refs. Existing lambdas keep their own names; new ones reuse the names
the call's other index_maps already use, so the rewritten call reads as one piece. Also the
semantics the new axis may have (`new_axis_semantics`), and whether the call is already pipelined
on the axes it has (`pipelined`: what a lift's speed on TPU depends on, core.speed)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import libcst as cst

from pallas_fix.analysis.context import walk
from pallas_fix.core.model import Backend
from pallas_fix.core.speed import Pipelined
from pallas_fix.rewrite.blocks.plan import NewAxis
from pallas_fix.rewrite.callsite.reading import CallSite
from pallas_fix.rewrite.callsite.spelling.operands import CallSiteError, Spec
from pallas_fix.rewrite.text.syntax import names_in

_DEFAULT_NAMES = ["i", "j", "k", "l", "m", "n"]
_META = ("dtype", "shape", "ndim")


@dataclass(frozen=True)
class GridParams:
    ngrid: int  # axes the grid has before the plan
    names: dict[object, str]  # grid position, or "new" for the added axis -> parameter name
    num_prefetch: int
    adds_axis: bool
    skipped_index: Optional[str] = None  # NewAxis.skipped_index
    undo_strip_mines: bool = False  # NewAxis.undo_strip_mines
    avoid: frozenset = frozenset()  # names the new block indices read: no parameter we name may hide them

    @classmethod
    def of(cls, cs: CallSite, new_axis: Optional[NewAxis], avoid: frozenset = frozenset()) -> "GridParams":
        """`avoid`: the wrapper's names the plan's block indices read (`k` in `k // bk - 1 - kk`); the
        parameters pallas-fix names itself stay clear of them (a user's own names are kept, and
        SpecWriter.lifted refuses where one of them would hide such a name)."""
        ngrid = len(cs.grid)
        names = _axis_names(cs, ngrid, new_axis, avoid)
        if new_axis is None:
            return cls(ngrid, names, cs.num_prefetch, False, avoid=avoid)
        return cls(ngrid, names, cs.num_prefetch, True, new_axis.skipped_index, new_axis.undo_strip_mines, avoid)

    def for_spec(self, spec: Spec) -> tuple[list[str], list[str]]:
        """(grid params, prefetch params) for a rebuilt index_map."""
        if _ignores_its_arguments(spec):
            spec = Spec(None, None, None)  # `lambda *_: (0,) * x.ndim`: rebuilt with a name per grid axis
        if spec.index_star is not None and len(spec.index_params) < self.ngrid:
            raise CallSiteError(
                f"an index_map takes grid indices through `*{spec.index_star}`, so the new grid axis has no place "
                "among its parameters; give it one parameter per grid axis"
            )
        if spec.index_params or spec.index_star is not None:
            # A parameter named `_` said the old index_map ignored that axis; the new one may read it.
            taken = set(spec.index_params) | (names_in(spec.index_map) if spec.index_map is not None else set())
            grid = [p if _reads(spec, p) else self._named(n, p, taken) for n, p in enumerate(spec.index_params[: self.ngrid])]
            rest = list(spec.index_params[self.ngrid :]) + ([f"*{spec.index_star}"] if spec.index_star else [])
        else:
            grid = [self.names[n] for n in range(self.ngrid)]
            rest = [f"_s{n}" for n in range(self.num_prefetch)] if self.num_prefetch else []
        if self.adds_axis:
            name = self.names["new"]
            used = names_in(spec.index_map) if spec.index_map is not None else set()
            while name in grid or name in rest or name in used:
                name += "_"
            grid.append(name)
        return grid, rest

    def _named(self, axis: int, param: str, taken: set[str]) -> str:
        """`param`, or for a throwaway `_` the axis's name (another index_map's, else i, j, ...)."""
        if param.strip("_"):
            return param
        name = self.names.get(axis, "i")
        for cand in (name, *_DEFAULT_NAMES):
            if cand.strip("_") and cand not in taken and cand not in self.avoid:
                taken.add(cand)
                return cand
        return param

    def fresh(self, existing: list[str]) -> str:
        """The new axis's name, made distinct from `existing`."""
        name = self.names.get("new", "k")
        while name in existing:
            name += "_"
        return name


def _ignores_its_arguments(spec: Spec) -> bool:
    """`lambda *_: ...` whose body reads none of what `*_` takes."""
    lam = spec.index_map
    return (
        isinstance(lam, cst.Lambda) and spec.index_star is not None and not spec.index_params
        and spec.index_star not in names_in(lam.body)
    )


def _reads(spec: Spec, param: str) -> bool:
    """The index_map's body reads `param` (`lambda _, j: (j, _ * 0, 0)`): a rebuilt body keeps
    that read, so the parameter keeps its name, `_` or not (renamed, it read an unbound `_`)."""
    body = spec.index_map.body if isinstance(spec.index_map, cst.Lambda) else spec.index_map
    exprs = [body] if body is not None else []
    return any(param in names_in(e) for e in (*exprs, *(spec.index_exprs or [])))


def _axis_names(cs: CallSite, ngrid: int, new_axis: Optional[NewAxis], avoid: frozenset = frozenset()) -> dict[object, str]:
    names: dict[object, str] = {}
    for kind in ("in", "out"):
        for expr in cs.spec_list(kind) or []:
            if expr is None:
                continue
            node = cs.ctx.resolve_value(expr, cs.site.call)
            if isinstance(node, cst.Call):
                lam = None
                for a in node.args:
                    if isinstance(a.value, cst.Lambda):
                        lam = a.value
                if lam is not None and len(lam.params.params) >= ngrid:
                    for n in range(ngrid):
                        if lam.params.params[n].name.value.strip("_"):  # `_`: no name for the axis
                            names.setdefault(n, lam.params.params[n].name.value)
    # Names pallas-fix picks itself stay clear of what the new block indices read: a parameter `k`
    # would hide the wrapper's `k` in `lambda i, j, k, kk: (i, k // bk - 1 - kk, j)`.
    taken = set(names.values()) | set(avoid)
    preferred = new_axis.name if new_axis else None
    if preferred and preferred in taken:
        preferred = None
    for n in range(ngrid):
        if n not in names:
            cand = next((p for p in _DEFAULT_NAMES if p not in taken and p != preferred), f"ax{n}")
            names[n] = cand
            taken.add(cand)
    if new_axis is not None:
        names["new"] = preferred or next((p for p in _DEFAULT_NAMES + ["ax"] if p not in taken), "ax_new")
    return names


def new_axis_semantics(cs: CallSite, new_axis: NewAxis, blocked: set[str]) -> str:
    """The semantics the new axis can have. A "parallel" axis may run its steps at once (TPU
    megacore, Mosaic GPU, Triton), so every output the kernel touches must move with it: an
    output whose block stays put across the axis would be written by concurrent steps. Such an
    output makes the axis sequential where the backend has sequential axes, and is refused
    where it has not."""
    if new_axis.semantics != "parallel":
        return new_axis.semantics
    resident = [s.param for s in cs.slots.values() if s.kind == "out" and s.param not in blocked]
    touched = [p for p in resident if touches(cs, p)]
    if not touched:
        return "parallel"
    backend = cs.backend()
    if backend is Backend.TPU:
        return "arbitrary"
    if backend is Backend.MOSAIC_GPU:
        return "sequential"
    raise CallSiteError(
        f"the output `{touched[0]}` keeps one block across the new grid axis while the kernel touches it; "
        f"the steps of a new axis may run in parallel on {backend.value} grids, so they would race on it"
    )


def touches(cs: CallSite, param: str) -> bool:
    """Does the kernel mention the ref other than for its dtype, rank or shape?"""
    kernel = cs.site.kernel
    assert kernel is not None
    for node in walk(kernel):
        if not isinstance(node, cst.Name) or node.value != param:
            continue
        parent = cs.ctx.parent(node)
        if isinstance(parent, cst.Param) or (isinstance(parent, cst.Attribute) and parent.value is node and parent.attr.value in _META):
            continue
        return True
    return False



def pipelined(cs: CallSite, scratch: bool = False) -> Optional[Pipelined]:
    """`Pipelined` when a lift adds an axis to a call that already has a grid whose BlockSpecs
    move blocks with it (what the source says; verification measures it at the example), on TPU or
    an unknown backend, which Pallas compiles through Mosaic on a TPU; None otherwise."""
    if not cs.grid or cs.backend() not in (Backend.TPU, Backend.UNKNOWN):
        return None
    try:
        specs = [cs.spec_of(s) for s in cs.slots.values() if s.kind in ("in", "out")]
    except CallSiteError:
        return None
    return Pipelined(len(cs.grid), scratch) if any(not s.whole for s in specs) else None
