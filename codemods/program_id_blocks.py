"""R3 — move a program_id window on a whole-array ref into its BlockSpec (fixes PF103).

Before:
    def kernel(x_ref, o_ref):
        i = pl.program_id(0)
        o_ref[pl.ds(i * BS, BS)] = x_ref[pl.ds(i * BS, BS)] + 1
    pl.pallas_call(kernel, out_shape=..., grid=(N // BS,))(x)

After:
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1
    pl.pallas_call(kernel, out_shape=..., grid=(N // BS,),
                   in_specs=[pl.BlockSpec((BS,), lambda i: (i,))],
                   out_specs=pl.BlockSpec((BS,), lambda i: (i,)))(x)

Recipe: match a ref whose every access is the same block-shaped window driven only by
`pl.program_id`; check that its BlockSpec is the whole array and that the size can be written at
the call site; then access the whole block in the kernel and give the ref a BlockSpec whose
index_map returns the window's block index. One ref per round: the engine re-analyses between.
"""

from __future__ import annotations

import libcst as cst

from pallas_fix.rewrite.blockplan import BlockIndexExpr, CallEdits, RefBlock, code, dead_assignments, kernel_subscript_edit
from pallas_fix.rewrite.callsite import CallSite, CallSiteError
from pallas_fix.analysis.context import walk
from pallas_fix.core.plans import FixPlan, Refusal, Recipe, use_key
from pallas_fix.core.model import FixSafety, IndexUse, Origin
from pallas_fix.rewrite.edits import apply_edits, remove_statement
from pallas_fix.rewrite.translate import Translator
from pallas_fix.analysis.windows import window_of

from pallas_fix.rewrite.loops import _ref_base, add_pallas_import, siblings_of, strip_leading_blank_lines

NAME = "program-id-blocks"


class _Refuse(Exception):
    pass


def _plan(analysis, ref: str, uses: list[IndexUse]) -> FixPlan:
    ctx = analysis.ctx
    site = uses[0].kernel_site
    if site is None or site.kernel is None:
        raise _Refuse("the kernel is not defined in this module")
    if sum(1 for s in analysis.sites if s.kernel is site.kernel) > 1:
        raise _Refuse(f"kernel `{site.kernel_name}` is used by more than one pallas_call")
    kernel_env = analysis.detection.envs.get(site.kernel)
    cs = CallSite(ctx, site, kernel_env)
    slot = cs.slots.get(ref)
    if slot is None or slot.kind not in ("in", "out"):
        raise _Refuse(f"`{ref}` is not an input or output of the pallas_call")
    if not cs.grid:
        raise _Refuse("the pallas_call has no grid")
    spec = cs.spec_of(slot)
    if not spec.whole:
        raise _Refuse(f"`{ref}` already has a BlockSpec that is not the whole array")

    by_sub = {}
    for u in uses:
        by_sub.setdefault(id(u.subscript), []).append(u)
    found = None
    subscripts: list[cst.Subscript] = []
    for node in walk(site.kernel):
        if not isinstance(node, cst.Subscript):
            continue
        base = _ref_base(node)
        if base is None or base.value != ref:
            continue
        owner = kernel_env.owner(ref)
        if owner is None or owner.scope is not site.kernel:
            continue
        sub_uses = by_sub.get(id(node), [])
        if len(sub_uses) != 1:
            raise _Refuse(
                f"`{ref}` is also accessed without a program_id window (line {ctx.span(node).line})"
                if not sub_uses
                else f"`{ref}` has dynamic windows in more than one dimension (line {ctx.span(node).line})"
            )
        use = sub_uses[0]
        window = window_of(use)
        if window.block is None:
            raise _Refuse(f"the window on `{ref}` is not provably a block ({window.reason})")
        axes = {}
        for key, mult in window.block.atoms.items():
            if not key.startswith("pid:"):
                raise _Refuse(f"the start of `{ref}` also depends on `{code(window.block.atom_exprs[key])}`")
            axis = int(key.split(":")[1])
            if axis >= len(cs.grid):
                raise _Refuse(f"pl.program_id({axis}) is beyond the grid's {len(cs.grid)} axes")
            axes[axis] = mult
        index = BlockIndexExpr(axes, window.block.offset)
        squeezed = _program_id_scalars(node, use, len(cs.grid))
        entry = (use.dim, code(use.size), index.key(), tuple(sorted(squeezed.items())))
        if found is None:
            found = (entry, use, index)
        elif found[0] != entry:
            raise _Refuse(f"`{ref}` is accessed at different blocks in one grid step")
        subscripts.append(node)
    if found is None:
        raise _Refuse(f"no program_id window on `{ref}`")
    _check_other_uses(ctx, site.kernel, ref, {id(_ref_base(s)) for s in subscripts}, found[1].dim, kernel_env)
    entry, use, index = found
    squeezed = dict(entry[3])
    size = Translator(ctx, site, cs.kernel_shape_dim)(use.size, use.env)
    if size is None:
        raise _Refuse(f"the block size `{code(use.size)}` of `{ref}` cannot be written at the pallas_call")
    block = RefBlock(ref, use.dim, size, index, [(s, {use.dim}) for s in subscripts], squeezed)
    edits = CallEdits(cs, [block], None).build()
    removed = set()
    for sub, dims in block.subscripts:
        edits[sub] = kernel_subscript_edit(dims, frozenset(squeezed))
        removed |= {id(el) for n, el in enumerate(sub.slice) if n in dims or n in squeezed}
    functions = [n for n in walk(site.kernel) if isinstance(n, cst.FunctionDef)]
    if site.kernel not in edits:
        edits[site.kernel] = strip_leading_blank_lines
    for stmt in dead_assignments(ctx, functions, removed):
        remove_statement(edits, stmt, siblings_of(ctx, stmt))
    description = f"moved the program_id window on `{ref}` in `{site.kernel_name}` into its BlockSpec"

    needs_import = cs.needs_pallas_import()

    def rewrite(module: cst.Module) -> cst.Module:
        new = apply_edits(module, edits)[0]
        return add_pallas_import(new) if needs_import else new

    return FixPlan(NAME, FixSafety.SAFE, uses, description, rewrite, site=site)


def _program_id_scalars(sub: cst.Subscript, use: IndexUse, ngrid: int) -> dict[int, int]:
    """Dims of `sub` indexed by exactly `pl.program_id(k)` (directly or through a name): those
    become squeezed (None) block dims whose index_map entry is grid axis k."""
    from pallas_fix.analysis.affine import decompose
    from pallas_fix.analysis.windows import hooks_for

    out: dict[int, int] = {}
    env = use.env
    for n, el in enumerate(sub.slice):
        if n == use.dim or not isinstance(el.slice, cst.Index):
            continue
        value = el.slice.value
        if not env.value(value).dynamic:
            continue
        aff = decompose(value, hooks_for(env))
        if aff is None or aff.const and any(c.mult for c in aff.const):
            continue
        terms = {k: c for k, c in aff.terms.items() if c.mult}
        if len(terms) == 1:
            (key, coeff), = terms.items()
            if key.startswith("pid:") and coeff.mult == 1 and not coeff.factors:
                axis = int(key.split(":")[1])
                if axis < ngrid:
                    out[n] = axis
    return out


def _check_other_uses(ctx, kernel, ref: str, allowed: set[int], dim: int, env) -> None:
    for node in walk(kernel):
        if not isinstance(node, cst.Name) or node.value != ref or id(node) in allowed:
            continue
        parent = ctx.parent(node)
        if isinstance(parent, cst.Param):
            continue
        if isinstance(parent, cst.Attribute) and parent.value is node and parent.attr.value in ("dtype", "ndim"):
            continue
        if isinstance(parent, cst.Attribute) and parent.value is node and parent.attr.value == "shape":
            grand = ctx.parent(parent)
            if isinstance(grand, cst.Subscript) and len(grand.slice) == 1 and isinstance(grand.slice[0].slice, cst.Index):
                d = env.static_int(grand.slice[0].slice.value)
                if d is not None and d != dim:
                    continue
            raise _Refuse(f"`{ref}.shape` is read in the kernel; it would mean the block's shape after the rewrite")
        raise _Refuse(f"`{ref}` is used outside its program_id windows (line {ctx.span(node).line})")


def planner(analysis) -> dict:
    out: dict = {}
    groups: dict[tuple[int, str], list[IndexUse]] = {}
    for use in analysis.uses:
        if use.provenance.origin is not Origin.PROGRAM_ID or use.kind != "ds" or use.kernel_site is None:
            continue
        base = use.subscript.value
        if isinstance(base, cst.Attribute) and base.attr.value == "at":
            base = base.value
        if not isinstance(base, cst.Name):
            continue
        groups.setdefault((id(use.kernel_site.call), base.value), []).append(use)
    for (_, ref), uses in groups.items():
        try:
            outcome = _plan(analysis, ref, uses)
        except (_Refuse, CallSiteError) as exc:
            outcome = Refusal(NAME, str(exc))
        for use in uses:
            out[use_key(use)] = outcome
    return out


RECIPE = Recipe(
    NAME,
    frozenset({"PF103"}),
    planner,
    command="ProgramIdBlocks",
    description="Move pl.program_id windows on whole-array refs into BlockSpecs (R3, PF103).",
)
