"""Small helpers the codemods share: turning a failed precondition into a refusal and anchoring
outcomes on uses; for the expression-level codemods, which uses a planner owns, where a name is
bound and read, whether a value only ever feeds slice starts, and how to splice an expression
back into the tree with the parentheses it needs.
"""

from __future__ import annotations

from typing import Callable, Iterable, Optional

import libcst as cst
from libcst.metadata import Assignment, ClassScope, GlobalScope, Scope

from pallas_fix.core import names as N
from pallas_fix.analysis.context import ModuleContext, walk
from pallas_fix.analysis.discovery.kernel_entry import entry_problem
from pallas_fix.core.model import FixSafety, IndexUse, Origin
from pallas_fix.core.plans import FixPlan, Outcome, Refusal, Refuse, use_key
from pallas_fix.rewrite.text.libcst_scopes import for_target_names, scope_at, scopes_for
from pallas_fix.rewrite.callsite.spelling.operands import CallSiteError
from pallas_fix.rewrite.text.edits import apply_edits
from pallas_fix.rewrite.text.syntax import parenthesized
from pallas_fix.rules.registry import classify
from pallas_fix.analysis.loops.windows import window_of

# Integer operators under which a scalar stays a scalar integer (true division makes a float).
INT_OPS = (
    cst.Add,
    cst.Subtract,
    cst.Multiply,
    cst.FloorDivide,
    cst.Modulo,
    cst.Power,
    cst.LeftShift,
    cst.RightShift,
    cst.BitAnd,
    cst.BitOr,
    cst.BitXor,
)


def attempt(codemod: str, plan: Callable[..., Optional[Outcome]], *args) -> Optional[Outcome]:
    """`plan(*args)`, or the refusal it raised: a failed precondition (`Refuse`) or a call site
    pallas-fix cannot read (`CallSiteError`)."""
    try:
        return plan(*args)
    except (Refuse, CallSiteError) as exc:
        return Refusal(codemod, str(exc), getattr(exc, "waits_for", ()))


def per_use(groups: Iterable[tuple[object, list[IndexUse]]], plan: Callable[[object, list[IndexUse]], Outcome]) -> dict:
    """One outcome per group of uses (`plan(key, uses)`), anchored on every use of the group:
    the same object, so the engine applies it once."""
    out: dict = {}
    for key, uses in groups:
        outcome = plan(key, uses)
        for use in uses:
            out[use_key(use)] = outcome
    return out


def check_single_call(analysis, site, *, variants: bool = False) -> None:
    """The kernel is defined in this module and only this pallas_call runs it: a rewrite that
    changes both the kernel and the call would break any other call. `variants`: as entry_problem's."""
    if site is None or site.kernel is None:
        raise Refuse("the kernel is not defined in this module")
    if sum(1 for s in analysis.sites if s.kernel is site.kernel) > 1:
        raise Refuse(f"kernel `{site.kernel_name}` is used by more than one pallas_call")
    problem = entry_problem(analysis, site, variants=variants)  # a decorator, or another caller, also runs the body
    if problem is not None:
        raise Refuse(problem)


def reported_uses(analysis, code: str) -> list[IndexUse]:
    """The dynamic indices the rules file under `code`: a planner rewrites only what is reported."""
    out = []
    for use in analysis.uses:
        rule, _ = classify(use, window_of(use))
        if rule.code == code:
            out.append(use)
    return out


def start_planner(codemod: str, code: str, plan_use) -> Callable[..., dict]:
    """A planner for the indices reported under `code` (see `plan_each_use`)."""
    return lambda analysis: plan_each_use(analysis, codemod, code, plan_use)


def plan_each_use(analysis, codemod: str, code: str, plan_use) -> dict:
    """Outcomes for every index reported under `code`, one `plan_use(analysis, use)` each (a
    `Refuse` it raises becomes the use's refusal).

    `plan_use` returns (outcome, key): plans with the same key are the same edits (one load
    rewrite feeds several starts, one constant several accesses), so they become one plan that
    lists every index it fixes, and the engine applies it once."""
    out: dict = {}
    if analysis.ctx is None:
        return out
    shared: dict = {}
    for use in reported_uses(analysis, code):
        try:
            outcome, key = plan_use(analysis, use)
        except Refuse as exc:
            outcome, key = Refusal(codemod, str(exc)), frozenset()
        if isinstance(outcome, FixPlan) and key in shared:
            shared[key].uses.append(use)
            outcome = shared[key]
        elif isinstance(outcome, FixPlan):
            shared[key] = outcome
        out[use_key(use)] = outcome
    return out


class StartEdits:
    """The edits that fix one slice start, and what they change in words (for the plan's
    description); the expression-level codemods' walkers fill them in."""

    def __init__(self, analysis, use: IndexUse) -> None:
        self.analysis = analysis
        self.ctx: ModuleContext = analysis.ctx
        self.use = use
        self.edits: dict[cst.CSTNode, object] = {}
        self.changes: list[str] = []

    def plan(self, codemod: str, code: str, what: str) -> tuple[FixPlan, frozenset[int]]:
        """A safe plan applying the edits, keyed by the nodes it edits, described as
        "`code` line N: `what`: the changes"."""
        edits = dict(self.edits)

        def rewrite(module: cst.Module) -> cst.Module:
            new, _ = apply_edits(module, edits)  # type: ignore[arg-type]
            return new

        description = f"{code} line {line(self.ctx, self.use.subscript)}: {what}: " + "; ".join(self.changes)
        fix = FixPlan(codemod, FixSafety.SAFE, [self.use], description, rewrite, site=self.use.kernel_site)
        return fix, frozenset(id(n) for n in edits)

    def binding(self, name: cst.Name, what: str) -> cst.Assign:
        """The one `name = value` a read of `name` sees; refused otherwise (a parameter: `what`
        comes from a caller)."""
        assignment, stmt, why = single_binding(self.ctx, name)
        if stmt is None:
            if assignment is not None and isinstance(assignment.node, cst.Param):
                why = f"`{name.value}` is a parameter: {what} comes from a caller, which pallas-fix does not rewrite"
            raise Refuse(why)
        return stmt


def line(ctx: ModuleContext, node: cst.CSTNode) -> int:
    return ctx.span(node).line


def env_at(analysis, node: cst.CSTNode, fallback):
    """The detection environment of the function holding `node` (names resolve as they do there)."""
    envs = analysis.detection.envs if analysis.detection is not None else {}
    for anc in analysis.ctx.ancestors(node):
        if anc in envs:
            return envs[anc]
    return fallback


def single_binding(ctx: ModuleContext, name: cst.Name) -> tuple[Optional[Assignment], Optional[cst.Assign], str]:
    """The one plain `name = value` assignment a read of `name` sees, or the reason there is none."""
    scope = scope_at(ctx, name)
    if scope is None:
        return None, None, f"pallas-fix cannot resolve `{name.value}`"
    found = [a for a in scope[name.value] if isinstance(a, Assignment)]
    if len(found) != 1:
        where = "is assigned more than once" if len(found) > 1 else "is not assigned in the kernel"
        return None, None, f"`{name.value}` {where}"
    assignment = found[0]
    target = assignment.node
    holder = ctx.parent(target)
    stmt = ctx.parent(holder) if isinstance(holder, cst.AssignTarget) else None
    if not (isinstance(stmt, cst.Assign) and len(stmt.targets) == 1 and stmt.targets[0].target is target):
        return assignment, None, f"`{name.value}` is not bound by a plain `{name.value} = ...` assignment"
    if isinstance(assignment.scope, (GlobalScope, ClassScope)):
        return assignment, None, f"`{name.value}` is bound outside the kernel"
    return assignment, stmt, ""


def reads(assignment: Assignment) -> list[cst.Name]:
    return [a.node for a in assignment.references if isinstance(a.node, cst.Name)]


def same_binding(ctx: ModuleContext, name: str, here: cst.CSTNode, there: cst.CSTNode) -> bool:
    """`name` means the same binding at `here` as at `there` (for moving an expression)."""
    found = scopes_for(ctx, here, there)  # one analysis for both, so the bindings' ids compare
    a, b = found.get(here), found.get(there)
    if a is None or b is None:
        return False
    return set(map(id, a[name])) == set(map(id, b[name])) and len(a[name]) == 1


# -- what a value flows into ---------------------------------------------------------------------
def _is_start_arg(ctx: ModuleContext, arg: cst.Arg, call: cst.Call) -> bool:
    if not ctx.imports.is_(call.func, N.DS | N.SLICE):
        return False
    if arg.keyword is not None:
        return arg.keyword.value == "start"
    positional = [a for a in call.args if a.keyword is None]
    return bool(positional) and positional[0] is arg


def flows_only_into_starts(ctx: ModuleContext, name: cst.Name, operand_ok, depth: int = 0) -> Optional[str]:
    """None when every read of the value bound to `name` (the assignment target) ends up as a slice
    start, through integer arithmetic (`third * BS + 1`), `pl.multiple_of` and plain re-binding
    (`off = third * BS`); otherwise the first other use, in words. `operand_ok(expr)` judges the
    other operands met on the way (they must keep the arithmetic scalar and integer)."""
    if depth > 6:
        return f"`{name.value}` flows through too many names"
    scope = scope_at(ctx, name)
    assignment = next((a for a in (scope[name.value] if scope else ()) if isinstance(a, Assignment) and a.node is name), None)
    if assignment is None:
        return f"pallas-fix cannot follow the uses of `{name.value}`"
    for ref in reads(assignment):
        cur: cst.CSTNode = ref
        while True:
            parent = ctx.parent(cur)
            if isinstance(parent, cst.BinaryOperation) and isinstance(parent.operator, INT_OPS):
                other = parent.right if parent.left is cur else parent.left
                if not operand_ok(other):
                    return _use_words(ctx, ref, parent, f"is combined with `{ctx.code(other)}`")
                cur = parent
                continue
            if isinstance(parent, cst.UnaryOperation) and isinstance(parent.operator, (cst.Minus, cst.Plus)):
                cur = parent
                continue
            if isinstance(parent, cst.Arg):
                call = ctx.parent(parent)
                if isinstance(call, cst.Call) and _is_start_arg(ctx, parent, call):
                    break
                if (
                    isinstance(call, cst.Call)
                    and ctx.imports.is_(call.func, N.MULTIPLE_OF)
                    and call.args
                    and call.args[0] is parent
                ):
                    cur = call
                    continue
            if isinstance(parent, cst.Assign) and parent.value is cur:
                targets = parent.targets
                if len(targets) == 1 and isinstance(targets[0].target, cst.Name):
                    why = flows_only_into_starts(ctx, targets[0].target, operand_ok, depth + 1)
                    if why is not None:
                        return why
                    break
            return _use_words(ctx, ref, parent, "is used as a value")
    return None


def _use_words(ctx: ModuleContext, ref: cst.Name, at: Optional[cst.CSTNode], how: str) -> str:
    shown = ctx.code(at if at is not None and not isinstance(at, cst.BaseStatement) else ref).strip()
    stmt = next((a for a in ctx.ancestors(ref) if isinstance(a, cst.BaseSmallStatement)), None)
    if stmt is not None and len(ctx.code(stmt).strip()) <= 70:
        shown = ctx.code(stmt).strip()
    return f"`{ref.value}` {how} on line {line(ctx, ref)} (`{shown}`)"


# -- integers ----------------------------------------------------------------------------------
def provably_int(env, expr: cst.BaseExpression, size_names: frozenset[str] = frozenset(), depth: int = 0) -> bool:
    """A Python int at trace time: literals, shapes, integer arithmetic on them, and names bound to
    such values (module constants, partial-bound or default kernel parameters, wrapper parameters
    annotated `int`). `size_names`: names the kernel passes as a `pl.ds` size, which Pallas only
    accepts as ints."""
    if depth > 12:
        return False
    if isinstance(expr, cst.Integer):
        return True
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, (cst.Minus, cst.Plus, cst.BitInvert)):
        return provably_int(env, expr.expression, size_names, depth + 1)
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, INT_OPS):
        return provably_int(env, expr.left, size_names, depth + 1) and provably_int(env, expr.right, size_names, depth + 1)
    if isinstance(expr, cst.Subscript) and isinstance(expr.value, cst.Attribute) and expr.value.attr.value == "shape":
        return all(isinstance(e.slice, cst.Index) and provably_int(env, e.slice.value, size_names, depth + 1) for e in expr.slice)
    if isinstance(expr, cst.Attribute) and expr.attr.value in ("ndim", "size", "itemsize"):
        return True
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name) and expr.func.value in ("len", "int"):
        return True
    if isinstance(expr, cst.Name):
        if expr.value in size_names:
            return True
        value = env.static_value_expr(expr.value)
        if value is not None:
            return provably_int(env, value, size_names, depth + 1)
        return _int_annotated_param(env.ctx, expr)
    return False


def _int_annotated_param(ctx: ModuleContext, name: cst.Name) -> bool:
    """A wrapper parameter declared `bs: int` (a closure of a nested kernel: the author's type), or
    the variable of a Python `for ... in range(...)` loop unrolled at trace time."""
    scope = scope_at(ctx, name)
    found = list(scope[name.value]) if scope is not None else []
    if len(found) != 1:
        return False
    node = getattr(found[0], "node", None)  # builtins (`len`, `True`) have no defining node
    if node is None:
        return False
    if isinstance(node, cst.Param):
        ann = node.annotation
        return ann is not None and isinstance(ann.annotation, cst.Name) and ann.annotation.value == "int"
    loop = ctx.parent(node)
    return (
        isinstance(loop, cst.For)
        and loop.target is node
        and isinstance(loop.iter, cst.Call)
        and isinstance(loop.iter.func, cst.Name)
        and loop.iter.func.value == "range"
        and not any(isinstance(a, Assignment) for a in scope["range"])  # type: ignore[index]
    )


def range_loop(ctx: ModuleContext, name: cst.Name) -> Optional[cst.For]:
    """The `for name in range(...)` (positional arguments only) that is the only binding of
    `name`, if it is."""
    if name.value not in for_target_names(ctx):
        return None
    scope = scope_at(ctx, name)
    found = list(scope[name.value]) if scope is not None else []
    if len(found) != 1 or not hasattr(found[0], "node"):
        return None
    loop = ctx.parent(found[0].node)
    if not (isinstance(loop, cst.For) and loop.target is found[0].node and isinstance(loop.iter, cst.Call)):
        return None
    call = loop.iter
    if not (isinstance(call.func, cst.Name) and call.func.value == "range" and 1 <= len(call.args) <= 3):
        return None
    return loop if all(a.keyword is None and a.star == "" for a in call.args) else None


def ds_size_names(ctx: ModuleContext, root: cst.CSTNode) -> frozenset[str]:
    out = set()
    for node in walk(root):
        if isinstance(node, cst.Call) and ctx.imports.is_(node.func, N.DS | N.SLICE):
            positional = [a for a in node.args if a.keyword is None]
            for a in node.args:
                if (a.keyword is not None and a.keyword.value == "size") or (len(positional) > 1 and a is positional[1]):
                    if isinstance(a.value, cst.Name):
                        out.add(a.value.value)
    return frozenset(out)


def scalar_int_traced(env, expr: cst.BaseExpression) -> bool:
    """A traced int32 scalar pallas-fix can name: a loop index over Python bounds or program_id."""
    val = env.value(expr)
    if not val.dynamic or val.vtype != "int":
        return False
    if val.origin is Origin.PROGRAM_ID:
        return True
    if val.origin is Origin.LOOP and val.loop is not None:
        loop = val.loop
        bounds = [b for b in (loop.lower, loop.upper, loop.step) if b is not None]
        return all(not env.value(b).dynamic for b in bounds)
    return False


# -- splicing ----------------------------------------------------------------------------------
def code_of(node: cst.CSTNode) -> str:
    """Source text of a node that is not (or no longer) part of the analysed module."""
    return cst.Module([]).code_for_node(node)


def fit_into(parent: Optional[cst.CSTNode], expr: cst.BaseExpression) -> cst.BaseExpression:
    """`expr` as it must be written where its parent is an operator or an attribute access."""
    if isinstance(parent, (cst.BinaryOperation, cst.UnaryOperation, cst.Attribute, cst.Subscript, cst.Call, cst.Await)):
        return parenthesized(expr)
    return expr
