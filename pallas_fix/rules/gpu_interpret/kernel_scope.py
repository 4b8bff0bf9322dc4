"""What the PF2xx kernel checks read about a module, and the issues they report.

A `KernelScope` answers the questions several PF2xx rules ask of a pallas_call site: its static
grid sizes, the BlockSpecs in its in_specs / out_specs, what an index_map returns, the calls a
kernel (and the helpers it reaches) makes. Each check yields `Issue`s; rules/gpu_interpret/kernel_rules.py turns them
into findings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Optional

import libcst as cst

from pallas_fix.analysis.context import ModuleContext, walk
from pallas_fix.analysis.values.provenance import Env
from pallas_fix.analysis.result import Analysis
from pallas_fix.core import names as N
from pallas_fix.core.model import KernelSite
from pallas_fix.core.plans import Anchor

# How deep spec and scratch containers are followed through names, tuples and dicts.
_MAX_NESTING = 6


@dataclass(frozen=True)
class Issue:
    """One PF2xx hazard at `node`. `anchor` names what the engine may attach a fix plan to
    (PF201's site); `refusal` says why there is no fix when none gets attached."""

    code: str
    node: cst.CSTNode
    message: str
    site: Optional[KernelSite]
    refusal: Optional[str] = None
    anchor: Optional[Anchor] = None


@dataclass(frozen=True)
class KernelScope:
    analysis: Analysis
    ctx: ModuleContext
    module_env: Env  # reads module-level constants (grid sizes, axes, counts)

    @classmethod
    def of(cls, analysis: Analysis) -> "KernelScope":
        ctx: ModuleContext = analysis.ctx  # type: ignore[assignment]
        return cls(analysis, ctx, Env(ctx, ctx.module, None, {}, {}))

    def text(self, node: cst.CSTNode) -> str:
        """`node`'s source as a message quotes it, cut to 60 characters."""
        text = self.ctx.code(node).strip()
        return text if len(text) <= 60 else text[:57] + "..."

    def resolve(self, expr: cst.BaseExpression, at: cst.CSTNode) -> cst.BaseExpression:
        return self.ctx.resolve_value(expr, at)

    def is_(self, node: cst.CSTNode, names: frozenset[str]) -> bool:
        return self.ctx.imports.is_(node, names)

    def calls_in(self, site: KernelSite, names: frozenset[str]) -> Iterator[cst.Call]:
        """Calls to `names` in the site's kernel and in every function it reaches, once each."""
        det = self.analysis.detection
        reached = [fn for fn, sites in det.reached.items() if site in sites]  # type: ignore[union-attr]
        seen: set[int] = set()
        for fn in ([site.kernel] if site.kernel is not None else []) + reached:
            for node in walk(fn):
                if isinstance(node, cst.Call) and id(node) not in seen and self.is_(node.func, names):
                    seen.add(id(node))
                    yield node

    def grid_sizes(self, site: KernelSite) -> Optional[list[Optional[int]]]:
        """Static size per grid axis (None = unreadable); None when the call has no grid."""
        grid = site.kw("grid")
        if grid is None:
            return None
        value = self.resolve(grid, site.call)
        if isinstance(value, (cst.Tuple, cst.List)):
            if any(isinstance(e, cst.StarredElement) for e in value.elements):
                return []
            return [self.module_env.static_int(e.value) for e in value.elements]
        n = self.module_env.static_int(value)
        return [n] if n is not None else []

    def block_specs(self, site: KernelSite) -> Iterator[cst.Call]:
        """The `pl.BlockSpec(...)` calls in the site's in_specs, then its out_specs."""
        for key in ("in_specs", "out_specs"):
            container = site.kw(key)
            if container is not None:
                yield from self._spec_calls(container, site.call, 0)

    def _spec_calls(self, expr: cst.BaseExpression, at: cst.CSTNode, depth: int) -> Iterator[cst.Call]:
        if depth > _MAX_NESTING:
            return
        expr = self.resolve(expr, at)
        if isinstance(expr, cst.Call) and self.is_(expr.func, N.BLOCK_SPEC):
            yield expr
        elif isinstance(expr, (cst.Tuple, cst.List)):
            for e in expr.elements:
                yield from self._spec_calls(e.value, at, depth + 1)
        elif isinstance(expr, cst.Dict):
            for e in expr.elements:
                if isinstance(e, cst.DictElement):
                    yield from self._spec_calls(e.value, at, depth + 1)

    def index_map_outputs(self, index_map: cst.BaseExpression, at: cst.CSTNode) -> Optional[list[cst.BaseExpression]]:
        """What a lambda or single-return function index_map returns; None when unreadable."""
        fn = self.resolve(index_map, at)
        body: Optional[cst.BaseExpression] = None
        if isinstance(fn, cst.Lambda):
            body = fn.body
        elif isinstance(fn, cst.Name):
            d = self.ctx.resolve_def(fn.value, at)
            returns = [n for n in walk(d) if isinstance(n, cst.Return)] if d is not None else []
            if len(returns) == 1 and returns[0].value is not None:
                body = returns[0].value
        if body is None:
            return None
        if isinstance(body, (cst.Tuple, cst.List)):
            return [e.value for e in body.elements]
        return [body]

    def items(self, expr: cst.BaseExpression, at: cst.CSTNode, depth: int = 0) -> Iterator[cst.CSTNode]:
        """The leaves of a (nested) tuple or list such as scratch_shapes, names resolved."""
        if depth > _MAX_NESTING:
            return
        expr = self.resolve(expr, at)
        if isinstance(expr, (cst.Tuple, cst.List)):
            for e in expr.elements:
                yield from self.items(e.value, at, depth + 1)
        else:
            yield expr
