"""R5 — static unroll of a short loop (`--target gpu-interpret` only; PF101/PF102 and friends).

A `lax.fori_loop` / `pl.loop` whose bounds are Python ints runs a known number of times; written
as a Python `for` loop, its index is a Python int at trace time and every slice start built from it
is static. Blocks stay whole-array, the form GPU interpret mode runs (a lifted grid with
BlockSpecs does not run there, see PF202).

Before:
    def body(j, carry):
        o_ref[:, pl.ds(j * BN, BN)] = x_ref[:, pl.ds(j * BN, BN)] * 3.0
        return carry
    lax.fori_loop(0, 4, body, 0)

After (inline form, when the body def is used by this loop only and inlining rebinds no name
the surrounding function uses):
    for j in range(4):
        o_ref[:, pl.ds(j * BN, BN)] = x_ref[:, pl.ds(j * BN, BN)] * 3.0

After (call form, always available): `acc = init` / `for j in range(4): acc = body(j, acc)`.

Only when the trip count is computable from literals and module constants and at most
`unroll_limit` (default 16, `--unroll-limit`): unrolling multiplies trace size. The unrolled index
is a Python int, which is not the weakly typed int32 the traced index was (`i * 1103515245`
wraps only in int32, `1.0 / i` raises at 0, `i.astype` does not exist): a read of it stays a
Python int only where that provably means the same (non-negative int32 index arithmetic landing
in a slice start or subscript), every other read becomes `jnp.asarray(i)`
(`pallas_fix.rewrite.loops.unrolled_index`). A window into a ref stays static only where it provably
fits the ref as every pallas_call shapes it (the traced loop clamped a start past the end; a static
one is rejected at trace time); an unroll that would leave no window static is refused with the
sizes to assert. Refused when the body binds the index name again. Under
the default target this codemod offers nothing; lifting the loop into a grid axis (R1) is the fix
there.
"""

from __future__ import annotations

from typing import Optional

import libcst as cst

from pallas_fix.analysis.context import ModuleContext, walk
from pallas_fix.analysis.discovery.kernel_entry import entry_problem
from pallas_fix.core import names as N
from pallas_fix.core.model import FixSafety, IndexUse, LoopInfo
from pallas_fix.core.names import call_arg as _arg
from pallas_fix.core.plans import FixPlan, Recipe, Refuse
from pallas_fix.rewrite.text import imports
from pallas_fix.rewrite.proofs.static_windows import static_window_fits
from pallas_fix.rewrite.common import code_of
from pallas_fix.rewrite.text.edits import apply_edits
from pallas_fix.rewrite.loops.regions import loop_planner
from pallas_fix.rewrite.text.scopes import bindings, fresh_namer, param_names, walk_scope
from pallas_fix.rewrite.loops.unrolled_index import IndexTyping, index_typing
from pallas_fix.rules.gpu_interpret.hazards import TARGET, targeted

NAME = "static-unroll"

# Decorators that run the function they decorate at once (so a closure over the loop index reads
# the index of the current iteration).
_RUN_NOW = N.PL_WHEN | N.PL_LOOP | frozenset({N.PALLAS + ".run_scoped"})


def planner(analysis) -> dict:
    """One outcome per loop, only under `--target gpu-interpret`."""
    return loop_planner(NAME, _plan)(analysis) if targeted(analysis) else {}


def _plan(analysis, loop: LoopInfo, uses: list[IndexUse]) -> FixPlan:
    ctx: ModuleContext = analysis.ctx
    where = loop.body if loop.kind == "pl.loop" else loop.call
    scope = ctx.enclosing_function(where)
    env = analysis.detection.envs.get(scope) if scope is not None else None
    if env is None:
        raise Refuse("the loop is not inside a function pallas-fix analysed")
    head = "pl.loop" if loop.kind == "pl.loop" else "lax.fori_loop"
    lo, hi = env.static_int(loop.lower), env.static_int(loop.upper)
    step = env.static_int(loop.step) if loop.step is not None else 1
    if lo is None or hi is None or step is None:
        bounds = [b for b in (loop.lower, loop.upper, loop.step) if b is not None]
        call = f"{head}({ctx.code(loop.lower)}, {ctx.code(loop.upper)})"
        traced = [b for b in bounds if env.value(b).dynamic]
        if traced:
            raise Refuse(f"the bound `{ctx.code(traced[0])}` of {call} is traced, not a Python int")
        raise Refuse(
            f"the trip count of {call} is only known at trace time, so pallas-fix cannot check it "
            f"against the unroll limit {analysis.config.unroll_limit}"
        )
    if step <= 0:
        raise Refuse(f"the step {step} of {head} is not positive")
    trips = len(range(lo, hi, step))
    limit = analysis.config.unroll_limit
    if trips > limit:
        raise Refuse(f"{head} runs {trips} iterations, more than the unroll limit {limit} (--unroll-limit)")
    typing = index_typing(ctx, env, loop, range(lo, hi, step), _ref_windows(analysis, scope))
    statement = loop.statement
    block = ctx.parent(statement) if statement is not None else None
    if not isinstance(block, cst.IndentedBlock):
        raise Refuse("the loop is not a statement of its own inside a function body")
    rng = _range_text(ctx, loop)
    if loop.kind == "pl.loop":
        edits, form = _pl_loop_edits(ctx, loop, block, rng, typing)
    else:
        edits, form = _fori_edits(ctx, loop, block, rng, typing)
    if typing.unplaced and not typing.kept:
        raise Refuse(
            f"unrolled, no slice would be static: pallas-fix cannot prove the windows ({', '.join(typing.unplaced)}) stay "
            "inside their refs, and a traced start past the end is clamped where a static one is rejected; state the "
            "sizes before the pallas_call (`assert x.shape[0] == ...`)"
        )

    def rewrite(module: cst.Module) -> cst.Module:
        new, _ = apply_edits(module, dict(edits))
        return imports.add_imports(new, [typing.numpy.add if typing.numpy else None])

    description = (f"static-unroll ({form} form): {head}({ctx.code(loop.lower)}, {ctx.code(loop.upper)}) becomes"
                   f" `for ... in {rng}` ({trips} iterations){typing.describe()}")
    return FixPlan(NAME, FixSafety.SAFE, uses, description, rewrite, site=uses[0].kernel_site)


def _ref_windows(analysis, scope: cst.FunctionDef):
    """Whether a static window into a ref of the kernel holding `scope` provably lies inside the
    ref, at every pallas_call that runs the kernel (a traced start past the end was clamped; a
    static one is rejected at trace time). None for names that are not refs; False for a ref
    pallas-fix cannot place (a helper's parameter, a name an inner function binds again)."""
    ctx: ModuleContext = analysis.ctx
    chain: list[cst.FunctionDef] = []
    fn: Optional[cst.FunctionDef] = scope
    while fn is not None and not any(s.kernel is fn for s in analysis.sites):
        chain.append(fn)
        fn = ctx.enclosing_function(fn)
    kernel = fn
    unknown = set().union(*(param_names(f) | set(bindings(f.body, nested=False)) for f in chain))
    refs = param_names(kernel) - unknown if kernel is not None else set()
    sites = [s for s in analysis.sites if s.kernel is kernel] if kernel is not None else []
    blocked = not sites or any(entry_problem(analysis, s) for s in sites)

    def fits(name: str, dim: int, end: int) -> Optional[bool]:
        if name in unknown and name not in refs:
            return False
        if name not in refs:
            return None
        if blocked or dim < 0:
            return False
        return all(static_window_fits(analysis, s, name, dim, end) for s in sites)

    return fits


# -- preconditions --------------------------------------------------------------------------------------
def _range_text(ctx: ModuleContext, loop: LoopInfo) -> str:
    lower, upper = ctx.code(loop.lower), ctx.code(loop.upper)
    if loop.step is not None:
        return f"range({lower}, {upper}, {ctx.code(loop.step)})"
    if isinstance(loop.lower, cst.Integer) and int(loop.lower.evaluated_value) == 0:
        return f"range({upper})"
    return f"range({lower}, {upper})"


def _inline_problem(ctx: ModuleContext, loop: LoopInfo, block: cst.IndentedBlock, carry: Optional[str]) -> Optional[str]:
    """Why the body cannot be pasted in place of the loop (None: it can)."""
    body = loop.body
    if not isinstance(body, cst.FunctionDef) or not isinstance(body.body, cst.IndentedBlock):
        return "the body is not a def"
    if loop.kind == "fori_loop":
        if body.decorators:
            return "the body is decorated"
        if body not in block.body or block.body.index(body) > block.body.index(loop.statement):
            return "the body is not defined just before the loop"
    scope = ctx.scope_of(body)
    others = [n for n in walk(scope) if isinstance(n, cst.Name) and not _within(ctx, n, body)]
    if loop.kind == "fori_loop" and sum(1 for n in others if n.value == body.name.value) != 1:
        return f"`{body.name.value}` is used elsewhere"
    if loop.kind == "pl.loop" and any(n.value == body.name.value for n in others):
        return f"`{body.name.value}` is used elsewhere"
    stmts = list(body.body.body)
    for n, stmt in enumerate(stmts):
        for node in walk_scope(stmt, classes=False):
            if isinstance(node, cst.Return):
                last = n == len(stmts) - 1 and _is_return_of(stmt, carry)
                if not last:
                    return "the body returns early"
            if isinstance(node, (cst.Global, cst.Nonlocal, cst.Yield)):
                return f"the body uses `{type(node).__name__.lower()}`"
    if carry is not None and any(
        isinstance(n, cst.Name) and n.value == carry and not _is_return_of(ctx.statement_of(n), carry)
        for n in walk(body.body)
    ):
        return f"the body reads its carry `{carry}`"
    for node in walk(body.body):
        if isinstance(node, cst.FunctionDef) and not (node.decorators and all(_runs_now(ctx, d) for d in node.decorators)):
            return f"the body defines `{node.name.value}`, which could outlive its iteration"
        if isinstance(node, cst.Lambda) and not isinstance(ctx.parent(node), cst.Arg):
            return "the body stores a lambda, which could outlive its iteration"
    bound = (param_names(body) | set(bindings(body.body, nested=True))) - ({carry} if carry else set())
    clash = sorted(bound & {n.value for n in others})
    if clash:
        return f"inlining would rebind `{clash[0]}` in the enclosing function"
    return None


def _runs_now(ctx: ModuleContext, dec: cst.Decorator) -> bool:
    target = dec.decorator.func if isinstance(dec.decorator, cst.Call) else dec.decorator
    return ctx.imports.is_(target, _RUN_NOW)


def _within(ctx: ModuleContext, node: cst.CSTNode, container: cst.CSTNode) -> bool:
    return node is container or any(a is container for a in ctx.ancestors(node))


def _is_return_of(stmt: Optional[cst.CSTNode], carry: Optional[str]) -> bool:
    if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Return)):
        return False
    value = stmt.body[0].value
    return isinstance(value, cst.Name) and value.value == carry


# -- edits ----------------------------------------------------------------------------------------------------
def _fori_edits(ctx: ModuleContext, loop: LoopInfo, block: cst.IndentedBlock, rng: str,
                typing: IndexTyping) -> tuple[dict, str]:
    stmt = loop.statement
    assert isinstance(stmt, cst.SimpleStatementLine)
    if len(stmt.body) != 1:
        raise Refuse("the loop shares its line with other statements")
    small = stmt.body[0]
    call = loop.call
    if isinstance(small, cst.Expr) and small.value is call:
        kind = "expr"
    elif isinstance(small, cst.Assign) and small.value is call and len(small.targets) == 1:
        kind = "assign"
    elif isinstance(small, cst.AugAssign) and small.value is call:
        kind = "augassign"
    elif isinstance(small, cst.Return) and small.value is call:
        kind = "return"
    else:
        raise Refuse(f"the loop's result is used inside a larger expression (`{ctx.code(small).strip()}`)")
    body = loop.body
    init = loop.init if loop.init is not None else cst.Name("None")
    params = [p.name.value for p in body.params.params]
    # Inline only a plain (index, carry) def: the result is discarded and the body never reads
    # its carry, so the carry's value cannot matter.
    if kind == "expr" and len(params) == 2 and _inline_problem(ctx, loop, block, params[1]) is None:
        return _inline_edits(ctx, loop, stmt, rng, typing), "inline"
    return _call_edits(ctx, loop, stmt, small, kind, rng, init, typing), "call"


def _has_return(fn) -> bool:
    return isinstance(fn, cst.FunctionDef) and any(isinstance(n, cst.Return) for s in fn.body.body for n in walk_scope(s, classes=False))


def _inline_edits(ctx: ModuleContext, loop: LoopInfo, stmt: cst.BaseStatement, rng: str, typing: IndexTyping) -> dict:
    body: cst.FunctionDef = loop.body  # type: ignore[assignment]
    inner = [typing.applied(s) for s in body.body.body]
    if inner and _is_return_of(body.body.body[-1], _carry_param(body)):
        inner = inner[:-1]
    if not inner:
        inner = [cst.SimpleStatementLine([cst.Pass()])]
    leading = list(stmt.leading_lines)
    block = ctx.parent(stmt)
    if body is not stmt and isinstance(block, cst.IndentedBlock):
        # The def's place when it sits right before the loop (so the kernel does not start with
        # the blank line that separated them); its comments either way.
        stmts = list(block.body)
        if stmts.index(body) + 1 == stmts.index(stmt):
            leading = list(body.leading_lines) + [l for l in stmt.leading_lines if l.comment is not None]
        else:
            leading += [l for l in body.leading_lines if l.comment is not None]
    for_stmt = cst.parse_statement(f"for {loop.index_name} in {rng}:\n    pass\n")
    for_stmt = for_stmt.with_changes(body=body.body.with_changes(body=inner), leading_lines=leading)
    edits: dict = {stmt: lambda _n: for_stmt}
    if body is not stmt:
        edits[body] = lambda _n: cst.RemovalSentinel.REMOVE
    return edits


def _carry_param(fn: cst.FunctionDef) -> Optional[str]:
    params = [p.name.value for p in fn.params.params]
    return params[1] if len(params) > 1 else None


def _call_edits(ctx, loop: LoopInfo, stmt, small, kind: str, rng: str, init: cst.BaseExpression,
                typing: IndexTyping) -> dict:
    body_expr = _arg(loop.call, 2, "body_fun")
    assert body_expr is not None
    edits = _retyped_body(ctx, loop, body_expr, typing)
    scope = ctx.scope_of(stmt)
    taken = {n.value for n in walk(scope) if isinstance(n, cst.Name)}
    taken |= {n.value for n in walk(ctx.module) if isinstance(n, cst.Name)}
    local = {n.value for n in walk(scope) if isinstance(n, cst.Name) and not _within(ctx, n, loop.body)}

    fresh = fresh_namer(taken)
    index = loop.index_name if loop.index_name not in local else fresh("i")
    lines: list[str] = []
    func = ctx.code(body_expr)
    if isinstance(body_expr, cst.Lambda):
        func = fresh("body")
        lines.append(f"{func} = {code_of(typing.applied(body_expr))}")
    elif not isinstance(body_expr, (cst.Name, cst.Attribute)):
        func = f"({func})"
    init_text = ctx.code(init)
    simple_init = isinstance(init, (cst.Name, cst.Integer, cst.Float))
    if kind == "expr" and not loop.carries and simple_init:
        lines.append(f"for {index} in {rng}:\n    {func}({index}, {init_text})")
    else:
        target = small.targets[0].target if kind == "assign" else None
        if isinstance(target, cst.Name) and target.value != index and not _closed_over(ctx, scope, target.value):
            carry = target.value
            lines += [f"{carry} = {init_text}", f"for {index} in {rng}:\n    {carry} = {func}({index}, {carry})"]
        else:
            carry = fresh("carry")
            lines += [f"{carry} = {init_text}", f"for {index} in {rng}:\n    {carry} = {func}({index}, {carry})"]
            if kind == "assign":
                lines.append(f"{ctx.code(target)} = {carry}")
            elif kind == "augassign":
                lines.append(f"{ctx.code(small.target)} {ctx.code(small.operator).strip()} {carry}")
            elif kind == "return":
                lines.append(f"return {carry}")
    new = [cst.parse_statement(text + "\n") for text in lines]
    new[0] = new[0].with_changes(leading_lines=stmt.leading_lines)
    edits[stmt] = lambda _n: cst.FlattenSentinel(new)
    return edits


def _retyped_body(ctx: ModuleContext, loop: LoopInfo, body_expr: cst.BaseExpression, typing: IndexTyping) -> dict:
    """The index casts inside a body def that stays where it is (a lambda is rewritten in place
    of the loop instead). The def must serve only this loop: a cast would change what another
    caller's Python-int argument means."""
    if not typing.edits or isinstance(body_expr, cst.Lambda):
        return {}
    body = loop.body
    if not isinstance(body, cst.FunctionDef) or not isinstance(body_expr, cst.Name):
        raise Refuse("the loop's index needs int32 casts inside a body pallas-fix does not see defined here")
    scope = ctx.scope_of(body)
    if sum(1 for n in walk(scope) if isinstance(n, cst.Name) and n.value == body.name.value and n is not body.name) != 1:
        raise Refuse(f"the loop's index needs int32 casts inside `{body.name.value}`, which is also used elsewhere")
    return dict(typing.edits)


def _closed_over(ctx: ModuleContext, scope, name: str) -> bool:
    """Does some function inside `scope` read `name` from it? Then the loop's result name cannot
    double as the running carry: that function (the body, or a helper the body calls) would see
    the carry instead of the old value. A function that binds `name` itself has its own."""
    for node in walk(scope):
        if node is scope or not isinstance(node, (cst.FunctionDef, cst.Lambda)):
            continue
        if isinstance(node, cst.Lambda):
            if name in {p.name.value for p in node.params.params}:
                continue
        elif name in param_names(node) | set(bindings(node.body, nested=False)):
            continue
        if any(isinstance(n, cst.Name) and n.value == name for n in walk(node.body)):
            return True
    return False


def _pl_loop_edits(ctx: ModuleContext, loop: LoopInfo, block: cst.IndentedBlock, rng: str,
                   typing: IndexTyping) -> tuple[dict, str]:
    fn: cst.FunctionDef = loop.body  # type: ignore[assignment]
    if loop.carries:
        raise Refuse("the pl.loop carries a value (init_carry)")
    if len(fn.params.params) != 1:
        raise Refuse("the pl.loop body does not take exactly the index")
    if len(fn.decorators) != 1:
        raise Refuse("the pl.loop body has other decorators")
    if _inline_problem(ctx, loop, block, None) is None and not _has_return(fn):
        return _inline_edits(ctx, loop, fn, rng, typing), "inline"
    scope = ctx.scope_of(fn)
    if any(isinstance(n, cst.Name) and n.value == fn.name.value and n is not fn.name for n in walk(scope)):
        raise Refuse(f"`{fn.name.value}` (what pl.loop returned) is used elsewhere")
    index = fresh_index(ctx, fn, scope)
    plain = typing.applied(fn).with_changes(decorators=[])
    call = cst.parse_statement(f"for {index} in {rng}:\n    {fn.name.value}({index})\n")
    return {fn: lambda _n: cst.FlattenSentinel([plain, call])}, "call"


def fresh_index(ctx: ModuleContext, fn: cst.FunctionDef, scope) -> str:
    local = {n.value for n in walk(scope) if isinstance(n, cst.Name) and not _within(ctx, n, fn)}
    return fresh_namer(local)("i")


RECIPE = Recipe(
    NAME, frozenset({"PF101", "PF102"}), planner, command="StaticUnroll", target=TARGET,
    description="Unroll short fori_loop / pl.loop loops with Python-int bounds (GPU interpret mode; R5).",
)
