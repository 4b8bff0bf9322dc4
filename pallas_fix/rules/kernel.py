"""Kernel-level rules (PF2xx): what GPU interpret mode gets wrong or rejects in a kernel.

They fire only when the module's kernels may run in GPU interpret mode (see
`gpu_hazards.trigger`). Each finding sits on the node at fault: the `pl.program_id` call, the
BlockSpec, the scratch shape, the indexed ref, the grid spec, the `jax.vmap`. The hazards and the
jax versions they were seen on live in `gpu_hazards.HAZARDS`.

PF201 findings are anchored on their pallas_call (`site_key`): under `--target gpu-interpret` the
engine attaches the grid-to-loop plan for that site, since no dynamic index carries it when
`pl.program_id` only feeds a `pl.when`.
"""

from __future__ import annotations

from typing import Iterator, Optional

import libcst as cst

from pallas_fix.analysis.context import ModuleContext, walk
from pallas_fix.analysis.provenance import Env
from pallas_fix.analysis.result import Analysis
from pallas_fix.core import names as N
from pallas_fix.core.model import Finding, KernelSite
from pallas_fix.core.names import call_arg as _arg
from pallas_fix.core.plans import site_key
from pallas_fix.rules.gpu_hazards import targeted, trigger, version_note
from pallas_fix.rules.registry import RULES

# The memory spaces GPU interpret mode was seen to reject (gpu_hazards.HAZARDS["PF203"]).
_TPU_MEMORY_SPACES = frozenset({N.TPU + ".VMEM", N.TPU + ".SMEM", N.PALLAS + ".ANY"})
_RUN_SCOPED = frozenset({N.PALLAS + ".run_scoped"})


def kernel_findings(analysis: Analysis) -> list[Finding]:
    why = trigger(analysis)
    if why is None or analysis.ctx is None or analysis.detection is None:
        return []
    rules = _Rules(analysis, why)
    for site in analysis.sites:
        rules.program_id(site)
        rules.block_specs(site)
        rules.memory_spaces(site)
        rules.scalar_prefetch(site)
    rules.int_array_indices()
    rules.vmap()
    return rules.out


class _Rules:
    def __init__(self, analysis: Analysis, why: str) -> None:
        self.analysis = analysis
        self.ctx: ModuleContext = analysis.ctx  # type: ignore[assignment]
        self.why = why
        self.out: list[Finding] = []
        self.seen: set[tuple[str, int]] = set()
        self.module_env = Env(self.ctx, self.ctx.module, None, {}, {})

    # -- helpers ------------------------------------------------------------------------------------
    def add(self, code: str, node: cst.CSTNode, message: str, site: Optional[KernelSite], refusal: Optional[str] = None, anchor=None) -> None:
        """One finding. `anchor` names what the engine may attach a fix plan to (PF201's site);
        `refusal` says why there is no fix when none gets attached."""
        if (code, id(node)) in self.seen:
            return
        self.seen.add((code, id(node)))
        note = version_note(code)
        message = f"{message} [GPU interpret mode: {self.why}]"
        if note:
            message += f" ({note})"
        self.out.append(
            Finding(
                code=code,
                message=message,
                path=self.analysis.path,
                span=self.ctx.span(node),
                provenance="",
                origin="gpu_interpret",
                fixable=False,
                refusal=refusal or "no automatic fix; see `pallas-fix explain " + code + "`",
                severity=RULES[code].severity,
                kernel=site.kernel_name if site else None,
                anchor=anchor,
            )
        )

    def code(self, node: cst.CSTNode) -> str:
        text = self.ctx.code(node).strip()
        return text if len(text) <= 60 else text[:57] + "..."

    def resolve(self, expr: cst.BaseExpression, at: cst.CSTNode) -> cst.BaseExpression:
        return self.ctx.resolve_value(expr, at)

    def functions_of(self, site: KernelSite) -> list[cst.CSTNode]:
        det = self.analysis.detection
        return [fn for fn, sites in det.reached.items() if site in sites]  # type: ignore[union-attr]

    def calls_in(self, site: KernelSite, names: frozenset[str]) -> Iterator[cst.Call]:
        seen: set[int] = set()
        roots = ([site.kernel] if site.kernel is not None else []) + self.functions_of(site)
        for fn in roots:
            for node in walk(fn):
                if isinstance(node, cst.Call) and id(node) not in seen and self.ctx.imports.is_(node.func, names):
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

    # -- PF201 --------------------------------------------------------------------------------------
    def program_id(self, site: KernelSite) -> None:
        sizes = self.grid_sizes(site)
        if sizes is None:
            return
        grid_text = self.code(site.kw("grid"))  # type: ignore[arg-type]
        if targeted(self.analysis):
            refusal = "no grid to move"
        else:
            refusal = (
                "run with `--target gpu-interpret` to move the grid into an in-kernel loop (grid-to-loop), "
                "or check this kernel with interpret=True"
            )
        for call in self.calls_in(site, N.PROGRAM_ID):
            axis = self.module_env.static_int(call.args[0].value) if call.args else None
            size = sizes[axis] if axis is not None and axis < len(sizes) else None
            if size is not None and size <= 1:
                continue
            steps = f"{size} steps" if size is not None else "a size pallas-fix cannot read"
            message = (
                f"`{self.code(call)}` is 0 in every step of grid `{grid_text}` ({steps}): only block 0 "
                "is computed and the rest of the output is never written, with no error"
            )
            self.add("PF201", call, message, site, refusal, anchor=site_key(site))

    # -- PF202 --------------------------------------------------------------------------------------
    def block_specs(self, site: KernelSite) -> None:
        for key in ("in_specs", "out_specs"):
            container = site.kw(key)
            if container is None:
                continue
            for spec in self.spec_calls(container, site.call):
                problem = self.window_problem(spec)
                if problem is not None:
                    self.add(
                        "PF202",
                        spec,
                        f"BlockSpec `{self.code(spec)}` {problem}; GPU interpret mode only runs whole-array "
                        "blocks and fails with a bare AssertionError",
                        site,
                    )

    def spec_calls(self, expr: cst.BaseExpression, at: cst.CSTNode, depth: int = 0) -> Iterator[cst.Call]:
        if depth > 6:
            return
        expr = self.resolve(expr, at)
        if isinstance(expr, cst.Call) and self.ctx.imports.is_(expr.func, N.BLOCK_SPEC):
            yield expr
        elif isinstance(expr, (cst.Tuple, cst.List)):
            for e in expr.elements:
                yield from self.spec_calls(e.value, at, depth + 1)
        elif isinstance(expr, cst.Dict):
            for e in expr.elements:
                if isinstance(e, cst.DictElement):
                    yield from self.spec_calls(e.value, at, depth + 1)

    def window_problem(self, spec: cst.Call) -> Optional[str]:
        block = _arg(spec, 0, "block_shape")
        if block is None or (isinstance(block, cst.Name) and block.value == "None"):
            return None  # no block shape: the whole array
        index_map = _arg(spec, 1, "index_map")
        outputs = self.index_map_outputs(index_map, spec) if index_map is not None else []
        if outputs is None:
            return "has an index_map pallas-fix cannot read, so its window may not be the whole array"
        moving = [o for o in outputs if not _is_zero(o)]
        if moving:
            return f"selects block `{self.code(moving[0])}` of each array"
        if isinstance(block, cst.Attribute) and block.attr.value == "shape":
            return None  # `x.shape`: the whole array
        return (
            f"has block shape `{self.code(block)}`, which pallas-fix cannot prove is the whole array "
            "(the only window GPU interpret mode accepts)"
        )

    def index_map_outputs(self, index_map: cst.BaseExpression, at: cst.CSTNode) -> Optional[list[cst.BaseExpression]]:
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

    # -- PF203 --------------------------------------------------------------------------------------
    def memory_spaces(self, site: KernelSite) -> None:
        scratch = site.kw("scratch_shapes")
        if scratch is not None:
            for node in self.scratch_items(scratch, site.call):
                if isinstance(node, cst.Call) and self.ctx.imports.is_(node.func, N.VMEM | N.SMEM_TPU):
                    self.add("PF203", node, self.memory_message(node.func, "scratch"), site)
        for call in self.calls_in(site, _RUN_SCOPED):
            for a in call.args[1:] if call.args else []:
                for node in walk(a.value):
                    if isinstance(node, cst.Call) and self.ctx.imports.is_(node.func, N.VMEM | N.SMEM_TPU):
                        self.add("PF203", node, self.memory_message(node.func, "run_scoped scratch"), site)
        for key in ("in_specs", "out_specs"):
            container = site.kw(key)
            if container is None:
                continue
            for spec in self.spec_calls(container, site.call):
                for a in spec.args:
                    if a.keyword is not None and a.keyword.value == "memory_space":
                        value = a.value.func if isinstance(a.value, cst.Call) else a.value
                        if self.ctx.imports.is_(value, _TPU_MEMORY_SPACES):
                            self.add("PF203", a.value, self.memory_message(value, "BlockSpec memory space"), site)

    def scratch_items(self, expr: cst.BaseExpression, at: cst.CSTNode, depth: int = 0) -> Iterator[cst.CSTNode]:
        if depth > 6:
            return
        expr = self.resolve(expr, at)
        if isinstance(expr, (cst.Tuple, cst.List)):
            for e in expr.elements:
                yield from self.scratch_items(e.value, at, depth + 1)
        else:
            yield expr

    def memory_message(self, func: cst.BaseExpression, where: str) -> str:
        name = self.code(func)
        return (
            f"{where} in the TPU memory space `{name}`: GPU interpret mode rejects it (KeyError / "
            "NotImplementedError); Mosaic GPU kernels use plgpu.SMEM / plgpu.GMEM"
        )

    # -- PF204 --------------------------------------------------------------------------------------
    def int_array_indices(self) -> None:
        for use in self.analysis.uses:
            if use.kind != "int_array":
                continue
            start = self.code(use.start) if use.start is not None else "an array"
            self.add(
                "PF204",
                use.subscript,
                f"`{use.ref_name}` is indexed with the integer array `{start}`: GPU interpret mode fails at "
                "run time (TypeError: Only scalar arrays can be converted to Python scalars)",
                use.kernel_site,
            )

    # -- PF205 --------------------------------------------------------------------------------------
    def scalar_prefetch(self, site: KernelSite) -> None:
        spec = site.grid_spec
        if spec is None or not self.ctx.imports.is_(spec.func, N.PREFETCH_GRID_SPEC):
            return
        arg = site.grid_spec_keywords.get("num_scalar_prefetch")
        n = self.module_env.static_int(arg.value) if arg is not None else 0
        if n == 0:
            return
        count = f"{n} scalar prefetch operand(s)" if n is not None else "scalar prefetch"
        self.add(
            "PF205",
            spec,
            f"{count}: GPU interpret mode raises NotImplementedError (Scalar arguments not (yet) supported on GPU)",
            site,
        )

    # -- PF206 --------------------------------------------------------------------------------------
    def vmap(self) -> None:
        ctx = self.ctx
        for node in walk(ctx.module):
            target: Optional[cst.BaseExpression] = None
            anchor: cst.CSTNode = node
            if isinstance(node, cst.Call) and ctx.imports.is_(node.func, N.VMAP) and node.args:
                target = node.args[0].value
            elif isinstance(node, cst.Call) and ctx.imports.is_(node.func, N.PARTIAL) and node.args and ctx.imports.is_(node.args[0].value, N.VMAP):
                decorated = ctx.parent(ctx.parent(node) or node)
                if isinstance(ctx.parent(node), cst.Decorator) and isinstance(decorated, cst.FunctionDef):
                    target = decorated
            elif isinstance(node, cst.Decorator) and ctx.imports.is_(node.decorator, N.VMAP):
                target = ctx.parent(node)  # type: ignore[assignment]
            if target is None:
                continue
            site = self.pallas_call_under(target, anchor, 0, set())
            if site is not None:
                self.add(
                    "PF206",
                    anchor,
                    "`jax.vmap` over a pallas_call: GPU interpret mode's batching rule fails (TypeError: "
                    "_pallas_call_batching_rule() got an unexpected keyword argument)",
                    site,
                )

    def pallas_call_under(self, target: cst.CSTNode, at: cst.CSTNode, depth: int, seen: set[int]) -> Optional[KernelSite]:
        """The pallas_call that running `target` makes, following names and module functions."""
        if depth > 4 or id(target) in seen:
            return None
        seen.add(id(target))
        ctx = self.ctx
        if isinstance(target, cst.BaseExpression):
            value = self.resolve(target, at)
            if isinstance(value, cst.Name):
                fn = ctx.resolve_def(value.value, at)
                return self.pallas_call_under(fn, at, depth + 1, seen) if fn is not None else self.decorated_site(value.value)
            if isinstance(value, cst.Call) and ctx.imports.is_(value.func, N.PARTIAL) and value.args:
                return self.pallas_call_under(value.args[0].value, at, depth + 1, seen)
            target = value
        sites = self.analysis.sites
        for site in sites:
            if site.call is target or any(a is target for a in ctx.ancestors(site.call)):
                return site
            if site.decorated is not None and site.decorated is target:
                return site
        for node in walk(target):
            if isinstance(node, cst.Call) and isinstance(node.func, cst.Name):
                fn = ctx.resolve_def(node.func.value, node)
                found = self.pallas_call_under(fn, node, depth + 1, seen) if fn is not None else None
                if found is not None:
                    return found
        return None

    def decorated_site(self, name: str) -> Optional[KernelSite]:
        for site in self.analysis.sites:
            if site.decorated is not None and site.decorated.name.value == name:
                return site
        return None




def _is_zero(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Integer) and int(expr.evaluated_value) == 0
