"""Preconditions on a loop's shape before its body can run once per grid step: how the loop
statement uses its result, where the body is defined, which kernel-local helpers only it calls,
that the body neither returns early nor (for R1) reads its carry, and what the iterations and
the code before the loop write (asked of the effects model, analysis.effects.model)."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from pallas_fix.analysis.binders import is_label
from pallas_fix.analysis.context import ModuleContext, walk
from pallas_fix.analysis.effects.model import Write, loop_body_writes, statement_writes, write_words
from pallas_fix.analysis.loops.loops import returns_constant
from pallas_fix.core import names as N
from pallas_fix.core.names import call_arg
from pallas_fix.core.model import LoopInfo
from pallas_fix.core.plans import Refuse
from pallas_fix.rewrite.loops.result_use import reduction_statement_ok
from pallas_fix.rewrite.text.scopes import bindings, param_names, walk_pruned, walk_scope
from pallas_fix.rewrite.text.statements import body_statements
from pallas_fix.rewrite.loops.threaded_carry import threaded_carry_name, threaded_return


def check_loop_statement(kernel: cst.FunctionDef, loop: LoopInfo, stmts: list, *, reduction: bool) -> Optional[cst.FunctionDef]:
    """Refuse a fori_loop whose result is used in a way the rewrite cannot keep (R1: any use;
    R2: anything but plain names) or whose body def is shared or defined late. Returns the
    body's def when it is a statement of its own."""
    if loop.kind != "fori_loop":
        return None
    statement, body = loop.statement, loop.body
    if reduction:  # R2 evaluates a larger expression over the result in `_finalize` (loop_result_use)
        if not (_is_result_statement(statement, loop.call) or reduction_statement_ok(statement, loop.call)):
            raise Refuse("the loop's result is used inside a larger expression; assign it to names first")
    elif not _is_bare_loop_statement(statement, loop.call):
        raise Refuse("the loop's result is used; only a loop run for its effects can become a grid axis")
    if not isinstance(body, cst.FunctionDef):
        return None
    if body not in stmts:
        raise Refuse("the loop body is not defined directly in the kernel")
    if stmts.index(body) > stmts.index(statement):
        raise Refuse("the loop body is defined after the loop")
    refs = [n for n in walk(kernel) if isinstance(n, cst.Name) and n.value == body.name.value and n is not body.name]
    if len(refs) != 1:
        raise Refuse(f"the loop body `{body.name.value}` is used elsewhere in the kernel")
    return body


def _loop_call_target(stmt: cst.BaseStatement, call: cst.Call) -> tuple[bool, Optional[cst.BaseExpression]]:
    """(True, None) for `call` alone on its line, (True, target) for `target = call`, else (False, None)."""
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return False, None
    small = stmt.body[0]
    if isinstance(small, cst.Expr):
        return small.value is call, None
    if isinstance(small, cst.Assign) and small.value is call and len(small.targets) == 1:
        return True, small.targets[0].target
    return False, None


def _is_result_statement(stmt: cst.BaseStatement, call: cst.Call) -> bool:
    """`fori_loop(...)`, `acc = fori_loop(...)` or `m, l = fori_loop(...)`."""
    ok, t = _loop_call_target(stmt, call)
    if t is None or isinstance(t, cst.Name):
        return ok
    return isinstance(t, (cst.Tuple, cst.List)) and all(isinstance(e.value, cst.Name) for e in t.elements)


def _is_bare_loop_statement(stmt: cst.BaseStatement, call: cst.Call) -> bool:
    """`fori_loop(...)` or `_ = fori_loop(...)`: run for its effects only."""
    ok, t = _loop_call_target(stmt, call)
    return ok and (t is None or (isinstance(t, cst.Name) and t.value == "_"))


def loop_helpers(ctx: ModuleContext, kernel: cst.FunctionDef, body, touches_refs) -> list[cst.CSTNode]:
    """Kernel-local defs called from the loop body and from nowhere else. A def that touches no
    ref (`touches_refs`: a pure function of values, `resize(x, n)`) may be called elsewhere too:
    the lift changes nothing in it, and it stays where it is."""
    local = {s.name.value: s for s in body_statements(kernel) if isinstance(s, cst.FunctionDef) and s is not body}
    found: list[cst.CSTNode] = []
    frontier = [body]
    while frontier:
        fn = frontier.pop()
        for node in walk(fn):
            if isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value in local:
                helper = local[node.func.value]
                if helper not in found:
                    found.append(helper)
                    frontier.append(helper)
    found = [h for h in found if touches_refs(h) or not _called_outside(ctx, kernel, body, h, found)]
    for helper in found:
        for node in walk(kernel):
            if isinstance(node, cst.Name) and node.value == helper.name.value and node is not helper.name:
                if not any(a is body or a in found for a in ctx.ancestors(node)):
                    raise Refuse(f"helper `{helper.name.value}` is also used outside the loop")
    return found


def _called_outside(ctx: ModuleContext, kernel: cst.FunctionDef, body, helper, found: list) -> bool:
    return any(isinstance(n, cst.Name) and n.value == helper.name.value and n is not helper.name
               and not any(a is body or a in found for a in ctx.ancestors(n)) for n in walk(kernel))


def check_signature(ctx: ModuleContext, loop: LoopInfo) -> None:
    """The body must be `(index)` or `(index, carry)`, passed as itself, and keep its index.

    Inlining replaces the parameters by the grid index and the carry: a parameter with a default
    (`def body(i, c, factor=3.0)`) or one bound by `functools.partial(body, factor=4.0)` would be
    dropped (a NameError, or the default instead of the bound value); an index the body rebinds
    (`i = i + 1`) no longer is the grid index where its windows use it."""
    body = loop.body
    if loop.kind == "fori_loop":
        passed = call_arg(loop.call, 2, "body_fun")
        if isinstance(passed, cst.Call):
            raise Refuse(f"the loop body is passed as `{ctx.code(passed)}`; inlining it would drop the bound arguments")
    declared = param_names(body)
    plain = [p.name.value for p in body.params.params]
    if declared != set(plain) or len(plain) > 2 or any(p.default is not None for p in body.params.params):
        raise Refuse(
            f"the loop body takes parameters besides its index and carry ({', '.join(sorted(declared - set(plain[:2])))}); "
            "inlining it would drop them"
        )
    if loop.index_name in _own_bindings(body):
        raise Refuse(f"the loop body rebinds its index `{loop.index_name}`; its windows would not follow the grid axis")


def check_hygiene(ctx: ModuleContext, kernel: cst.FunctionDef, loop: LoopInfo, carry: Optional[str], removed: list) -> None:
    """Inlining moves the body's own bindings, and `index = pl.program_id(k)`, into the kernel's
    scope: none of those names may already mean something there (a kernel-level `s` a closure
    reads, a kernel-level `i` a helper uses), or the move would change what it means. The carry
    is the codemod's own business (R2 turns it into scratch)."""
    moved = {loop.index_name} | _own_bindings(loop.body)
    moved.discard(carry)
    clash = sorted(moved & param_names(kernel))
    skip = {id(s) for s in removed}
    for stmt in body_statements(kernel):
        if id(stmt) in skip:
            continue
        clash += [name for name in sorted(moved) if _mentions(ctx, stmt, name)]
    if clash:
        raise Refuse(
            f"inlining the loop body would bind `{clash[0]}` in the kernel, where that name already means something "
            "else; rename it in the body"
        )


def _mentions(ctx: ModuleContext, stmt: cst.CSTNode, name: str) -> bool:
    """`stmt` reads or binds the kernel-level `name` (a nested function or lambda that binds its own
    `name` is not looked into)."""

    def own(n: cst.CSTNode) -> bool:
        return isinstance(n, (cst.FunctionDef, cst.Lambda)) and (name in param_names(n) or name in _own_bindings(n))

    if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)) and stmt.name.value == name:
        return True
    for node in walk_pruned(stmt, own):
        if isinstance(node, cst.Name) and node.value == name and _is_variable(ctx, node):
            return True
    return False


def _is_variable(ctx: ModuleContext, node: cst.Name) -> bool:
    """A name that refers to a variable: not an attribute's name, a keyword argument or a parameter."""
    parent = ctx.parent(node)
    return not is_label(parent, node) and not isinstance(parent, cst.Param)


def _own_bindings(fn: cst.FunctionDef | cst.Lambda) -> set[str]:
    """The names a function's body binds in its own scope (its parameters aside)."""
    stmts = body_statements(fn) if isinstance(fn, cst.FunctionDef) else []
    return {name for stmt in stmts for name in bindings(stmt, nested=False)}


def check_body(ctx: ModuleContext, body, carry: Optional[str], carry_used_ok: bool = False) -> None:
    """No early return from the body; for R1 (`carry_used_ok` False) no read of the carry, except
    handing it to a nested loop that hands it back (`return lax.fori_loop(..., carry)`)."""
    threaded = None if carry_used_ok else threaded_return(ctx, body, carry)
    passed = threaded_carry_name(ctx, threaded) if threaded is not None else None
    if isinstance(body, cst.FunctionDef):
        stmts = body_statements(body)
        for n, stmt in enumerate(stmts):
            if isinstance(stmt, cst.FunctionDef):
                continue  # a nested def's returns are its own
            for node in walk_scope(stmt, classes=True):
                last = n == len(stmts) - 1 and node is stmt.body[-1] if isinstance(stmt, cst.SimpleStatementLine) else False
                if isinstance(node, cst.Return) and not (last and _ends_body(node, carry, carry_used_ok, threaded)):
                    raise Refuse("the loop body returns early")
    if carry is None or carry_used_ok:
        return
    rebinds = lambda fn: any(p.name.value == carry for p in fn.params.params)  # noqa: E731
    returned, stored = False, False
    for node in walk_pruned(body.body, lambda n: isinstance(n, (cst.FunctionDef, cst.Lambda)) and rebinds(n)):
        if isinstance(node, cst.Name) and node.value == carry:
            if node is passed:
                continue
            parent = ctx.parent(node)
            if isinstance(parent, cst.Return) and _enclosing_def(ctx, node) is body:
                returned = True
                continue
            if isinstance(body, cst.Lambda) and node is body.body:
                continue
            if isinstance(parent, cst.Param):
                continue
            if _is_store(ctx, node):
                stored = True  # `_, l, acc = ...`: a new value under the carry's name, not a read of it
                continue
            raise Refuse(f"the loop body uses its carry `{carry}`")
    if stored and returned:
        raise Refuse(f"the loop body binds its carry's name `{carry}` again and returns it, so the carry changes")


def _is_store(ctx: ModuleContext, node: cst.Name) -> bool:
    """`node` is only written: an assignment or `for` target, bare or inside a target tuple."""
    child, parent = node, ctx.parent(node)
    while isinstance(parent, (cst.Element, cst.StarredElement, cst.Tuple, cst.List)):
        child, parent = parent, ctx.parent(parent)
    if isinstance(parent, cst.AssignTarget):
        return True
    return isinstance(parent, (cst.For, cst.CompFor)) and parent.target is child


def _enclosing_def(ctx: ModuleContext, node: cst.CSTNode):
    for anc in ctx.ancestors(node):
        if isinstance(anc, (cst.FunctionDef, cst.Lambda)):
            return anc
    return None


def _ends_body(ret: cst.Return, carry: Optional[str], carry_used_ok: bool, threaded: Optional[cst.Return]) -> bool:
    """A last `return` the inlining can drop (or, for a threaded carry, keep as a statement)."""
    return carry_used_ok or ret is threaded or _returns_carry(ret, carry)


def _returns_carry(ret: cst.Return, carry: Optional[str]) -> bool:
    """`return carry`, or a constant a loop whose result nobody reads hands back
    (analysis.loops.loops: such a loop carries nothing)."""
    return returns_constant(ret) or isinstance(ret.value, cst.Name) and ret.value.value == carry


def check_loop_writes(analysis, region) -> None:
    """Every ref write an iteration performs, through any call, must be one the planner sees as
    an access of the loop's own functions (the body and the helpers only it calls), where it is
    checked against the loop index: a window of the index, or refused as a write at the same
    place on every iteration. A write through another helper, a library store or copy, or a
    call pallas-fix cannot see into would make the iterations depend on each other, and as a
    parallel grid axis they would race on the ref."""
    ctx = analysis.ctx
    seen = {id(n) for fn in region.functions for n in walk(fn) if isinstance(n, cst.Subscript)}
    for write in loop_body_writes(analysis, region.site, region.loop):
        if _seen(write, seen):
            continue
        line = ctx.span(write.entry).line
        if write.opaque:
            raise Refuse(
                f"the loop body may write `{write.ref}`: it hands it to {write_words(ctx, write)} (line {line}); "
                "the iterations may not be independent"
            )
        raise Refuse(
            f"the loop body writes `{write.ref}` through {write_words(ctx, write)} (line {line}), not at a window "
            "of the loop index; the iterations would not be independent"
        )


def _seen(write: Write, subscripts: set[int]) -> bool:
    """Written by an assignment in the loop's functions, or through a view taken there."""
    if write.view is not None and id(write.view) in subscripts:
        return True
    return write.how in ("assign", "augassign") and id(write.node) in subscripts


def check_writes_before_loop(analysis, region) -> None:
    """R1: the statements before the loop will run on every grid step, so none may write a ref,
    directly or through any call (a kernel-local `bump()`, a module helper, a callback)."""
    ctx = analysis.ctx
    skip = {id(s) for s in region.bound_stmts}
    statements = [s for s in region.before if id(s) not in skip]
    for write in statement_writes(analysis, region.site, statements):
        line = ctx.span(write.entry).line
        if write.opaque:
            raise Refuse(
                f"the kernel may write a ref before the loop: it hands `{write.ref}` to {write_words(ctx, write)} "
                f"(line {line}); after lifting that would run on every grid step"
            )
        raise Refuse(
            f"the kernel writes a ref before the loop: `{write.ref}`, through {write_words(ctx, write)} (line {line}); "
            "after lifting it would run on every grid step"
        )


_CORE_PRNG = frozenset(
    f"{N.TPU}.{f}" for f in ("prng_random_bits", "stateful_bits", "stateful_uniform", "stateful_normal", "stateful_bernoulli")
)
_SEED = frozenset({N.TPU + ".prng_seed"})


def check_no_core_prng_draws(ctx: ModuleContext, functions: list) -> None:
    """A loop that draws from the TPU core's PRNG stream (`pltpu.prng_random_bits` after one
    `pltpu.prng_seed`) gets new bits each iteration as the stream advances; as grid steps, each
    step runs the kernel's seeding again and draws the first bits of the stream, the same in every
    step. No interpreter shows it (TPU interpret mode draws zeros), so the lift is refused, unless
    the loop seeds the stream itself every iteration (`pltpu.prng_seed(seed, k)`): then each step
    draws what its iteration drew."""
    calls = [n for fn in functions for n in walk(fn) if isinstance(n, cst.Call)]
    if any(ctx.imports.is_(n.func, _SEED) for n in calls):
        return
    for node in calls:
        if ctx.imports.is_(node.func, _CORE_PRNG):
            raise Refuse(
                f"the loop draws random bits from the TPU core's PRNG stream (`{ctx.code(node.func)}`, line "
                f"{ctx.span(node).line}), which advances iteration by iteration; as grid steps, each step would "
                "seed the stream again and draw the same bits (no interpreter shows it: TPU interpret mode draws "
                "zeros); seed it in the loop body from the program ids and the loop index "
                "(`pltpu.prng_seed(seed, pl.program_id(0), k)`), then the loop can be lifted"
            )
