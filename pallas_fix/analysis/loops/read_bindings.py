"""Which binding of a name a read sees, where the text decides it (analysis.loops.symbolic reads
names through these): the last plain statement binding it before the read in straight-line code
(`reaching_binding`), or the statement that settles it whatever branch inside bound it
(`settled_binding`); a read in the value of the assignment that binds it again sees the binding
before (bindings.read_before_targets)."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from pallas_fix.analysis.context import ModuleContext, Scope, walk
from pallas_fix.analysis.values.bindings import Unpack, binding_count, declared_elsewhere, read_before_targets


def reaching_binding(ctx: ModuleContext, scope: Scope, binds: list, at: cst.CSTNode) -> Optional[int]:
    """Which of a name's several bindings `at` sees, when straight-line code decides it: every
    binding is a plain statement of the scope's own body, so the last one before the statement
    holding `at` wins (0: none before it, the parameter). None when a branch or loop binds it,
    or `at` is not in the scope's body (a node the rewrite built: read where its call is)."""
    if ctx.arm_pin is not None:  # one kernel variant planned: a name bound once per arm is its arm's
        mine = ctx.arm_pin.reaching(ctx, binds, at)
        if mine is not None:
            return mine + 1
    last = last_binding(ctx, scope, binds, at, simple=True)
    return None if last is None else last + 1


def settled_binding(ctx: ModuleContext, scope: Scope, name: cst.Name, binds: list, at: cst.CSTNode, param: bool = False) -> Optional[int]:
    """The statement of the scope's body that last binds `name` before the statement holding
    the read (the name itself where it is written; `at` for a name built for the call site),
    when no binding shares that statement: reads with the same answer see one value, whatever
    branch or loop inside that statement bound it, in a function's own body. None otherwise
    (module names: `exec`, `globals()` or another module may rebind them), for a name any
    `nonlocal` or `global` names (a called function could rebind it). For a parameter, -1: no
    statement binds it before the read."""
    if isinstance(scope, cst.Module):
        return None  # `exec("bn = 64")`, `globals()[...]`, any module's code may rebind a global between reads
    if name.value in declared_elsewhere(ctx):
        return None
    read = name if ctx.parent(name) is not None else at
    inner = ctx.scope_of(read)
    if inner is scope:
        last = last_binding(ctx, scope, binds, read, simple=False)
    else:  # a closure reads the name when it runs: where the scope calls it, if all its calls agree
        calls = _closure_calls(ctx, scope, inner)
        found = {last_binding(ctx, scope, binds, call, simple=False) for call in calls or ()}
        last = found.pop() if len(found) == 1 else None
    return None if last is None or (last < 0 and not param) else last


def _closure_calls(ctx: ModuleContext, scope: Scope, inner: Scope) -> Optional[list[cst.Call]]:
    """The calls of `inner`, a def nested in `scope` (axlearn's `def call_kernel(*, kernel, grid,
    ...)` in its wrapper), when calling it in `scope`'s own code is all the scope does with it
    (not passed, returned or decorated, not rebound); None otherwise."""
    if not isinstance(inner, cst.FunctionDef) or inner.decorators or ctx.scope_of(inner) is not scope:
        return None
    calls = []
    for node in walk(scope):
        if not isinstance(node, cst.Name) or node.value != inner.name.value or node is inner.name:
            continue
        call = ctx.parent(node)
        if not (isinstance(call, cst.Call) and call.func is node and ctx.scope_of(call) is scope):
            return None
        calls.append(call)
    if binding_count(ctx, scope, inner.name.value) != 1:
        return None
    return calls


def last_binding(ctx: ModuleContext, scope: Scope, binds: list, read: cst.CSTNode, simple: bool) -> Optional[int]:
    """The index in the scope's body of the last statement binding a name before the statement
    holding `read` (-1: none before it). None when the text does not fix it: `read` or a
    binding outside the body's statements, a binding in the statement holding `read`, or (with
    `simple`) a binding inside a compound statement, a branch or a loop, or `read` in a generator
    expression (it runs when consumed)."""
    if any(isinstance(a, cst.GeneratorExp) for a in ctx.ancestors(read)):
        return None  # `(call() for _ in r)` runs when consumed, perhaps after a later binding
    stmts = ctx.body_statements(scope)
    position = {id(st): n for n, st in enumerate(stmts)}
    holder = next((position[id(a)] for a in (read, *ctx.ancestors(read)) if id(a) in position), None)
    tops = []
    for _how, node in binds:
        node = node.value if isinstance(node, Unpack) else node  # `a, b = ...`: the assigned value
        top = next((a for a in (node, *ctx.ancestors(node)) if id(a) in position), None)
        if top is None or (simple and not isinstance(top, cst.SimpleStatementLine)):
            return None
        tops.append(position[id(top)])
    if holder is None or (holder in tops and not read_before_targets(ctx, stmts[holder], read, binds)):
        return None
    return max((n for n in tops if n < holder), default=-1)
