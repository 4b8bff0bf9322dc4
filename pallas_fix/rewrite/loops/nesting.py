"""Loops that do not stand at the top level of their kernel.

One such place can become a grid axis: directly in a `@pl.when(cond)` body that is itself a
top-level statement (`when_container`). Each grid step then tests `cond` and runs its block under
it, as the original ran every iteration under it; an output block a step leaves unwritten is as
undefined (or as aliased) as the original's unwritten output. `cond` is evaluated once per step
instead of once: the usual checks refuse a condition that reads a lifted ref or anything the loop
writes. Everywhere else the block around the loop says what the grid would lose
(`refuse_nested`); a nested loop becomes a top-level statement once its outer loop is lifted."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from pallas_fix.analysis.context import ModuleContext, walk
from pallas_fix.core.model import LoopInfo
from pallas_fix.core.plans import Refuse, use_key
from pallas_fix.rewrite.text.syntax import code


def refuse_nested(ctx: ModuleContext, kernel: cst.FunctionDef, loop: LoopInfo, loops: dict, uses: list) -> Refuse:
    """The refusal for a loop statement inside another block of the kernel, naming that block
    (`loops`: every loop body of the module, analysis.detection.loops). Inside another loop it
    waits for the outer loop's fix (the indices it drives, among `uses`): once the outer loop is
    a grid axis, this one stands at the top level."""
    block = _enclosing_block(ctx, kernel, loop.statement)
    line = ctx.span(block).line if block is not None else ctx.span(loop.call).line
    if isinstance(block, cst.FunctionDef):
        cond = _when_condition(ctx, block)
        if cond is not None:
            return Refuse(
                f"the loop runs under `pl.when({code(cond)})` (line {line}); pallas-fix lifts such a loop only when "
                "it carries nothing and stands directly in a `pl.when` body at the top level of the kernel, so that "
                "each grid step tests the condition before its block"
            )
        outer = loops.get(block)
        if outer is not None:
            return Refuse(
                f"the loop is nested in the loop over `{outer.index_name}` (line {line}), which pallas-fix cannot lift first; "
                "the inner loop lifts once the outer loop is a grid axis",
                waits_for=tuple(use_key(u) for u in uses if u.provenance.loop is outer),
            )
        return Refuse(f"the loop sits inside `{block.name.value}` (line {line}), not at the top level of the kernel")
    if isinstance(block, cst.For):
        return Refuse(
            f"the loop sits inside a Python `for` (line {line}), which unrolls into one loop per iteration; "
            "pallas-fix lifts one loop into one grid axis: write one loop whose body handles every output"
        )
    if isinstance(block, cst.If):
        return Refuse(
            f"the loop sits inside `if {code(block.test)}:` (line {line}); the grid cannot depend on which branch "
            "runs: lift the loop in each variant of the kernel, or move the `if` into the loop body"
        )
    return Refuse("the loop is not a top-level statement of the kernel (it sits inside another block)")


def _enclosing_block(ctx: ModuleContext, kernel: cst.FunctionDef, stmt: Optional[cst.CSTNode]) -> Optional[cst.CSTNode]:
    """The innermost statement with a body (def, for, if, while, with) holding `stmt`."""
    if stmt is None:
        return None
    for anc in ctx.ancestors(stmt):
        if anc is kernel:
            return None
        if isinstance(anc, (cst.FunctionDef, cst.For, cst.If, cst.While, cst.With, cst.Try)):
            return anc
    return None


def _when_condition(ctx: ModuleContext, fn: cst.FunctionDef) -> Optional[cst.BaseExpression]:
    for dec in fn.decorators:
        d = dec.decorator
        if isinstance(d, cst.Call) and (ctx.imports.qualify(d.func) or "").endswith(".when") and d.args:
            return d.args[0].value
    return None


def when_container(ctx: ModuleContext, kernel: cst.FunctionDef, stmt: cst.CSTNode) -> Optional[cst.FunctionDef]:
    """The `@pl.when(cond) def _():` that holds `stmt` directly and is a top-level statement of the
    kernel, run only by its decorator (no parameters, its name used nowhere else); else None."""
    block = _enclosing_block(ctx, kernel, stmt)
    if not isinstance(block, cst.FunctionDef) or ctx.parent(ctx.parent(block)) is not kernel:
        return None
    if len(block.decorators) != 1 or _when_condition(ctx, block) is None:
        return None
    if block.params.params or block.params.kwonly_params or block.params.posonly_params:
        return None
    if not isinstance(block.body, cst.IndentedBlock) or stmt not in block.body.body:
        return None
    name = block.name.value
    if any(isinstance(n, cst.Name) and n.value == name and n is not block.name for n in walk(kernel)):
        return None
    return block


def static_branch(ctx: ModuleContext, env, kernel: cst.FunctionDef, stmt: cst.CSTNode) -> Optional[cst.IndentedBlock]:
    """The branch that runs of a top-level `if` whose test is a static bool (a module constant,
    a literal bound with functools.partial or given as a default), when it holds `stmt` directly."""
    block = _enclosing_block(ctx, kernel, stmt)
    if not isinstance(block, cst.If) or ctx.parent(ctx.parent(block)) is not kernel or env is None:
        return None
    value = _static_bool(env, block.test, 0)
    if value is None:
        return None
    branch = block.body if value else (block.orelse.body if isinstance(block.orelse, cst.Else) else None)
    if not isinstance(branch, cst.IndentedBlock) or stmt not in branch.body:
        return None
    return branch


def _static_bool(env, test: cst.BaseExpression, depth: int) -> Optional[bool]:
    if depth > 4:
        return None
    if isinstance(test, cst.Name) and test.value in ("True", "False"):
        return test.value == "True"
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        inner = _static_bool(env, test.expression, depth + 1)
        return None if inner is None else not inner
    if isinstance(test, cst.Name):
        value = env.static_value_expr(test.value)
        return _static_bool(env, value, depth + 1) if value is not None else None
    return None


def check_other_branch(ctx: ModuleContext, branch: Optional[cst.IndentedBlock], lifted: set[str]) -> None:
    """The branch that does not run must not use a ref that becomes a block: were the static
    test changed, it would run on blocks, under a grid meant for the other branch."""
    if branch is None:
        return
    holder = ctx.parent(branch)
    node = holder if isinstance(holder, cst.If) else ctx.parent(holder)
    assert isinstance(node, cst.If)
    other = node.orelse.body if node.body is branch and isinstance(node.orelse, cst.Else) else (node.body if node.body is not branch else None)
    used = sorted({n.value for n in walk(other) if isinstance(n, cst.Name) and n.value in lifted}) if other is not None else []
    if used:
        raise Refuse(
            f"the loop runs in the branch of `if {code(node.test)}:` (line {ctx.span(node).line}) that its static test "
            f"picks, and the other branch uses `{used[0]}`, which becomes a block: were the test changed, it would "
            "run on blocks; lift each variant of the kernel separately"
        )


def strip_block_blank_lines(block: cst.CSTNode) -> cst.CSTNode:
    """A branch whose first statements were removed should not start with an empty line."""
    assert isinstance(block, cst.IndentedBlock)
    if not block.body or not hasattr(block.body[0], "leading_lines"):
        return block
    first = block.body[0]
    lines = list(first.leading_lines)  # type: ignore[attr-defined]
    while lines and lines[0].comment is None:
        lines.pop(0)
    return block.with_changes(body=[first.with_changes(leading_lines=lines), *block.body[1:]])
