"""How a loop (R1, R2) or a program_id window (R3) touches the kernel's refs: the accesses it
lifts into blocks, the block index they share, and that nothing else reads the ref in a way the
block would change (its shape, an alias, another window)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import libcst as cst

from pallas_fix.analysis.binders import none_tested
from pallas_fix.analysis.context import ModuleContext, walk
from pallas_fix.analysis.discovery.helper_calls import static_argument
from pallas_fix.analysis.discovery.varargs import binds_from_star
from pallas_fix.analysis.effects.model import seen_loop_body_writes
from pallas_fix.analysis.loops.windows import fold_reason, hooks_for, loop_key, window_of
from pallas_fix.core import names as N
from pallas_fix.core.model import IndexUse, KernelSite, LoopInfo
from pallas_fix.core.plans import Refuse
from pallas_fix.rewrite.blocks.edits import BlockIndexExpr, RefBlock, touched_element_ids
from pallas_fix.rewrite.extents.extent_reads import extent_read
from pallas_fix.rewrite.kernel.ref_views import RefName, alias_bindings, resolve_ref_name, through_view_refusal
from pallas_fix.rewrite.kernel.scalar_blocks import check_kept_scalars, windows_to_lift
from pallas_fix.rewrite.kernel.scalar_lift import ScalarCandidate, settle_scalars
from pallas_fix.rewrite.text.syntax import code


@dataclass
class AccessGroup:
    ref: str
    subscripts: list[cst.Subscript] = field(default_factory=list)  # lifted
    uses: dict[int, list[IndexUse]] = field(default_factory=dict)  # id(subscript) -> loop uses
    unlifted_accesses: list[cst.Subscript] = field(default_factory=list)
    written: bool = False
    # Writes at a scalar of the loop index on a dim TPU cannot squeeze (rewrite.kernel.scalar_lift.
    # settle_scalars): the output stays whole and resident, the new axis sequential.
    kept_rows: list[cst.Subscript] = field(default_factory=list)

    @property
    def lifted(self) -> bool:
        return bool(self.subscripts)


def ref_base(sub: cst.Subscript) -> Optional[cst.Name]:
    """The ref a subscript indexes (`x_ref[...]`, `x_ref.at[...]`); None for `x.shape[0]`."""
    base = sub.value
    if isinstance(base, cst.Attribute) and base.attr.value == "at":
        base = base.value
    if isinstance(base, cst.Attribute) and base.attr.value in ("shape", "strides"):
        return None
    return base if isinstance(base, cst.Name) else None


def is_write(ctx: ModuleContext, sub: cst.Subscript) -> bool:
    parent = ctx.parent(sub)
    if isinstance(parent, cst.AssignTarget) or (isinstance(parent, cst.AugAssign) and parent.target is sub):
        return True
    if isinstance(sub.value, cst.Attribute) and sub.value.attr.value == "at":
        # A view handed to a call (copies, helpers) may be written through; one a load reads
        # (`pltriton.load(s_ref.at[rows])`, Triton ports' every read) is not.
        return not isinstance(parent, cst.Subscript) and not _loaded(ctx, parent)
    return False


def _loaded(ctx: ModuleContext, arg: cst.CSTNode) -> bool:
    """`arg` is the ref argument of a load (its first positional argument)."""
    call = ctx.parent(arg) if isinstance(arg, cst.Arg) else None
    if not isinstance(call, cst.Call) or not call.args or call.args[0] is not arg or arg.keyword is not None:
        return False
    return ctx.imports.is_(call.func, N.LOADS)  # what detection reads as a load (analysis.values.call_values)


def ref_accesses(analysis, region, loop: LoopInfo) -> dict[str, AccessGroup]:
    """Every ref subscript in the loop's functions, grouped by ref: lifted (a window that moves
    with the loop index) or not."""
    ctx: ModuleContext = analysis.ctx
    kernel_env = analysis.detection.envs.get(region.site.kernel)
    uses_by_sub: dict[int, list[IndexUse]] = {}
    for use in analysis.uses:
        uses_by_sub.setdefault(id(use.subscript), []).append(use)
    groups: dict[str, AccessGroup] = {}
    seen: set[int] = set()
    kept_scalars: list = []  # scalar indices of the loop index, left as they are
    body_writes: dict = {}  # the effects model's writes of one iteration, once asked (_view_only_read)
    scalar_candidates: dict[str, list[ScalarCandidate]] = {}  # ref -> accesses only at scalars of the loop index
    for fn in region.functions:
        for node in walk(fn):
            if not isinstance(node, cst.Subscript) or id(node) in seen:
                continue
            seen.add(id(node))
            base = ref_base(node)
            if base is None:
                continue
            env = analysis.detection.envs.get(fn) or kernel_env
            if env is None or not env.value(base).is_ref:
                continue
            ref = _kernel_ref(region, env.owner(base.value), base.value)
            named = RefName(ref, None) if ref is not None else resolve_ref_name(env, base.value, region.site.kernel)
            if named is None:
                raise Refuse(
                    f"`{base.value}` is a ref view, alias or helper parameter inside the loop; "
                    "pallas-fix only rewrites accesses through the kernel's own ref parameters"
                )
            group = groups.setdefault(named.root, AccessGroup(named.root))
            loop_uses = [u for u in uses_by_sub.get(id(node), []) if u.provenance.loop is loop]
            if named.view is None and loop_uses and all(u.kind == "scalar" for u in loop_uses):
                # Squeezed or kept once all the ref's accesses are known (rewrite.kernel.scalar_lift).
                scalar_candidates.setdefault(named.root, []).append(ScalarCandidate(node, loop_uses, is_write(ctx, node)))
                continue
            loop_uses = windows_to_lift(loop_uses, is_write(ctx, node) and not loop.carries, kept_scalars)
            if named.view is not None:
                # Relative to a view: unchanged when the view is the lifted window (rewrite.kernel.ref_views).
                if loop_uses:
                    raise through_view_refusal(base.value, named.root)
                if any(u.provenance.loop is loop for u in uses_by_sub.get(id(named.view), [])):
                    continue
            if loop_uses:
                group.subscripts.append(node)
                group.uses[id(node)] = loop_uses
            else:
                group.unlifted_accesses.append(node)
                if is_write(ctx, node) and not _view_only_read(analysis, region, loop, node, named.root, body_writes):
                    group.written = True
    settle_scalars(analysis, region, loop, groups, scalar_candidates, kept_scalars)
    check_kept_scalars({ref for ref, g in groups.items() if g.lifted}, kept_scalars)
    return groups


def _view_only_read(analysis, region, loop: LoopInfo, node: cst.Subscript, ref: str, body_writes: dict) -> bool:
    """A view handed to a call (`_load(x_ref.at[1], i * bk, bk)`) that the effects model shows
    one iteration of the loop never writes through: no write of the iteration reaches `ref`.
    Assignments and stores are writes whatever the model says."""
    parent = analysis.ctx.parent(node)
    if not (isinstance(node.value, cst.Attribute) and node.value.attr.value == "at" and isinstance(parent, cst.Arg)):
        return False
    if "writes" not in body_writes:
        body_writes["writes"] = seen_loop_body_writes(analysis, region.site, loop)
    writes = body_writes["writes"]
    return writes is not None and all(w.ref != ref for w in writes)


def _kernel_ref(region, owner, name: str) -> Optional[str]:
    """The kernel ref parameter an access goes through: `name` itself, or the one a ref helper's
    parameter receives (`region.helper_refs`, see rewrite.kernel.ref_helpers)."""
    if owner is None:
        return None
    if owner.scope is region.site.kernel and name in owner.params:
        return name
    return getattr(region, "helper_refs", {}).get((id(owner.scope), name))


def accessed_slots(analysis, region, cs):
    """(ref, its accesses, its call-site slot) for each ref the loop touches; refused when a ref
    maps to no operand of the pallas_call."""
    for ref, group in ref_accesses(analysis, region, region.loop).items():
        slot = cs.slots.get(ref)
        if slot is None:
            raise Refuse(f"`{ref}` is not a kernel parameter pallas-fix can map to an operand")
        yield ref, group, slot


def block_index_of(group: AccessGroup, loop: LoopInfo, ref: str):
    """(dim, size expr, env, BlockIndexExpr) shared by every lifted access of `ref`."""
    found = None
    for sub in group.subscripts:
        uses = group.uses[id(sub)]
        if len(uses) != 1:
            raise Refuse(f"`{ref}` is sliced by the loop index in more than one dimension{_fold_note(uses)}")
        use = uses[0]
        window = window_of(use)
        block = window.block or window.symbolic_block  # lifted_block writes a symbolic offset
        if block is None:
            raise Refuse(f"the window on `{ref}` is not provably a block ({window.reason})")
        axes: dict[object, int] = {}
        for key, mult in block.atoms.items():
            if key == loop_key(loop):
                axes["new"] = mult
            elif key.startswith("pid:"):
                axes[int(key.split(":")[1])] = mult
            else:
                raise Refuse(f"the start of `{ref}` depends on `{code(block.atom_exprs[key])}`, which no grid axis provides")
        if "new" not in axes:
            raise Refuse(f"the window on `{ref}` does not move with the loop index")
        index = BlockIndexExpr(axes, block.offset, block.symbolic)
        entry = (use.dim, code(use.size) if use.size is not None else use.kind, index.key())
        if found is None:
            found = (entry, use, index)
        elif found[0] != entry:
            raise Refuse(f"`{ref}` is accessed at different blocks within one iteration (e.g. neighbouring blocks)")
    assert found is not None
    _, use, index = found
    return use.dim, use.size, use.env, index


def _fold_note(uses) -> str:
    """` (the window on dim 1 is computed from `lax.rem(t, nn)`...)` when a flat loop over tiles
    splits its index into a quotient and a remainder (windows.fold_reason), else ""."""
    for u in uses:
        reason = fold_reason(u.start, hooks_for(u.env)) if u.start is not None else None
        if reason:
            return f" (the window on dim {u.dim} {reason.removeprefix('it ')})"
    return ""


def lifted_block(group, loop: LoopInfo, ref: str, translate, tidy=lambda size: size) -> RefBlock:
    """The block every lifted access of `ref` shares, its size written at the call site (`tidy`
    simplifies it)."""
    if group.unlifted_accesses:
        raise Refuse(f"`{ref}` is also accessed without the loop index inside the loop")
    dim, size_expr, size_env, index = block_index_of(group, loop, ref)
    written = index.translated(lambda e: translate(e, size_env))
    if written is None:
        offset = ", ".join(f"`{code(e)}`" for _, e in index.symbolic)
        raise Refuse(f"the block offset {offset} of `{ref}` cannot be written at the pallas_call (it depends on a "
                     "traced value or a name only the kernel has); compute it from the operands' shapes or static values")
    index = written
    if size_expr is None:  # a scalar index: a squeezed dim, one element per step (rewrite.kernel.scalar_lift)
        return RefBlock(ref, dim, cst.Integer("1"), index, [(s, {dim}) for s in group.subscripts], squeeze=True)
    size = translate(size_expr, size_env)
    if size is None:  # a helper's size parameter: written as its caller passes it
        size = translate(*reversed(static_argument(size_env, size_expr)))
    size = tidy(size) if size is not None else None
    if size is None:
        raise Refuse(f"the block size `{code(size_expr)}` of `{ref}` cannot be written at the pallas_call")
    return RefBlock(ref, dim, size, index, [(s, {dim}) for s in group.subscripts])


def lifted_element_ids(blocks) -> set[int]:
    """The subscript elements the blocks' rewrite removes (their windows become whole blocks)."""
    return {i for b in blocks for sub, dims in b.subscripts for i in touched_element_ids(sub, dims)}


def mention_kind(ctx: ModuleContext, node: cst.Name, env, rank: Optional[int] = None) -> tuple[str, Optional[int]]:
    """What a mention of a ref's name does: "param" (declares it, or is an attribute's name),
    "meta" (`.dtype`, `.ndim`, `is None` / `is not None`: the same for a block), "shape" with the static dim it reads
    (None: all of `.shape`, or a dim pallas-fix cannot read; one read from the back counts from
    `rank`, the kernel's view's, where the caller knows it), or "other"."""
    parent = ctx.parent(node)
    if isinstance(parent, cst.Param) or (isinstance(parent, cst.Attribute) and parent.attr is node):
        return "param", None
    if binds_from_star(ctx, node):
        return "param", None  # `x_ref, o_ref = refs` declares the ref (analysis.discovery.varargs)
    if isinstance(parent, cst.Attribute) and parent.value is node and parent.attr.value in ("dtype", "ndim"):
        return "meta", None
    if none_tested(parent) is node:
        return "meta", None  # an optional operand: blocking never makes a ref None or not
    if isinstance(parent, cst.Attribute) and parent.value is node and parent.attr.value == "shape":
        grand = ctx.parent(parent)
        if isinstance(grand, cst.Subscript) and len(grand.slice) == 1 and isinstance(grand.slice[0].slice, cst.Index):
            dim = env.static_int(grand.slice[0].slice.value) if env else None
            # `shape[-1]` counts from the end: which dim it is depends on the rank, unknown without it.
            if dim is not None and dim < 0:
                return "shape", rank + dim if rank is not None and rank + dim >= 0 else None
            return "shape", dim
        return "shape", None
    return "other", None


def shape_refusal(ref: str) -> Refuse:
    return Refuse(f"`{ref}.shape` is read in the kernel; it would mean the block's shape after the rewrite")


def check_kernel_ref_uses(analysis, site: KernelSite, region, lifted: set[str], extents: Optional[list] = None,
                          dead: frozenset = frozenset(), upper_stays: bool = False) -> None:
    """A lifted ref may only be touched through the lifted windows (and `.dtype`/other dims).
    A read of a lifted dim's size is refused, or, given `extents`, collected there for the
    planner to rewrite (rewrite.extents.extent_reads). `dead`: ids of statements the rewrite removes.
    `upper_stays`: the loop's upper bound (and what computes it) stays in the kernel, as R2's
    `pl.when(k < upper)` guard of a pl.program_id trip count, so its reads are checked too."""
    ctx: ModuleContext = analysis.ctx
    kernel = site.kernel
    assert kernel is not None
    bounds = [region.loop.lower] + ([region.loop.step] if region.loop.step is not None else [])
    if upper_stays:
        _check_guard_reads(ctx, region.loop.upper, lifted)
    else:
        bounds += [region.loop.upper, *region.bound_stmts]
    kernel_env = analysis.detection.envs.get(kernel)
    # `r = x_ref`: the alias is checked like the ref, its binding is no use (rewrite.kernel.ref_views).
    roots, allowed = alias_bindings(kernel, lambda n: analysis.detection.envs.get(ctx.enclosing_function(n)), lifted)
    roots.update({ref: ref for ref in lifted})
    for fn in region.functions:
        for node in walk(fn):
            if isinstance(node, cst.Subscript):
                base = ref_base(node)
                if base is not None and base.value in roots:
                    allowed.add(id(base))
    # Refs handed to helpers whose accesses the region lifts (rewrite.kernel.ref_helpers).
    allowed |= {id(n) for n in getattr(region, "ref_arg_names", ())}
    for node in walk(kernel):
        if not isinstance(node, cst.Name) or node.value not in roots or id(node) in allowed:
            continue
        kind, dim = mention_kind(ctx, node, kernel_env)
        if kind in ("param", "meta"):
            continue
        if any(any(a is b for b in bounds) or id(a) in dead for a in ctx.ancestors(node)):
            continue  # the loop bounds disappear with the loop, the dead statements with the windows
        if kind == "shape":
            lifted_dims = _lifted_dims(analysis, region, {n for n, root in roots.items() if root == roots[node.value]})
            shape_attr = ctx.parent(node)
            if _unpacked_shape_ok(ctx, kernel, ctx.parent(shape_attr), shape_attr, lifted_dims, bounds):
                continue
            if dim is not None and dim not in lifted_dims:
                continue
            read = extent_read(ctx, node, roots[node.value], dim) if extents is not None else None
            if read is None:
                raise shape_refusal(node.value)
            extents.append(read)
            continue
        stmt = next((s for a in ctx.ancestors(node) for s in getattr(region, "after", ()) if a is s), None)
        if stmt is not None:
            how = "read again" if _reads_ref(ctx, stmt, node.value) else "written"
            raise Refuse(
                f"`{node.value}` is {how} after the loop (line {ctx.span(node).line}); with the loop on a grid axis "
                f"that code runs on the last step, which holds only the last block of `{node.value}` (a second pass over "
                "it needs the whole ref). Keep the loops in the kernel, or split the passes into two pallas_calls"
            )
        raise Refuse(f"`{node.value}` is used outside the lifted windows (line {ctx.span(node).line})")


def _reads_ref(ctx, stmt: cst.CSTNode, name: str) -> bool:
    """Does `stmt` mention `name` other than as the target of a store (`name[...] = v`)?"""
    for n in walk(stmt):
        if isinstance(n, cst.Name) and n.value == name:
            parent = ctx.parent(n)
            stored = isinstance(parent, cst.Subscript) and parent.value is n and is_write(ctx, parent)
            if not stored or isinstance(ctx.parent(parent), cst.AugAssign):  # `o_ref[...] += v` reads it too
                return True
    return False


def _check_guard_reads(ctx, upper: cst.BaseExpression, lifted: set[str]) -> None:
    """The kept upper bound is the guard's text, which no edit reaches: a lifted ref read there
    would be the block (its `.shape`, the block's size), not the array the loop walked."""
    for node in walk(upper):
        if isinstance(node, cst.Name) and node.value in lifted:
            raise Refuse(
                f"the loop's trip count `{code(upper)}` depends on pl.program_id and reads `{node.value}`, which the "
                "lift blocks: the `pl.when` guard that keeps the trip count would read the block instead; bind the "
                "size to a name before the loop"
            )


def _lifted_dims(analysis, region, names: set[str]) -> set[int]:
    """The dims the loop slices of a ref, reached through any of its `names`."""
    return {use.dim for use in analysis.uses if use.provenance.loop is region.loop and use.ref_name in names}


def _unpacked_shape_ok(ctx, kernel, assign, shape_attr, lifted_dims: set[int], bounds) -> bool:
    """`rows, cols = x_ref.shape` where the names of lifted dims only feed the loop bounds."""
    if not (isinstance(assign, cst.Assign) and assign.value is shape_attr and len(assign.targets) == 1):
        return False
    target = assign.targets[0].target
    if not isinstance(target, (cst.Tuple, cst.List)):
        return False
    for n, el in enumerate(target.elements):
        if n not in lifted_dims:
            continue
        if not isinstance(el.value, cst.Name):
            return False
        name = el.value.value
        readers = [x for x in walk(kernel) if isinstance(x, cst.Name) and x.value == name and x is not el.value]
        for r in readers:
            if not any(a is b for a in [r, *ctx.ancestors(r)] for b in bounds):
                return False
    return True
