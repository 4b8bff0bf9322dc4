"""Grid to in-kernel loop (`--target gpu-interpret` only; fixes PF201).

GPU interpret mode runs every grid step with `pl.program_id` = 0, so a kernel that picks its
block with `pl.program_id` silently computes block 0 only. When every ref is a whole-array block,
a grid step differs from the next only through `pl.program_id`, so the grid can become a loop in
the kernel, which that interpreter runs:

Before:
    def kernel(x_ref, o_ref):
        i = pl.program_id(0)
        o_ref[pl.ds(i * 16, 16)] = x_ref[pl.ds(i * 16, 16)] + 1
    pl.pallas_call(kernel, out_shape=..., grid=(x.shape[0] // 16,))(x)

After:
    def kernel(x_ref, o_ref):
        def _step(pid, carry):
            i = pid
            o_ref[pl.ds(i * 16, 16)] = x_ref[pl.ds(i * 16, 16)] + 1
            return carry
        lax.fori_loop(0, x_ref.shape[0] // 16, _step, None)
    pl.pallas_call(kernel, out_shape=...)(x)

The grid ran its steps in row-major order over the same resident whole-array refs (and scratch);
nested loops, outermost axis first, run the same steps in the same order. `pl.num_programs(a)`
becomes the axis size written inside the kernel. Refused when any BlockSpec selects a block, when
the grid size cannot be written inside the kernel, when a helper outside the kernel reads
`pl.program_id`, and for scalar prefetch, input/output aliasing and kernels shared by several
pallas_calls. Never offered under the default target: a grid with BlockSpecs (R1/R3) is the
idiomatic form there.
"""

from __future__ import annotations

from collections import Counter
from typing import Optional

import libcst as cst

from pallas_fix.analysis.context import ModuleContext, walk
from pallas_fix.core import names as N
from pallas_fix.core.model import FixSafety, KernelSite, Origin
from pallas_fix.core.names import call_arg as _arg
from pallas_fix.core.plans import FixPlan, Outcome, Recipe, Refuse, site_key, use_key
from pallas_fix.rewrite.text import imports
from pallas_fix.rewrite.callsite.reading import CallSite
from pallas_fix.rewrite.common import attempt
from pallas_fix.rewrite.text.edits import apply_edits
from pallas_fix.rewrite.callsite.kernel_side import KernelSide
from pallas_fix.rewrite.text.scopes import bindings, fresh_namer, walk_scope
from pallas_fix.analysis.binders import is_docstring
from pallas_fix.rewrite.text.syntax import is_zero
from pallas_fix.rules.gpu_interpret.hazards import TARGET, targeted

NAME = "grid-to-loop"


def planner(analysis) -> dict:
    """One outcome per pallas_call, anchored on the call (its PF201 findings) and on every
    `pl.program_id` window in its kernel (PF103): the same plan object, so it is applied once."""
    if not targeted(analysis):
        return {}
    out: dict = {}
    by_site: dict[tuple[int, int], Optional[Outcome]] = {}
    for site in analysis.sites:
        by_site[id(site.call), id(site.kernel)] = outcome = attempt(NAME, _plan, analysis, site)
        if outcome is not None:
            out[site_key(site)] = outcome
    for use in analysis.uses:
        if use.provenance.origin is not Origin.PROGRAM_ID or use.kernel_site is None:
            continue
        outcome = by_site.get((id(use.kernel_site.call), id(use.kernel_site.kernel)))
        if outcome is not None:
            out[use_key(use)] = outcome
    return out


# -- match and check ------------------------------------------------------------------------------------
def _plan(analysis, site: KernelSite) -> Optional[FixPlan]:
    """The plan for one pallas_call; None when it has no grid, reads no pl.program_id, or every
    pl.program_id it reads is 0 anyway."""
    ctx: ModuleContext = analysis.ctx
    kernel = site.kernel
    grid_arg, grid_owner = _grid_arg(site)
    if grid_arg is None:
        return None
    if kernel is None:
        raise Refuse("the kernel function is not defined in this module")
    _check_helpers(analysis, site, kernel)
    pid_calls, np_calls = _axis_calls(ctx, kernel)
    if not pid_calls:
        return None
    _check_kernel(analysis, site, kernel)
    kernel_env = analysis.detection.envs.get(kernel)
    cs = CallSite(ctx, site, kernel_env)
    if cs.num_prefetch:
        raise Refuse("the pallas_call uses scalar prefetch (see PF205)")
    grid = cs.grid
    if not grid:
        return None
    sizes = _loop_sizes(ctx, site, cs, kernel_env, pid_calls + np_calls)
    steps = [kernel_env.static_int(g) for g in grid]
    if all(steps[kernel_env.static_int(c.args[0].value)] in (0, 1) for c in pid_calls):
        return None  # every pl.program_id it reads is 0 anyway: GPU interpret mode gets it right
    spec_edits = _spec_edits(ctx, cs)
    params_edit = _compiler_params_edit(ctx, site)
    lax = imports.spelling(ctx, imports.LAX)
    if lax.clashes(ctx):
        raise Refuse("`lax` is not imported and the name is taken")
    aliases, alias_stmts = _pid_aliases(ctx, kernel, kernel_env, len(grid))
    names = _fresh_names(ctx, len(grid), aliases)

    def rewrite(module: cst.Module) -> cst.Module:
        edits = dict(spec_edits)
        edits[grid_owner] = _drop_keyword("grid")
        if params_edit is not None:
            edits[params_edit] = _drop_keyword("dimension_semantics")
        body = _wrapped_body(kernel, kernel_env, pid_calls, np_calls, sizes, names, lax.text, alias_stmts)
        edits[kernel] = lambda updated: updated.with_changes(body=body)
        return imports.add_imports(apply_edits(module, edits)[0], [lax.add])

    description = (
        f"grid-to-loop: the grid ({', '.join(sizes)}) of `{site.kernel_name}` becomes an in-kernel lax.fori_loop; "
        "pl.program_id becomes the loop index"
    )
    uses = [u for u in analysis.uses if u.kernel_site is site and u.provenance.origin is Origin.PROGRAM_ID]
    return FixPlan(NAME, FixSafety.SAFE, uses, description, rewrite, site=site)


def _check_kernel(analysis, site: KernelSite, kernel: cst.FunctionDef) -> None:
    """Only this pallas_call runs the kernel, and its body can become a loop step."""
    ctx = analysis.ctx
    if sum(1 for s in analysis.sites if s.kernel is kernel) > 1:
        raise Refuse(f"kernel `{site.kernel_name}` is used by more than one pallas_call")
    if site.form != "decorator" and _references(ctx, kernel) > 1:
        raise Refuse(f"`{kernel.name.value}` is also used outside this pallas_call; wrapping its body would change those uses")
    if not isinstance(kernel.body, cst.IndentedBlock):
        raise Refuse("the kernel body is on the `def` line")
    for node in walk_scope(kernel.body, classes=False):
        if isinstance(node, cst.Return):
            raise Refuse("the kernel body returns early; a loop step cannot")
        if isinstance(node, (cst.Yield, cst.Global, cst.Nonlocal)):
            raise Refuse(f"the kernel body uses `{type(node).__name__.lower()}`")
    if site.kw("input_output_aliases") is not None:
        raise Refuse("the pallas_call sets input_output_aliases; pallas-fix does not move grids of aliased calls")


def _loop_sizes(ctx: ModuleContext, site: KernelSite, cs: CallSite, env, axis_calls: list[cst.Call]) -> list[str]:
    """Each grid size as the kernel writes it; every axis call must name one of the axes."""
    translate = KernelSide(ctx, site, cs, env)
    sizes = []
    for g in cs.grid:
        inner = translate(g)
        if inner is None:
            why = f": {translate.why}" if translate.why else ""
            raise Refuse(f"the grid size `{ctx.code(g)}` cannot be written inside the kernel{why}")
        sizes.append(ctx.code(inner))
    for call in axis_calls:
        axis = env.static_int(call.args[0].value) if call.args else None
        if axis is None or not 0 <= axis < len(cs.grid):
            raise Refuse(f"`{ctx.code(call)}` does not name a grid axis pallas-fix can read")
    return sizes


def _grid_arg(site: KernelSite) -> tuple[Optional[cst.Arg], Optional[cst.Call]]:
    """The `grid=` argument and the call that holds it (the pallas_call or its GridSpec)."""
    if "grid" in site.keywords:
        arg = site.keywords["grid"]
        if arg.keyword is None:
            raise Refuse("the grid is passed positionally")
        if not _inside(arg, site.call):
            raise Refuse("the grid comes through `**dict(...)`; write it as a keyword of the pallas_call")
        return arg, site.call
    if "grid" in site.grid_spec_keywords:
        arg = site.grid_spec_keywords["grid"]
        if arg.keyword is None:
            raise Refuse("the grid is passed positionally to the grid spec")
        if site.grid_spec is not None and not _inside(site.grid_spec, site.call):
            raise Refuse("the grid spec is built away from the pallas_call (it may be shared)")
        return arg, site.grid_spec
    return None, None


def _inside(node: cst.CSTNode, container: cst.CSTNode) -> bool:
    return node is container or any(n is node for n in walk(container))


def _axis_calls(ctx: ModuleContext, kernel: cst.FunctionDef) -> tuple[list[cst.Call], list[cst.Call]]:
    pid, num = [], []
    for node in walk(kernel.body):
        if isinstance(node, cst.Call):
            if ctx.imports.is_(node.func, N.PROGRAM_ID):
                pid.append(node)
            elif ctx.imports.is_(node.func, N.NUM_PROGRAMS):
                num.append(node)
    return pid, num


def _check_helpers(analysis, site: KernelSite, kernel: cst.FunctionDef) -> None:
    ctx = analysis.ctx
    for fn, sites in analysis.detection.reached.items():
        if site not in sites or fn is kernel or any(a is kernel for a in ctx.ancestors(fn)):
            continue
        for node in walk(fn):
            if isinstance(node, cst.Call) and ctx.imports.is_(node.func, N.PROGRAM_ID | N.NUM_PROGRAMS):
                name = fn.name.value if isinstance(fn, cst.FunctionDef) else "a lambda"
                raise Refuse(f"`{name}`, outside the kernel, calls `{ctx.code(node.func)}`; only the kernel body is rewritten")


def _references(ctx: ModuleContext, kernel: cst.FunctionDef) -> int:
    """Mentions of the kernel's name that resolve to this def (other `kernel`s do not count)."""
    name = kernel.name.value
    count = 0
    for node in walk(ctx.module):
        if isinstance(node, cst.Name) and node.value == name and node is not kernel.name:
            if ctx.resolve_def(name, node) in (kernel, None):
                count += 1
    return count


def _spec_edits(ctx: ModuleContext, cs: CallSite) -> dict:
    """Whole-array BlockSpecs stay; their index_map lambdas lose the grid parameters."""
    edits: dict = {}
    for kind in ("in", "out"):
        for slot_index, expr in enumerate(cs.spec_list(kind)):
            if expr is None:
                continue
            spec = expr if isinstance(expr, cst.Call) else None
            if spec is None or not ctx.imports.is_(spec.func, N.BLOCK_SPEC):
                raise Refuse(f"the {kind}_specs entry `{ctx.code(expr)}` is not a pl.BlockSpec(...) written at the call")
            block = _arg(spec, 0, "block_shape")
            index_map = _arg(spec, 1, "index_map")
            if block is not None and not (isinstance(block, cst.Name) and block.value == "None"):
                if not _whole_block(ctx, cs, kind, slot_index, block):
                    raise Refuse(
                        f"BlockSpec `{ctx.code(spec)}` selects blocks (see PF202); only whole-array refs can share one loop"
                    )
            if index_map is None:
                continue
            if not isinstance(index_map, cst.Lambda):
                raise Refuse(f"the index_map of `{ctx.code(spec)}` is not a lambda written at the call")
            body = index_map.body
            outs = [e.value for e in body.elements] if isinstance(body, (cst.Tuple, cst.List)) else [body]
            if not all(is_zero(o) for o in outs):
                raise Refuse(f"BlockSpec `{ctx.code(spec)}` moves with the grid (see PF202)")
            if index_map.params.params or index_map.params.star_arg is not cst.MaybeSentinel.DEFAULT:
                edits[index_map] = lambda lam: lam.with_changes(params=cst.Parameters(), whitespace_after_lambda=cst.SimpleWhitespace(""))
    return edits


def _whole_block(ctx: ModuleContext, cs: CallSite, kind: str, index: int, block: cst.BaseExpression) -> bool:
    slot = next((s for s in cs.slots.values() if s.kind == kind and s.index == index), None)
    if slot is None:
        return False
    block = ctx.resolve_value(block, cs.site.call)
    if slot.kind == "out" and isinstance(slot.out_shape, cst.Call):
        shape = _arg(slot.out_shape, 0, "shape")
        if shape is not None and ctx.code(ctx.resolve_value(shape, cs.site.call)) == ctx.code(block):
            return True  # the block is written as the out_shape's shape
    if isinstance(block, cst.Attribute) and block.attr.value == "shape" and slot.arg is not None:
        return ctx.code(block.value) == ctx.code(slot.arg) and cs.arg_at_call(slot.arg)  # not an `x` rebound since
    if not isinstance(block, (cst.Tuple, cst.List)):
        return False
    for d, e in enumerate(block.elements):
        full = cs.shape_dim(slot.param, d)
        if full is None or ctx.code(full) != ctx.code(e.value):
            return False
    return cs.rank(slot.param) == len(block.elements)


def _compiler_params_edit(ctx: ModuleContext, site: KernelSite) -> Optional[cst.Call]:
    params = site.kw("compiler_params")
    if params is None:
        return None
    node = ctx.resolve_value(params, site.call)
    if isinstance(node, cst.Call) and any(a.keyword is not None and a.keyword.value == "dimension_semantics" for a in node.args):
        if not any(a is site.call or a is site.grid_spec for a in ctx.ancestors(node)):
            raise Refuse("dimension_semantics is set outside the pallas_call; it must go with the grid")
        return node
    if "dimension_semantics" in ctx.code(node):
        raise Refuse("compiler_params sets dimension_semantics in a form pallas-fix cannot edit")
    return None


def _pid_aliases(ctx: ModuleContext, kernel: cst.FunctionDef, env, rank: int) -> tuple[dict[int, str], set]:
    """`pid = pl.program_id(0)` (or `i, j = pl.program_id(0), pl.program_id(1)`) at the top of
    the kernel, its names bound nowhere else: those names become the loop indices and the
    statement goes."""
    counts = Counter(bindings(kernel.body, nested=True))
    counts.update(n.name.value for n in walk(kernel.body) if isinstance(n, cst.Param))
    aliases: dict[int, str] = {}
    stmts: set = set()
    for stmt in kernel.body.body:
        found = _pid_assignment(ctx, stmt, env, rank)
        if found and all(axis not in aliases and counts[name] == 1 for axis, name in found.items()):
            if len(set(found.values())) == len(found):
                aliases.update(found)
                stmts.add(stmt)
    return aliases, stmts


def _pid_assignment(ctx: ModuleContext, stmt: cst.BaseStatement, env, rank: int) -> dict[int, str]:
    """{axis: name} for `name = pl.program_id(axis)` / `a, b = pl.program_id(0), pl.program_id(1)`;
    empty when the statement is anything else."""
    if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assign)):
        return {}
    assign = stmt.body[0]
    if len(assign.targets) != 1:
        return {}
    target, value = assign.targets[0].target, assign.value
    pairs = []
    if isinstance(target, cst.Name):
        pairs = [(target, value)]
    elif isinstance(target, (cst.Tuple, cst.List)) and isinstance(value, (cst.Tuple, cst.List)):
        if len(target.elements) == len(value.elements):
            pairs = [(t.value, v.value) for t, v in zip(target.elements, value.elements)]
    found: dict[int, str] = {}
    for t, v in pairs:
        if not (isinstance(t, cst.Name) and isinstance(v, cst.Call) and ctx.imports.is_(v.func, N.PROGRAM_ID) and v.args):
            return {}
        axis = env.static_int(v.args[0].value)
        if axis is None or not 0 <= axis < rank or axis in found:
            return {}
        found[axis] = t.value
    return found


def _fresh_names(ctx: ModuleContext, rank: int, aliases: dict[int, str]) -> list[tuple[str, str, str]]:
    """(step function, index, carry) names for each axis, new to the module."""
    fresh = fresh_namer({n.value for n in walk(ctx.module) if isinstance(n, cst.Name)})
    if rank == 1:
        return [(fresh("_step"), aliases.get(0) or fresh("pid"), fresh("carry"))]
    return [(fresh(f"_step{a}"), aliases.get(a) or fresh(f"pid{a}"), fresh(f"carry{a}")) for a in range(rank)]


# -- rewriting ----------------------------------------------------------------------------------------
class _AxisReplacer(cst.CSTTransformer):
    def __init__(self, replace: dict[cst.Call, cst.BaseExpression]) -> None:
        super().__init__()
        self.replace = replace

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        return self.replace.get(original_node, updated_node)


def _wrapped_body(kernel, env, pid_calls, np_calls, sizes, names, lax: str, dropped: set) -> cst.IndentedBlock:
    replace: dict[cst.Call, cst.BaseExpression] = {}
    for call in pid_calls:
        replace[call] = cst.Name(names[env.static_int(call.args[0].value)][1])
    for call in np_calls:
        size = cst.parse_expression(sizes[env.static_int(call.args[0].value)])
        atomic = isinstance(size, (cst.Integer, cst.Name, cst.Attribute, cst.Subscript, cst.Call))
        replace[call] = size if atomic else size.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    stmts = [s for s in kernel.body.body if s not in dropped]
    head: list[cst.BaseStatement] = []
    if stmts and is_docstring(stmts[0]):
        head, stmts = [stmts[0]], stmts[1:]
    replacer = _AxisReplacer(replace)
    inner: list[cst.BaseStatement] = [s.visit(replacer) for s in stmts]  # type: ignore[misc]
    if inner:
        inner[0] = inner[0].with_changes(leading_lines=[l for l in inner[0].leading_lines if l.comment is not None])
    for axis in reversed(range(len(sizes))):
        step, pid, carry = names[axis]
        inner = inner + [cst.parse_statement(f"return {carry}\n")]
        fn = cst.parse_statement(f"def {step}({pid}, {carry}):\n    pass\n")
        fn = fn.with_changes(body=cst.IndentedBlock(body=inner))
        loop = cst.parse_statement(f"{lax}.fori_loop(0, {sizes[axis]}, {step}, None)\n")
        inner = [fn, loop]
    return kernel.body.with_changes(body=head + inner)


def _drop_keyword(name: str):
    def edit(call: cst.Call) -> cst.Call:
        args = list(call.args)
        idx = next(i for i, a in enumerate(args) if a.keyword is not None and a.keyword.value == name)
        removed = args.pop(idx)
        if idx == len(args) and args:
            args[-1] = args[-1].with_changes(comma=removed.comma)
        return call.with_changes(args=args)

    return edit


RECIPE = Recipe(
    NAME, frozenset({"PF201", "PF103"}), planner, command="GridToLoop", target=TARGET,
    description="Move a grid used only through pl.program_id into an in-kernel fori_loop (GPU interpret mode; PF201).",
)
