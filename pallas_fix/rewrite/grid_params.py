"""The parameter names of rebuilt index_maps: one per grid axis (the plan's new axis last),
then the scalar-prefetch refs. Existing lambdas keep their own names; new ones reuse the names
the call's other index_maps already use, so the rewritten call reads as one piece."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import libcst as cst

from pallas_fix.rewrite.blocks import NewAxis
from pallas_fix.rewrite.callsite import CallSite
from pallas_fix.rewrite.operands import Spec
from pallas_fix.rewrite.syntax import names_in

_DEFAULT_NAMES = ["i", "j", "k", "l", "m", "n"]


@dataclass(frozen=True)
class GridParams:
    ngrid: int  # axes the grid has before the plan
    names: dict[object, str]  # grid position, or "new" for the added axis -> parameter name
    num_prefetch: int
    adds_axis: bool

    @classmethod
    def of(cls, cs: CallSite, new_axis: Optional[NewAxis]) -> "GridParams":
        ngrid = len(cs.grid)
        return cls(ngrid, _axis_names(cs, ngrid, new_axis), cs.num_prefetch, new_axis is not None)

    def for_spec(self, spec: Spec) -> tuple[list[str], list[str]]:
        """(grid params, prefetch params) for a rebuilt index_map."""
        if spec.index_params:
            grid = list(spec.index_params[: self.ngrid])
            rest = list(spec.index_params[self.ngrid :])
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

    def fresh(self, existing: list[str]) -> str:
        """The new axis's name, made distinct from `existing`."""
        name = self.names.get("new", "k")
        while name in existing:
            name += "_"
        return name


def _axis_names(cs: CallSite, ngrid: int, new_axis: Optional[NewAxis]) -> dict[object, str]:
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
                        names.setdefault(n, lam.params.params[n].name.value)
    taken = set(names.values())
    preferred = new_axis.name if new_axis else None
    if preferred and preferred in taken:
        preferred = None
    for n in range(ngrid):
        if n not in names:
            cand = next(p for p in _DEFAULT_NAMES if p not in taken and p != preferred)
            names[n] = cand
            taken.add(cand)
    if new_axis is not None:
        names["new"] = preferred or next(p for p in _DEFAULT_NAMES + ["ax"] if p not in taken)
    return names
