"""Is a loop a deliberate strip-mine: does it walk, from 0 in steps of its window, the whole
block a BlockSpec already moves along the grid (JAX's flash attention: `block_k_major =
k_tile_ref.shape[2]`, `fori_loop(0, block_k_major // block_k, ...)` over `pl.ds(i * block_k,
block_k)`)? Then a lift would shrink the blocks the grid copies and multiply its steps, which
pallas-fix does not do unless asked (--lift-for-memory), whatever else the loop's shape allows:
the refusal that is true of such a loop comes before the reading limits of the lift (where its
body is defined, how its result is used). The same rule rewrite.blocks.blockspecs applies when a
lift gets as far as writing the specs (issue 27, issue 28)."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from pallas_fix.analysis.context import ModuleContext, walk
from pallas_fix.analysis.effects.syntax import param_names
from pallas_fix.core import names as N
from pallas_fix.analysis.discovery.forwarded_refs import callees
from pallas_fix.core.model import IndexUse, KernelSite, LoopInfo
from pallas_fix.core.plans import Refuse
from pallas_fix.rewrite.blocks.blockspecs import STRIP_MINE
from pallas_fix.rewrite.callsite.reading import CallSite
from pallas_fix.rewrite.callsite.spelling.operands import CallSiteError
from pallas_fix.rewrite.text.syntax import code, is_zero
from pallas_fix.rewrite.loops.index_walks import returned_entry, starred_dim


def refuse_strip_mine(analysis, site: KernelSite, loop: LoopInfo) -> None:
    """Refuse the lift of a loop that strip-mines a block the grid moves, unless the user asked
    for such lifts (--lift-for-memory, Config.lift_for_memory)."""
    if site is None or getattr(analysis.config, "lift_for_memory", False):
        return
    found = strip_mined(analysis, site, loop)
    if found is None:
        return
    ctx: ModuleContext = analysis.ctx
    use, dim, block, index = found
    raise Refuse(
        f"the loop walks `{use.ref_name}` in `{ctx.code(use.size)}` sub-tiles of the block its BlockSpec already moves "
        f"along dim {dim} (`{ctx.code(block)}` at block `{ctx.code(index)}`), from 0 to the end of that block: "
        f"{STRIP_MINE}")


def strip_mined(analysis, site: KernelSite, loop: LoopInfo) -> Optional[tuple[IndexUse, int, cst.BaseExpression, cst.BaseExpression]]:
    """(a use the loop windows, its dim, the block size and block index its spec writes along it)
    when the loop walks that whole block in windows of the loop's step; None when the code does
    not show it (a ref reached through `*args`, an index_map that does not move the block)."""
    ctx: ModuleContext = analysis.ctx
    kernel = site.kernel
    walked = _walked(ctx, loop)
    if kernel is None or walked is None or analysis.detection is None:
        return None
    span, step = walked
    holder = _holder(ctx, site, loop)
    if holder is not kernel and not _forwarded_into(ctx, kernel, holder):
        return None  # a helper given refs by name: its parameter names are not the kernel's
    shape = _shape_entry(holder, span)
    if shape is None:
        return None
    try:
        # Refs the kernel forwards into the variant it runs are named as the variant names them.
        cs = CallSite(ctx, site, analysis.detection.envs.get(kernel), read_forwarded=True)
        extent = cs.kernel_shape_dim(*shape)
    except CallSiteError:
        return None
    if extent is None:
        return None
    for use in analysis.uses:
        try:
            found = _sub_tile(ctx, cs, loop, use, site, step, extent)
        except CallSiteError:
            continue  # a spec pallas-fix cannot read tells nothing about this use
        if found is not None:
            return found
    return None


def _sub_tile(ctx: ModuleContext, cs: CallSite, loop: LoopInfo, use: IndexUse, site: KernelSite,
              step: cst.BaseExpression, extent: cst.BaseExpression):
    """(use, block, index) when `use` is a window `step` wide at the loop's walk, on a dim whose
    block (as the kernel sees it) is `extent` and whose block index is not constant 0."""
    if use.kernel_site is not site or use.provenance.loop is not loop or use.kind != "ds":
        return None
    if use.ref_name not in cs.slots or use.size is None or use.start is None or _shadowed(ctx, use, site):
        return None
    if _code(use.size) != _code(step) or not _walks(ctx, use, loop, step):
        return None
    dim = starred_dim(ctx, use, site) if use.starred else use.dim
    if dim is None:
        return None
    size = cs.kernel_shape_dim(use.ref_name, dim)
    if size is None or _code(size) != _code(extent):
        return None
    spec = cs.spec_of(cs.slots[use.ref_name])
    visible = spec.visible_dims()
    if dim >= len(visible):
        return None
    index = spec.index_exprs[visible[dim]] if spec.index_exprs is not None else returned_entry(ctx, spec, visible[dim])
    if index is None or is_zero(index):
        return None  # the grid does not move this dim (or the code does not say): a lift makes the first axis along it
    return use, dim, size, index


def _holder(ctx: ModuleContext, site: KernelSite, loop: LoopInfo) -> cst.FunctionDef:
    """The def whose code binds the loop's names: the kernel, or the module-level function it
    runs (`inner(idx, q_ref, *args)`) that holds the loop."""
    holder = site.kernel
    for scope in ctx.scope_chain(loop.call):
        if isinstance(scope, cst.FunctionDef):
            holder = scope
        if scope is site.kernel or ctx.scope_of(scope) is ctx.module:
            break
    return holder


def _forwarded_into(ctx: ModuleContext, kernel: cst.FunctionDef, holder: cst.FunctionDef) -> bool:
    """Does the kernel forward its `*refs` into `holder` (`inner(idx, q_ref, *refs)`), so that
    holder's parameters name the kernel's refs (analysis.discovery.forwarded_refs)?"""
    star = kernel.params.star_arg
    if not isinstance(star, cst.Param):
        return False
    return any(isinstance(n, cst.Call) and isinstance(n.func, cst.Name) and holder in callees(ctx, kernel, n)
               and any(a.star == "*" and isinstance(a.value, cst.Name) and a.value.value == star.name.value for a in n.args)
               for n in walk(kernel))


def _shadowed(ctx: ModuleContext, use: IndexUse, site: KernelSite) -> bool:
    """Is the ref's name a parameter of a def nested between the access and the function whose
    names are the kernel's (a local helper `def tile(k_ref)` given another ref)?"""
    for scope in ctx.scope_chain(use.subscript):
        if not isinstance(scope, cst.FunctionDef) or scope is site.kernel or ctx.scope_of(scope) is ctx.module:
            return False
        if use.ref_name in param_names(scope):
            return True
    return False


def _walked(ctx: ModuleContext, loop: LoopInfo) -> Optional[tuple[str, cst.BaseExpression]]:
    """(the name of the extent the loop walks, its window) for `fori_loop(0, X // w, ...)` and
    `pl.loop(0, X, step=w)` with X a plain name."""
    if not is_zero(loop.lower):
        return None
    upper = loop.upper
    if loop.step is not None and isinstance(upper, cst.Name):
        return upper.value, loop.step
    if loop.step is None and isinstance(upper, cst.BinaryOperation) and isinstance(upper.operator, cst.FloorDivide):
        if isinstance(upper.left, cst.Name):
            return upper.left.value, upper.right
    return None


def _walks(ctx: ModuleContext, use: IndexUse, loop: LoopInfo, step: cst.BaseExpression) -> bool:
    """The window's start is where the loop stands: `start_k` (pl.loop's step walks it) or
    `i * w` / `w * i` (fori_loop's index counts windows), also through one name assigned once in
    the function holding the access (`start_k = pl.multiple_of(i * block_k, block_k)`)."""
    start = use.start
    if isinstance(start, cst.Name) and start.value != loop.index_name:
        values = ctx.assignments(start.value, use.function)
        start = values[0] if len(values) == 1 else start
    if isinstance(start, cst.Call) and len(start.args) == 2 and ctx.imports.is_(start.func, N.MULTIPLE_OF):
        start = start.args[0].value  # `pl.multiple_of(i * bk, bk)`: a hint, the same value
    if loop.step is not None:
        return isinstance(start, cst.Name) and start.value == loop.index_name
    if not (isinstance(start, cst.BinaryOperation) and isinstance(start.operator, cst.Multiply)):
        return False
    sides = [_code(start.left), _code(start.right)]
    return sorted(sides) == sorted([loop.index_name, _code(step)])


def _shape_entry(kernel: cst.FunctionDef, name: str) -> Optional[tuple[str, int]]:
    """(ref, dim) when the kernel binds `name` once, to `ref.shape[dim]` or by unpacking `ref.shape`."""
    found: list[tuple[str, int]] = []
    bound = 0
    for node in walk(kernel):
        if not isinstance(node, cst.Assign):
            continue
        for target in node.targets:
            t = target.target
            if isinstance(t, cst.Name) and t.value == name:
                bound += 1
                entry = _shape_index(node.value)
                if entry is not None:
                    found.append(entry)
            elif isinstance(t, (cst.Tuple, cst.List)):
                names = [e.value.value if isinstance(e.value, cst.Name) else None for e in t.elements]
                if name in names:
                    bound += 1
                    ref = _shape_of(node.value)
                    if ref is not None and not any(isinstance(e, cst.StarredElement) for e in t.elements):
                        found.append((ref, names.index(name)))
    return found[0] if bound == 1 and len(found) == 1 else None


def _shape_of(expr: cst.BaseExpression) -> Optional[str]:
    """`ref` for `ref.shape`."""
    if isinstance(expr, cst.Attribute) and expr.attr.value == "shape" and isinstance(expr.value, cst.Name):
        return expr.value.value
    return None


def _shape_index(expr: cst.BaseExpression) -> Optional[tuple[str, int]]:
    """(ref, dim) for `ref.shape[dim]` with a non-negative literal dim."""
    if not (isinstance(expr, cst.Subscript) and len(expr.slice) == 1):
        return None
    ref = _shape_of(expr.value)
    index = expr.slice[0].slice
    if ref is None or not isinstance(index, cst.Index) or not isinstance(index.value, cst.Integer):
        return None
    return ref, int(index.value.value)


def _code(node: cst.CSTNode) -> str:
    return code(node).strip()
