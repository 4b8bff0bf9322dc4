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

from typing import Optional

import libcst as cst

from pallas_fix.core import names as N
from pallas_fix.rewrite.callsite import CallSite, CallSiteError
from pallas_fix.analysis.context import ModuleContext, walk
from pallas_fix.core.plans import FixPlan, Outcome, Refusal, Recipe, site_key, use_key
from pallas_fix.rules.gpu_hazards import TARGET, targeted
from pallas_fix.core.model import FixSafety, KernelSite, Origin
from pallas_fix.rewrite.edits import apply_edits
from pallas_fix.core.names import call_arg as _arg
from pallas_fix.rewrite.common import target_names as _target_names

NAME = "grid-to-loop"


class _Refuse(Exception):
    pass


def outcome_for_site(analysis, site: KernelSite) -> Optional[Outcome]:
    """The plan (or refusal) for one pallas_call; None when it has no grid or no program_id."""
    try:
        return _plan(analysis, site)
    except (_Refuse, CallSiteError) as exc:
        return Refusal(NAME, str(exc))


def planner(analysis) -> dict:
    """One outcome per pallas_call, anchored on the call (its PF201 findings) and on every
    `pl.program_id` window in its kernel (PF103): the same plan object, so it is applied once."""
    if not targeted(analysis):
        return {}
    out: dict = {}
    by_site: dict[int, Optional[Outcome]] = {}
    for site in analysis.sites:
        by_site[id(site.call)] = outcome = outcome_for_site(analysis, site)
        if outcome is not None:
            out[site_key(site)] = outcome
    for use in analysis.uses:
        if use.provenance.origin is not Origin.PROGRAM_ID or use.kernel_site is None:
            continue
        outcome = by_site.get(id(use.kernel_site.call))
        if outcome is not None:
            out[use_key(use)] = outcome
    return out


RECIPE = Recipe(
    NAME,
    frozenset({"PF201", "PF103"}),
    planner,
    command="GridToLoop",
    description="Move a grid used only through pl.program_id into an in-kernel fori_loop (GPU interpret mode; PF201).",
    target=TARGET,
)


# -- planning -----------------------------------------------------------------------------------------
def _plan(analysis, site: KernelSite) -> Optional[FixPlan]:
    ctx: ModuleContext = analysis.ctx
    kernel = site.kernel
    grid_arg, grid_owner = _grid_arg(site)
    if grid_arg is None:
        return None
    if kernel is None:
        raise _Refuse("the kernel function is not defined in this module")
    _check_helpers(analysis, site, kernel)
    pid_calls, np_calls = _axis_calls(ctx, kernel)
    if not pid_calls:
        return None
    if sum(1 for s in analysis.sites if s.kernel is kernel) > 1:
        raise _Refuse(f"kernel `{site.kernel_name}` is used by more than one pallas_call")
    if site.form != "decorator" and _references(ctx, kernel) > 1:
        raise _Refuse(f"`{kernel.name.value}` is also used outside this pallas_call; wrapping its body would change those uses")
    _check_body(ctx, kernel)
    for key in ("input_output_aliases",):
        if site.kw(key) is not None:
            raise _Refuse(f"the pallas_call sets {key}; pallas-fix does not move grids of aliased calls")
    kernel_env = analysis.detection.envs.get(kernel)
    cs = CallSite(ctx, site, kernel_env)
    if cs.num_prefetch:
        raise _Refuse("the pallas_call uses scalar prefetch (see PF205)")
    grid = cs.grid
    if not grid:
        return None
    sizes = []
    translate = _KernelSide(ctx, site, cs, kernel_env)
    for g in grid:
        inner = translate(g)
        if inner is None:
            raise _Refuse(f"the grid size `{ctx.code(g)}` cannot be written inside the kernel")
        sizes.append(ctx.code(inner))
    for call in pid_calls + np_calls:
        axis = kernel_env.static_int(call.args[0].value) if call.args else None
        if axis is None or not 0 <= axis < len(grid):
            raise _Refuse(f"`{ctx.code(call)}` does not name a grid axis pallas-fix can read")
    steps = [kernel_env.static_int(g) for g in grid]
    if all(steps[kernel_env.static_int(c.args[0].value)] in (0, 1) for c in pid_calls):
        return None  # every pl.program_id it reads is 0 anyway: GPU interpret mode gets it right
    spec_edits = _spec_edits(ctx, cs)
    params_edit = _compiler_params_edit(ctx, site)
    lax = _lax_alias(ctx)
    aliases, alias_stmts = _pid_aliases(ctx, kernel, kernel_env, len(grid))
    names = _fresh_names(ctx, len(grid), aliases)

    def rewrite(module: cst.Module) -> cst.Module:
        edits = dict(spec_edits)
        edits[grid_owner] = _drop_keyword("grid")
        if params_edit is not None:
            edits[params_edit] = _drop_keyword("dimension_semantics")
        body = _wrapped_body(ctx, kernel, kernel_env, pid_calls, np_calls, sizes, names, lax or "lax", alias_stmts)
        edits[kernel] = lambda updated: updated.with_changes(body=body)
        new, _ = apply_edits(module, edits)
        if lax is None:
            new = _add_lax_import(new)
        return new

    axes = ", ".join(sizes)
    description = (
        f"grid-to-loop: the grid ({axes}) of `{site.kernel_name}` becomes an in-kernel lax.fori_loop; "
        "pl.program_id becomes the loop index"
    )
    uses = [u for u in analysis.uses if u.kernel_site is site and u.provenance.origin is Origin.PROGRAM_ID]
    return FixPlan(NAME, FixSafety.SAFE, uses, description, rewrite, site=site)


def _grid_arg(site: KernelSite) -> tuple[Optional[cst.Arg], Optional[cst.Call]]:
    """The `grid=` argument and the call that holds it (the pallas_call or its GridSpec)."""
    if "grid" in site.keywords:
        arg = site.keywords["grid"]
        if arg.keyword is None:
            raise _Refuse("the grid is passed positionally")
        return arg, site.call
    if "grid" in site.grid_spec_keywords:
        arg = site.grid_spec_keywords["grid"]
        if arg.keyword is None:
            raise _Refuse("the grid is passed positionally to the grid spec")
        if site.grid_spec is not None and not _inside(site.grid_spec, site.call):
            raise _Refuse("the grid spec is built away from the pallas_call (it may be shared)")
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
                raise _Refuse(f"`{name}`, outside the kernel, calls `{ctx.code(node.func)}`; only the kernel body is rewritten")


def _references(ctx: ModuleContext, kernel: cst.FunctionDef) -> int:
    """Mentions of the kernel's name that resolve to this def (other `kernel`s do not count)."""
    name = kernel.name.value
    count = 0
    for node in walk(ctx.module):
        if isinstance(node, cst.Name) and node.value == name and node is not kernel.name:
            if ctx.resolve_def(name, node) in (kernel, None):
                count += 1
    return count


def _own_nodes(fn: cst.FunctionDef):
    stack = list(fn.body.children)
    while stack:
        cur = stack.pop()
        yield cur
        if isinstance(cur, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            continue
        stack.extend(cur.children)


def _check_body(ctx: ModuleContext, kernel: cst.FunctionDef) -> None:
    if not isinstance(kernel.body, cst.IndentedBlock):
        raise _Refuse("the kernel body is on the `def` line")
    for node in _own_nodes(kernel):
        if isinstance(node, cst.Return):
            raise _Refuse("the kernel body returns early; a loop step cannot")
        if isinstance(node, (cst.Yield, cst.Global, cst.Nonlocal)):
            raise _Refuse(f"the kernel body uses `{type(node).__name__.lower()}`")


def _spec_edits(ctx: ModuleContext, cs: CallSite) -> dict:
    """Whole-array BlockSpecs stay; their index_map lambdas lose the grid parameters."""
    edits: dict = {}
    for kind in ("in", "out"):
        for slot_index, expr in enumerate(cs.spec_list(kind)):
            if expr is None:
                continue
            spec = expr if isinstance(expr, cst.Call) else None
            if spec is None or not ctx.imports.is_(spec.func, N.BLOCK_SPEC):
                raise _Refuse(f"the {kind}_specs entry `{ctx.code(expr)}` is not a pl.BlockSpec(...) written at the call")
            block = _arg(spec, 0, "block_shape")
            index_map = _arg(spec, 1, "index_map")
            if block is not None and not (isinstance(block, cst.Name) and block.value == "None"):
                if not _whole_block(ctx, cs, kind, slot_index, block):
                    raise _Refuse(
                        f"BlockSpec `{ctx.code(spec)}` selects blocks (see PF202); only whole-array refs can share one loop"
                    )
            if index_map is None:
                continue
            if not isinstance(index_map, cst.Lambda):
                raise _Refuse(f"the index_map of `{ctx.code(spec)}` is not a lambda written at the call")
            body = index_map.body
            outs = [e.value for e in body.elements] if isinstance(body, (cst.Tuple, cst.List)) else [body]
            if not all(_is_zero(o) for o in outs):
                raise _Refuse(f"BlockSpec `{ctx.code(spec)}` moves with the grid (see PF202)")
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
        return ctx.code(block.value) == ctx.code(slot.arg)
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
            raise _Refuse("dimension_semantics is set outside the pallas_call; it must go with the grid")
        return node
    if "dimension_semantics" in ctx.code(node):
        raise _Refuse("compiler_params sets dimension_semantics in a form pallas-fix cannot edit")
    return None


def _lax_alias(ctx: ModuleContext) -> Optional[str]:
    for local, full in ctx.imports.bindings.items():
        if full == "jax.lax":
            return local
    for local, full in ctx.imports.bindings.items():
        if full == "jax" and local == "jax":
            return "jax.lax"
    if any(isinstance(n, cst.Name) and n.value == "lax" for n in walk(ctx.module)):
        raise _Refuse("`lax` is not imported and the name is taken")
    return None


def _pid_aliases(ctx: ModuleContext, kernel: cst.FunctionDef, env, rank: int) -> tuple[dict[int, str], set]:
    """`pid = pl.program_id(0)` (or `i, j = pl.program_id(0), pl.program_id(1)`) at the top of
    the kernel, its names bound nowhere else: those names become the loop indices and the
    statement goes."""
    bindings: dict[str, int] = {}
    for node in walk(kernel.body):
        target = None
        if isinstance(node, cst.AssignTarget):
            target = node.target
        elif isinstance(node, (cst.AugAssign, cst.AnnAssign, cst.For, cst.CompFor, cst.NamedExpr)):
            target = node.target
        elif isinstance(node, cst.AsName):
            target = node.name
        elif isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            bindings[node.name.value] = bindings.get(node.name.value, 0) + 1
        elif isinstance(node, cst.Param):
            bindings[node.name.value] = bindings.get(node.name.value, 0) + 1
        for name in _target_names(target) if target is not None else ():
            bindings[name] = bindings.get(name, 0) + 1
    aliases: dict[int, str] = {}
    stmts: set = set()
    for stmt in kernel.body.body:
        if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assign)):
            continue
        assign = stmt.body[0]
        if len(assign.targets) != 1:
            continue
        target, value = assign.targets[0].target, assign.value
        pairs = []
        if isinstance(target, cst.Name):
            pairs = [(target, value)]
        elif isinstance(target, (cst.Tuple, cst.List)) and isinstance(value, (cst.Tuple, cst.List)):
            if len(target.elements) == len(value.elements):
                pairs = [(t.value, v.value) for t, v in zip(target.elements, value.elements)]
        found = {}
        for t, v in pairs:
            if not (isinstance(t, cst.Name) and isinstance(v, cst.Call) and ctx.imports.is_(v.func, N.PROGRAM_ID) and v.args):
                break
            axis = env.static_int(v.args[0].value)
            if axis is None or not 0 <= axis < rank or axis in aliases or axis in found or bindings.get(t.value) != 1:
                break
            found[axis] = t.value
        else:
            if found and len(set(found.values())) == len(found):
                aliases.update(found)
                stmts.add(stmt)
    return aliases, stmts


def _fresh_names(ctx: ModuleContext, rank: int, aliases: dict[int, str]) -> list[tuple[str, str, str]]:
    taken = {n.value for n in walk(ctx.module) if isinstance(n, cst.Name)}

    def fresh(base: str) -> str:
        name, k = base, 1
        while name in taken:
            name = f"{base}_{k}"
            k += 1
        taken.add(name)
        return name

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


def _wrapped_body(ctx, kernel, env, pid_calls, np_calls, sizes, names, lax: str, dropped: set) -> cst.IndentedBlock:
    replace: dict[cst.Call, cst.BaseExpression] = {}
    for call in pid_calls:
        replace[call] = cst.Name(names[env.static_int(call.args[0].value)][1])
    for call in np_calls:
        size = cst.parse_expression(sizes[env.static_int(call.args[0].value)])
        atomic = isinstance(size, (cst.Integer, cst.Name, cst.Attribute, cst.Subscript, cst.Call))
        replace[call] = size if atomic else size.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    stmts = [s for s in kernel.body.body if s not in dropped]
    head: list[cst.BaseStatement] = []
    if stmts and _is_docstring(stmts[0]):
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


def _is_docstring(stmt: cst.BaseStatement) -> bool:
    return (
        isinstance(stmt, cst.SimpleStatementLine)
        and len(stmt.body) == 1
        and isinstance(stmt.body[0], cst.Expr)
        and isinstance(stmt.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )


def _drop_keyword(name: str):
    def edit(call: cst.Call) -> cst.Call:
        args = list(call.args)
        idx = next(i for i, a in enumerate(args) if a.keyword is not None and a.keyword.value == name)
        removed = args.pop(idx)
        if idx == len(args) and args:
            args[-1] = args[-1].with_changes(comma=removed.comma)
        return call.with_changes(args=args)

    return edit


def _add_lax_import(module: cst.Module) -> cst.Module:
    from libcst.codemod import CodemodContext
    from libcst.codemod.visitors import AddImportsVisitor

    context = CodemodContext()
    AddImportsVisitor.add_needed_import(context, "jax", "lax")
    return AddImportsVisitor(context).transform_module(module)


# -- call-site expressions, written inside the kernel -----------------------------------------------------
class _KernelSide:
    """`x.shape[0] // BS` at the call becomes `x_ref.shape[0] // BS` in the kernel.

    A name keeps its meaning when the kernel sees the same binding (module level, or a wrapper
    both sit in); a call-site local assigned once is inlined; a value bound with
    functools.partial becomes the kernel parameter it was bound to; an input's shape becomes its
    ref's shape. Anything else has no kernel-side form: None."""

    def __init__(self, ctx: ModuleContext, site: KernelSite, cs: CallSite, env) -> None:
        self.ctx = ctx
        self.site = site
        self.cs = cs
        self.env = env
        self.kernel = site.kernel
        self.kernel_chain = [site.kernel] + ctx.scope_chain(site.kernel)

    def __call__(self, expr: cst.BaseExpression, depth: int = 0, at: Optional[cst.CSTNode] = None) -> Optional[cst.BaseExpression]:
        """`at`: where `expr` is written (its names resolve from there); default the pallas_call."""
        at = at if at is not None else self.site.call
        if depth > 12:
            return None
        if isinstance(expr, cst.Integer):
            return expr
        if isinstance(expr, cst.Name):
            return self._name(expr, depth, at)
        if isinstance(expr, cst.Subscript):
            return self._shape(expr, depth, at)
        if isinstance(expr, cst.BinaryOperation):
            left, right = self(expr.left, depth + 1, at), self(expr.right, depth + 1, at)
            if left is None or right is None:
                return None
            return expr.with_changes(left=_paren(left, expr.left), right=_paren(right, expr.right))
        if isinstance(expr, cst.UnaryOperation):
            inner = self(expr.expression, depth + 1, at)
            return None if inner is None else expr.with_changes(expression=_paren(inner, expr.expression))
        if isinstance(expr, cst.Call) and not any(a.star for a in expr.args):
            func = expr.func
            known = self.ctx.imports.qualify(func) is not None or (
                isinstance(func, cst.Name) and func.value in ("min", "max", "int", "abs")
            )
            if not known or self._shadowed_in_kernel(_head(func)):
                return None
            args = []
            for a in expr.args:
                v = self(a.value, depth + 1, at)
                if v is None:
                    return None
                args.append(a.with_changes(value=v))
            return expr.with_changes(args=args)
        return None

    def _name(self, name: cst.Name, depth: int, at: cst.CSTNode) -> Optional[cst.BaseExpression]:
        value = name.value
        for param, bound in self.site.partial_kwargs.items():
            if isinstance(bound, cst.Name) and bound.value == value and not self._rebound_in_kernel(param):
                return cst.Name(param)
        for scope in self.ctx.scope_chain(at):
            if isinstance(scope, cst.Module):
                return None if self._shadowed_in_kernel(value) else name
            if not _binds(self.ctx, scope, value):
                continue
            if scope in self.kernel_chain and not self._shadowed_in_kernel(value, below=scope):
                return name  # a wrapper's local that the kernel closes over
            values = self.ctx.assignments(value, scope)
            params = _param_names(scope)
            if len(values) == 1 and value not in params:
                return self(values[0], depth + 1, values[0])
            return None
        return None

    def _shape(self, sub: cst.Subscript, depth: int, at: cst.CSTNode) -> Optional[cst.BaseExpression]:
        base = sub.value
        if not (isinstance(base, cst.Attribute) and base.attr.value == "shape" and isinstance(base.value, cst.Name)):
            return None
        for slot in self.cs.slots.values():
            if slot.kind == "in" and isinstance(slot.arg, cst.Name) and slot.arg.value == base.value.value:
                if self._rebound_in_kernel(slot.param):
                    return None
                return sub.with_changes(value=base.with_changes(value=cst.Name(slot.param)))
        inner = self._name(base.value, depth + 1, at)
        if inner is None or not isinstance(inner, cst.Name):
            return None
        return sub.with_changes(value=base.with_changes(value=inner))

    def _rebound_in_kernel(self, name: str) -> bool:
        return bool(self.ctx.assignments(name, self.kernel)) or _assigned_anywhere(self.kernel, name)

    def _shadowed_in_kernel(self, name: Optional[str], below: Optional[cst.CSTNode] = None) -> bool:
        """Bound in the kernel or in a function between the kernel and `below` (default: module)."""
        if name is None:
            return True
        for scope in self.kernel_chain:
            if scope is below or isinstance(scope, cst.Module):
                return False
            if _binds(self.ctx, scope, name):
                return True
        return False


def _binds(ctx: ModuleContext, scope, name: str) -> bool:
    if isinstance(scope, cst.Lambda):
        return name in {p.name.value for p in scope.params.params}
    if name in _param_names(scope):
        return True
    if ctx.assignments(name, scope) or name in ctx.local_defs(scope):
        return True
    return _assigned_anywhere(scope, name)


def _param_names(fn) -> set[str]:
    ps = fn.params
    names = {p.name.value for p in [*ps.posonly_params, *ps.params, *ps.kwonly_params]}
    if isinstance(ps.star_arg, cst.Param):
        names.add(ps.star_arg.name.value)
    if ps.star_kwarg is not None:
        names.add(ps.star_kwarg.name.value)
    return names


def _assigned_anywhere(fn, name: str) -> bool:
    """Any binding of `name` in fn's own scope: for targets, augmented assignment, with, import."""
    for node in walk(fn.body):
        target = None
        if isinstance(node, (cst.For, cst.CompFor)):
            target = node.target
        elif isinstance(node, cst.AugAssign):
            target = node.target
        elif isinstance(node, cst.AssignTarget):
            target = node.target
        elif isinstance(node, cst.AsName):
            target = node.name
        elif isinstance(node, cst.NamedExpr):
            target = node.target
        if target is not None and name in _target_names(target):
            return True
    return False




def _head(func: cst.BaseExpression) -> Optional[str]:
    while isinstance(func, cst.Attribute):
        func = func.value
    return func.value if isinstance(func, cst.Name) else None


def _paren(expr: cst.BaseExpression, original: cst.BaseExpression) -> cst.BaseExpression:
    """Parenthesise a substituted operand (an inlined `n // bs` inside `2 * n`)."""
    if isinstance(original, (cst.BinaryOperation, cst.UnaryOperation)):
        return expr  # rebuilt in place: same operator, same precedence
    if isinstance(expr, (cst.BinaryOperation, cst.UnaryOperation)) and not expr.lpar:
        return expr.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    return expr




def _is_zero(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Integer) and int(expr.evaluated_value) == 0
