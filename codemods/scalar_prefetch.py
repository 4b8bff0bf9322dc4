"""R6 — a data-dependent start becomes a scalar-prefetch index_map (fixes PF105, TPU only).

Before:
    def kernel(x_ref, idx_ref, o_ref):
        src = idx_ref[pl.program_id(0)]
        o_ref[...] = x_ref[pl.ds(src * BS, BS), :]
    pl.pallas_call(kernel, ..., grid=(n,), out_specs=pl.BlockSpec((BS, d), lambda i: (i, 0)))(x, idx)

After:
    def kernel(idx_ref, x_ref, o_ref):
        o_ref[...] = x_ref[...]
    pl.pallas_call(kernel, ..., grid_spec=pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=1, grid=(n,),
        in_specs=[pl.BlockSpec((BS, d), lambda i, idx_ref: (idx_ref[i], 0))],
        out_specs=pl.BlockSpec((BS, d), lambda i, idx_ref: (i, 0))))(idx, x)

Recipe: match a ref whose every access is the window `pl.ds(table[f(g)] * S, S)` (or a
`pl.multiple_of` of it, or `table[...]` itself for a window of 1; the entry may be read through a
one-element slice, `table[pl.ds(f(g), 1)].reshape(())`, `table[pl.ds(f(g), 1)][0]` or
`st = table[pl.ds(f(g), 1)]` used only as `st[0]`, which the plan first spells `table[f(g)]`,
ahead of any lift that would block the slice), where `table` is an input the
kernel only reads as scalars and never writes and `f(g)` an integer sum of grid indices; check
that the backend is TPU (Mosaic GPU and Triton have no scalar prefetch), that the ref is a
whole-array input and the table read stays inside the table; then move the table into scalar
prefetch (its argument and parameter first, as Pallas requires, every index_map taking it) and
give the ref a BlockSpec whose index_map reads the table. Where `f` reads a loop index, the loop
becomes a grid axis first (R1, or R2 for a reduction such as paged attention's loop over pages,
with their legality rules) and the program_id form is then rewritten; one plan does both.
A start `table[f(g)] + i * S` (a row start, as varlen kernels read `cu_seqlens`, plus whole
windows in grid indices) gathers block `table[f(g)] // S + i`; through a chunk map,
`cu[ci[t, 0]] + ci[t, 1] * S` gathers block `cu[ci[t, 0]] // S + ci[t, 1]` (both tables move into
scalar prefetch). A leading dim read at one row by grid indices (`x_ref[i_h, pl.ds(...), :]`)
is squeezed out of the gathered block, its row returned by the index_map.

Unsafe: the table's values are data. The rewrite is the same program for every table whose
entries name blocks inside the array (0 <= t and (t + 1) * S <= n); outside that the original
reads a clamped or out-of-bounds window and the rewrite an out-of-range block. A table of row
starts adds a condition, stated in the fix message: every entry is a multiple of S (a sequence
starting mid-block would read the wrong rows). Verification runs the example (give the table a
value range: `i32[8] in [0, 8)`, or build an aligned table in the entry) before anything is written.
"""

from __future__ import annotations

from typing import Optional

import libcst as cst

from pallas_fix.analysis.context import walk
from pallas_fix.analysis.result import analyze
from pallas_fix.codemods import lift_loop, lift_reduction
from pallas_fix.core import names as N
from pallas_fix.core.model import Backend, FixSafety, IndexUse
from pallas_fix.core.plans import FixPlan, Recipe, Refusal, Refuse, use_key
from pallas_fix.rewrite.text import imports
from pallas_fix.rewrite.blocks.edits import dead_assignments, kernel_subscript_edit, packed_tuple, touched_element_ids
from pallas_fix.rewrite.proofs.bounds import Bounds
from pallas_fix.rewrite.proofs.tpu_tiling import check_new_block_dims
from pallas_fix.rewrite.blocks.plan import RefBlock
from pallas_fix.rewrite.callsite.reading import CallSite
from pallas_fix.rewrite.common import check_single_call, reported_uses
from pallas_fix.rewrite.reduction.takes import is_reduction
from pallas_fix.rewrite.kernel.dead_params import drop_dead_params
from pallas_fix.rewrite.text.edits import apply_edits, remove_statement
from pallas_fix.rewrite.text.line_width import fit_width
from pallas_fix.rewrite.callsite.spelling.operands import CallSiteError
from pallas_fix.rewrite.prefetch.index_text import rows_condition, table_out_of_range
from pallas_fix.rewrite.prefetch.windows import Gather, check_not_written, check_table, gather_of
from pallas_fix.rewrite.prefetch.call import PrefetchEdits
from pallas_fix.rewrite.prefetch.spellings import scalar_read_edits
from pallas_fix.rewrite.kernel.ref_access import ref_base
from pallas_fix.rewrite.text.statements import siblings_of, strip_leading_blank_lines
from pallas_fix.rewrite.text.syntax import code
from pallas_fix.rewrite.text.translate import Translator, simplify

NAME = "scalar-prefetch"
# Every refusal keeps the words PF105 has always used, then says what stands in the way.
_WHY = "the start depends on data loaded inside the kernel, and scalar prefetch cannot pick its block here: "


def planner(analysis) -> dict:
    """One plan per (pallas_call, gathered ref); the engine re-analyses between plans."""
    out: dict = {}
    lifts: dict = {}  # id of a loop call -> the module with that loop lifted (K and V share one)
    for uses in _gathered_refs(analysis).values():
        try:
            outcome = _plan(analysis, uses, lifts)
        except (Refuse, CallSiteError) as exc:
            outcome = Refusal(NAME, _WHY + str(exc))
        for use in uses:
            out[use_key(use)] = outcome
    return out


def _gathered_refs(analysis) -> dict[tuple[tuple[int, int], str], list[IndexUse]]:
    """((ids of the pallas_call and the kernel), ref) -> the ref's data-dependent windows."""
    groups: dict[tuple[tuple[int, int], str], list[IndexUse]] = {}
    if analysis.ctx is None:
        return groups
    for use in reported_uses(analysis, "PF105"):
        base = ref_base(use.subscript)
        if use.kernel_site is None or base is None:
            continue
        groups.setdefault(((id(use.kernel_site.call), id(use.kernel_site.kernel)), base.value), []).append(use)
    return groups


def _plan(analysis, uses: list[IndexUse], lifts: Optional[dict] = None) -> FixPlan:
    """`lifts` None: the loop form is refused (the kernel was lifted already)."""
    site = uses[0].kernel_site
    ref = ref_base(uses[0].subscript).value
    check_single_call(analysis, site)
    _check_backend(site)
    cs = CallSite(analysis.ctx, site, analysis.detection.envs.get(site.kernel))
    gather = gather_of(analysis, site, ref, uses, len(cs.grid))
    if gather.read.spelled:
        return _after_scalar_reads(analysis, gather, uses, lifts)
    _check_operands(cs, gather)
    check_not_written(analysis, site, ref)
    for table in gather.tables:
        check_table(analysis, site, table)
    if gather.loop is not None:
        if lifts is None:
            raise Refuse(f"the table index still reads the index of the loop over `{gather.loop.index_name}`")
        return _after_lift(analysis, gather, uses, lifts)
    return _direct(analysis, cs, gather, uses)


def _check_backend(site) -> None:
    backend = site.backend
    if backend is Backend.TPU:
        return
    if backend is Backend.UNKNOWN:
        raise Refuse("scalar prefetch is TPU-only and nothing says which backend this kernel is for (no "
                     "compiler_params or backend import); if it runs on TPU, say so with --backend tpu")
    name = "Mosaic GPU" if backend is Backend.MOSAIC_GPU else "Triton"
    raise Refuse(
        f"this is a {name} kernel ({site.backend_reason}) and {name} has no scalar prefetch, so no index_map can "
        "read the table; if the kernel runs on TPU, say so with --backend tpu"
    )


def _check_operands(cs: CallSite, gather: Gather) -> None:
    if "input_output_aliases" in cs.site.keywords:
        raise Refuse("the pallas_call aliases inputs to outputs (input_output_aliases), which number the operands "
                     "that moving the table into scalar prefetch renumbers")
    for name in gather.tables:
        table = cs.slots.get(name)
        if table is None or table.kind not in ("in", "prefetch"):
            what = f"a {table.kind} buffer" if table is not None else "not an operand of the pallas_call"
            raise Refuse(f"the table `{name}` is {what}; only an input can become a scalar-prefetch table")
    ref = cs.slots.get(gather.ref)
    if ref is None or ref.kind != "in":
        if ref is not None and ref.kind == "out":
            raise Refuse(
                f"`{gather.ref}` is an output: a data-dependent output block is a scatter, whose blocks may be written "
                "twice or never; pallas-fix only gathers inputs"
            )
        raise Refuse(f"`{gather.ref}` is not an input of the pallas_call; only inputs get gathered BlockSpecs")


def _direct(analysis, cs: CallSite, gather: Gather, uses: list[IndexUse]) -> FixPlan:
    """The table index reads only grid indices: one BlockSpec and the operand move."""
    ctx, site = analysis.ctx, cs.site
    size = Translator(ctx, site, cs.kernel_shape_dim)(gather.size, gather.size_env)
    if size is None:
        raise Refuse(f"the window size `{code(gather.size)}` of `{gather.ref}` cannot be written at the pallas_call")
    for read in gather.reads():
        rank = cs.rank(read.table)
        if rank is not None and rank != len(read.index):
            raise Refuse(f"the table `{read.table}` has {rank} dims but is read with {len(read.index)} indices")
    bounds = Bounds(cs)
    outside = table_out_of_range(cs, bounds, gather)
    if outside is not None:
        raise Refuse(outside)
    pl = imports.spelling(ctx, imports.PALLAS)
    tpu = imports.spelling(ctx, imports.TPU)
    # A PrefetchScalarGridSpec is written unless the call has one already.
    new_spec = (any(cs.slots[t].kind == "in" for t in gather.tables)
                and "num_scalar_prefetch" not in site.grid_spec_keywords)
    if new_spec and tpu.clashes(ctx):
        raise Refuse(f"the name `{tpu.text}` is taken; import jax.experimental.pallas.tpu under some alias first")
    call = PrefetchEdits(cs, gather, simplify(size), pl.text, tpu.text)
    edits = call.build()
    removed: set[int] = set()
    squeezed = frozenset(gather.squeezed)
    _check_rows(cs, bounds, gather)
    rank = cs.rank(gather.ref)
    if rank is not None:  # Mosaic's tiling rule for the block written (interpret mode runs any block)
        check_new_block_dims(cs, bounds, gather.ref, rank, {gather.dim: simplify(size), **{d: None for d in squeezed}})
    for sub in gather.subscripts:
        dims = {gather.dim} | set(squeezed)
        edits[sub] = kernel_subscript_edit({gather.dim}, drop=squeezed, packed=packed_tuple(analysis, sub, dims))
        removed |= touched_element_ids(sub, dims)
    functions = [n for n in walk(site.kernel) if isinstance(n, cst.FunctionDef)]
    for stmt in dead_assignments(ctx, functions, removed):
        remove_statement(edits, stmt, siblings_of(ctx, stmt))
    edits[site.kernel] = strip_leading_blank_lines
    needed = [pl.add, tpu.add if new_spec else None]

    dropped = _params_module(ctx, site) if call.drop_params else None

    def rewrite(module: cst.Module) -> cst.Module:
        module = imports.add_imports(apply_edits(module, edits)[0], needed)
        return _drop_unused_import(module, dropped) if dropped else module

    args = [code(s.arg) if s.arg is not None else s.param for s in call.moving]
    moved = f"moved {' and '.join(f'`{a}`' for a in args)} into scalar prefetch and " if call.moves else ""
    description = (
        f"{moved}gave `{gather.ref}` in `{site.kernel_name}` a BlockSpec whose index_map reads "
        f"{' and '.join(f'`{t}`' for t in gather.tables)} (a scalar-prefetch gather)"
    )
    if gather.rows_axes is not None:
        extent = cs.shape_dim(gather.ref, gather.dim)
        tail = extent is None or not bounds.prover.divides(bounds.poly(size), bounds.poly(extent))
        extent_text = (code(extent) if extent is not None else f"dim {gather.dim}") if tail else None
        description += f"; {rows_condition(gather, code(simplify(size)), extent_text)}"
    return FixPlan(NAME, FixSafety.UNSAFE, uses, description, rewrite, site=site)


def _check_rows(cs: CallSite, bounds: Bounds, gather: Gather) -> None:
    """Every row a squeezed dim takes over the grid lies inside the array: a scalar index past the
    end is clamped in the original's interpreters and out of bounds in a block."""
    for dim, index in sorted(gather.squeezed.items()):
        bounds.check_block(RefBlock(gather.ref, dim, cst.Integer("1"), index, squeeze=True), None)


def _params_module(ctx, site) -> tuple[str, str] | None:
    """(module path, local name) of the dropped compiler_params' module (`plgpu`)."""
    params = ctx.resolve_value(site.kw("compiler_params"), site.call)
    func = params.func if isinstance(params, cst.Call) else None
    base = func.value if isinstance(func, cst.Attribute) else None
    if not isinstance(base, cst.Name) or ctx.imports.bindings.get(base.value) not in (N.MOSAIC_GPU, N.TRITON):
        return None
    return ctx.imports.bindings[base.value], base.value


def _drop_unused_import(module: cst.Module, dropped: tuple[str, str]) -> cst.Module:
    """The other backend's import, once its CompilerParams() is gone and nothing else uses it."""
    from libcst.codemod import CodemodContext  # imported here: libcst.codemod is slow to load (rewrite.text.imports)
    from libcst.codemod.visitors import RemoveImportsVisitor

    path, local = dropped
    parent, _, leaf = path.rpartition(".")
    context = CodemodContext()
    RemoveImportsVisitor.remove_unused_import(context, parent, leaf, None if local == leaf else local)
    RemoveImportsVisitor.remove_unused_import(context, path, None, local)
    return RemoveImportsVisitor(context).transform_module(module)


def _applied(module: cst.Module, plan: FixPlan) -> str:
    """The text `plan` makes of `module`, finished as the engine finishes every plan's text
    (engine.apply_plan: dead kernel parameters dropped, new lines fitted to the file's width), so
    that one plan doing both steps writes what two rounds would."""
    new = plan.rewrite(module)
    if plan.site is not None and plan.site.kernel is not None:
        new = drop_dead_params(module, new, plan.site.kernel.name.value)
    return fit_width(module.code, new.code)


def _lift(analysis, loop, uses: list[IndexUse], lifts: dict) -> tuple[str, str, object, object]:
    """(what the lift did, the lifted source, its analysis, its `pipelined`), once per loop and
    analysis."""
    key = id(loop.call)
    if key not in lifts:
        try:
            if is_reduction(analysis, loop, uses):
                first = lift_reduction.plan_without_windows(analysis, loop, uses)
            else:
                first = lift_loop.plan_loop(analysis, loop, uses)
        except (Refuse, CallSiteError) as exc:
            lifts[key] = Refuse(
                f"the table is read at the index of the loop over `{loop.index_name}`, which must become a grid "
                f"axis first, and it cannot: {exc}"
            )
        else:
            source = _applied(analysis.ctx.module, first)
            lifts[key] = (first.description, source, analyze(source, analysis.path, analysis.config), first.pipelined)
    if isinstance(lifts[key], Refuse):
        raise lifts[key]
    return lifts[key]


def _again(analysis, site, ref: str) -> list[IndexUse]:
    """The PF105 windows on `ref` in the kernel of `site` (by name) in another analysis."""
    return [
        u for u in reported_uses(analysis, "PF105")
        if u.kernel_site is not None and u.kernel_site.kernel_name == site.kernel_name
        and ref_base(u.subscript) is not None and ref_base(u.subscript).value == ref
    ]


def _after_scalar_reads(analysis, gather: Gather, uses: list[IndexUse], lifts: Optional[dict]) -> FixPlan:
    """The table entry is read through a one-element slice (`t[pl.ds(i, 1)].reshape(())`): spell it
    as the scalar read (rewrite.prefetch.spellings), then plan on that text; one plan does both.
    It goes before the lifts: a lift would make the table's slice (a loop window too) a block of
    its own and leave the gather dynamic."""
    site = uses[0].kernel_site
    spelled = gather.read.spelled
    source = apply_edits(analysis.ctx.module, scalar_read_edits(analysis.ctx, spelled))[0].code
    normalised = analyze(source, analysis.path, analysis.config)
    again = _again(normalised, site, gather.ref)
    if not again:
        raise Refuse(f"reading `{spelled[0].text()}` as a scalar left no data-dependent window on `{gather.ref}`")
    then = _plan(normalised, again, {} if lifts is not None else None)
    final = _applied(normalised.ctx.module, then)
    what = f"read `{code(spelled[0].scalar)}` as the scalar `{spelled[0].text()}`"
    return FixPlan(NAME, FixSafety.UNSAFE, uses, f"{what}, then {then.description}",
                   lambda _module: cst.parse_module(final), site=site, before_lifts=True)


def _after_lift(analysis, gather: Gather, uses: list[IndexUse], lifts: dict) -> FixPlan:
    """The table index reads a loop index: the loop becomes a grid axis (R1, or R2 for a
    reduction), then the program_id form is planned on the lifted kernel."""
    loop, site = gather.loop, uses[0].kernel_site
    lifted_what, lifted_source, lifted, pipelined = _lift(analysis, loop, uses, lifts)
    again = _again(lifted, site, gather.ref)
    if not again:
        raise Refuse(f"lifting the loop over `{loop.index_name}` left no data-dependent window on `{gather.ref}`")
    try:
        second = _plan(lifted, again)
    except (Refuse, CallSiteError) as exc:
        raise Refuse(f"once the loop over `{loop.index_name}` is a grid axis: {exc}") from None
    final = _applied(lifted.ctx.module, second)

    def rewrite(_module: cst.Module) -> cst.Module:
        return cst.parse_module(final)

    return FixPlan(NAME, FixSafety.UNSAFE, uses, f"{lifted_what}, then {second.description}", rewrite, site=site,
                   pipelined=pipelined)


RECIPE = Recipe(
    NAME, frozenset({"PF105"}), planner, command="ScalarPrefetch",
    description="Move data-dependent block starts into scalar-prefetch index_maps (R6, PF105, TPU).",
)
