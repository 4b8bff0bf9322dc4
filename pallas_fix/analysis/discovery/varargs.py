"""Which ref each name a kernel binds from its `*refs` parameter is.

`def kernel(*refs): x_ref, w_ref, o_ref = refs` (or `x_ref, *rest = refs`, `*in_refs, o_ref =
refs`, `o_ref = refs[-1]`, `def kernel(x_ref, *rest)`) names the refs pallas_call passes through
the varargs. The call site fixes how many there are (its operands, outputs and scratch shapes),
so each name is one position in the kernel's ref list, and a planner can treat it as it treats a
ref parameter. The bindings are read as facts, resolved once the count is known:

- a binding is a kernel-level statement, or one directly in an arm of a kernel-level `if` on a
  static value (`if has_bias: b_ref, o_ref = refs` / `else: (o_ref,) = refs`, the usual spelling
  of optional operands). An arm whose unpacking or index does not fit the count cannot run (it
  raises when traced), so the count picks the arms that do;
- `ins, outs = refs[:n_in], refs[n_in:]` cuts the list at a count, and `w_ref = ins[1] if n_in > 1
  else None` binds a ref where a test on it holds: both resolved only once the count is known
  (`n_in=len(args)` at the call: rewrite.callsite.operand_group_refs; star_facts.StarFacts.at_sizes);
- `sems[k % n]` given to a DMA as its semaphore (`*sems` scratch) names no operand and is skipped;
- anything else that reads `refs` (a loop over it, a helper given it, a traced `if`, a nested
  `if`) leaves the mapping unknown and is refused with what to write instead.
"""

from __future__ import annotations

from typing import Optional

import libcst as cst

from pallas_fix.analysis.values.bindings import scope_bindings
from pallas_fix.analysis.discovery.dma_calls import semaphore_pick
from pallas_fix.analysis.discovery.forwarded_refs import constant_index, forwarded_names, sized_read, unnamed_problem
from pallas_fix.analysis.context import ModuleContext, walk
from pallas_fix.analysis.discovery.star_facts import Arm, Run, StarFacts, VarargsError, star_names
from pallas_fix.core.model import KernelSite


def star_facts(ctx: ModuleContext, kernel: cst.FunctionDef, static_test) -> Optional[StarFacts]:
    """The facts of `kernel`'s `*refs` (None when it has no varargs); `static_test(expr)` says
    whether an `if` test is a static Python value. Raises VarargsError for a read of the list
    that is neither unpacking, a constant index nor `len(...)`."""
    star = kernel.params.star_arg
    if not isinstance(star, cst.Param):
        return None
    facts = StarFacts(star.name.value)
    lists = {star.name.value: Run()}  # names standing for runs of the star list
    pending = [star.name.value]
    while pending:
        name = pending.pop()
        for read in _reads(kernel, name):
            _read_fact(ctx, kernel, facts, read, lists[name], static_test, lists, pending)
    return facts


def _reads(kernel: cst.FunctionDef, name: str) -> list[cst.Name]:
    return [n for n in walk(kernel.body) if isinstance(n, cst.Name) and n.value == name]


def _read_fact(ctx, kernel, facts: StarFacts, read: cst.Name, run: Run, static_test, lists, pending) -> None:
    parent = ctx.parent(read)
    if isinstance(parent, cst.Arg) and isinstance(ctx.parent(parent), cst.Call):
        call = ctx.parent(parent)
        if isinstance(call.func, cst.Name) and call.func.value == "len" and len(call.args) == 1:
            return  # `len(refs)`: a Python int, the same before and after
    if (isinstance(parent, cst.If) and parent.test is read) or _identity_test(parent):
        return  # `if residual_refs:`, `refs is not None`: static (the arms' bindings are read as facts)
    if id(read) in facts.targets:
        return  # where the sub-list name itself is bound (`x_ref, *rest = refs`); any other binding reads as a use
    if isinstance(parent, cst.Assign) and parent.value is read and len(parent.targets) == 1:
        arm = _arm(ctx, kernel, parent, static_test, facts)
        _unpack(facts, arm, parent.targets[0].target, run, parent, lists, pending)
        return
    if _pop_fact(ctx, kernel, facts, read, run):
        return
    if isinstance(parent, cst.For) and parent.iter is read and isinstance(parent.target, cst.Name) and run != Run():
        facts.loops.append((parent.target.value, run, parent))  # a Python loop: unrolled when traced, one ref per pass
        facts.targets.add(id(parent.target))
        return
    if semaphore_pick(ctx, parent, read):
        return  # `sems[k % n]` as a DMA's `sem`: a semaphore, never an operand a plan blocks
    if forwarded := forwarded_names(ctx, kernel, read, VarargsError):  # `inner(idx, q_ref, *refs)`: the callee names them
        facts.forwards.extend((name, run, k, ctx.parent(ctx.parent(read))) for k, (name, _fn) in enumerate(forwarded))
        return
    if sized_read(ctx, parent, read):
        return facts.sized.append(parent)  # `refs[0].shape`: the item's metadata
    if isinstance(parent, cst.Subscript) and parent.value is read:
        index = constant_index(parent)
        bound = _bound_to(ctx, parent)
        if index is not None and bound is not None:
            target, stmt = bound
            facts.binds.append((_arm(ctx, kernel, stmt, static_test, facts), target.value, run, index))
            facts.targets.add(id(target))
            return
        if _split_fact(ctx, kernel, facts, parent, run, lists, pending) or _guarded_fact(ctx, kernel, facts, parent, run, static_test):
            return
    raise VarargsError(
        f"`{ctx.code(ctx.statement_of(read) or read).strip()}` reads `{read.value}` (line {ctx.span(read).line}); "
        "pallas-fix maps `*refs` to operands only through kernel-level unpacking (`x_ref, o_ref = refs`, "
        "`x_ref, *rest = refs`), constant indices (`o_ref = refs[-1]`), also in the arms of an `if` on a static value, "
        "pops (`b_ref = rest.pop(0) if has_b else None`), a loop over a starred name (`for h_ref in h_refs:`) and a "
        "cut at a count named alone (`ins, outs = refs[:n_in], refs[n_in:]`)"
    )


def _split_fact(ctx, kernel, facts: StarFacts, sub: cst.Subscript, run: Run, lists, pending) -> bool:
    """`ins = refs[:n_in]` / `outs = refs[n_in:]` (also `ins, outs = refs[:n_in], refs[n_in:]`), a
    kernel-level statement slicing the whole list at a name: a run whose bounds need that count."""
    count, head = _split_at(sub)
    bound = _bound_to(ctx, sub)
    if count is None or bound is None or run != Run() or _arm(ctx, kernel, bound[1], lambda _t: True, facts) is not None:
        return False
    target = bound[0]
    if target.value in lists:
        raise VarargsError(f"`{target.value}` is bound twice from `*refs`")
    facts.targets.add(id(target))
    lists[target.value] = Run(split=count, head=head)
    pending.append(target.value)
    return True


def _split_at(sub: cst.Subscript) -> tuple[Optional[str], bool]:
    """(`n`, True) for `refs[:n]`, (`n`, False) for `refs[n:]`, `n` a plain name; (None, False) otherwise."""
    if len(sub.slice) != 1 or not isinstance(sub.slice[0].slice, cst.Slice):
        return None, False
    cut = sub.slice[0].slice
    if cut.step is not None:
        return None, False
    if cut.lower is None and isinstance(cut.upper, cst.Name):
        return cut.upper.value, True
    if cut.upper is None and isinstance(cut.lower, cst.Name):
        return cut.lower.value, False
    return None, False


def _guarded_fact(ctx, kernel, facts: StarFacts, sub: cst.Subscript, run: Run, static_test) -> bool:
    """`w_ref = ins[1] if n_in > 1 else None`: a ref only where a static test holds."""
    index = constant_index(sub)
    choice = ctx.parent(sub)
    if index is None or not (isinstance(choice, cst.IfExp) and choice.body is sub and _is_none(choice.orelse)):
        return False
    bound = _bound_to(ctx, choice)
    if bound is None or not static_test(choice.test):
        return False
    target, stmt = bound
    facts.guarded.append((_arm(ctx, kernel, stmt, static_test, facts), target.value, run, index, choice.test))
    facts.targets.add(id(target))
    return True


def _is_none(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Name) and node.value == "None"


def _pop_fact(ctx, kernel, facts: StarFacts, read: cst.Name, run: Run) -> bool:
    """`name = rest.pop(0)` or `name = rest.pop(0) if flag else None`, a kernel-level statement:
    recorded as a pop (its position depends on which earlier pops run)."""
    attr = ctx.parent(read)
    call = ctx.parent(attr) if isinstance(attr, cst.Attribute) and attr.value is read and attr.attr.value == "pop" else None
    if not (isinstance(call, cst.Call) and call.func is attr and len(call.args) == 1 and _is_zero_arg(call.args[0])):
        return False
    holder, test = ctx.parent(call), None
    if isinstance(holder, cst.IfExp) and holder.body is call:
        holder, test = ctx.parent(holder), holder.test
        value = holder.value if isinstance(holder, cst.Assign) else None
        if not isinstance(value, cst.IfExp) or value.body is not call:
            return False
    elif not (isinstance(holder, cst.Assign) and holder.value is call):
        return False
    target = holder.targets[0].target if len(holder.targets) == 1 else None
    if not isinstance(target, cst.Name) or _arm(ctx, kernel, holder, lambda _t: True, facts) is not None:
        return False
    facts.pops.append((target.value, run, test, holder))
    facts.targets.add(id(target))
    return True


def _is_zero_arg(arg: cst.Arg) -> bool:
    return arg.keyword is None and not arg.star and isinstance(arg.value, cst.Integer) and arg.value.evaluated_value == 0


def _identity_test(node) -> bool:
    """`refs is None` / `refs is not None`: a tuple is never None."""
    return isinstance(node, cst.Comparison) and all(isinstance(c.operator, (cst.Is, cst.IsNot)) for c in node.comparisons)


def _bound_to(ctx, value: cst.BaseExpression) -> Optional[tuple[cst.Name, cst.Assign]]:
    """The name bound to exactly `value`: `o_ref = value`, or its place in `a, b = value, c`."""
    holder = ctx.parent(value)
    if isinstance(holder, cst.Assign) and holder.value is value and len(holder.targets) == 1:
        target = holder.targets[0].target
        return (target, holder) if isinstance(target, cst.Name) else None
    tup = ctx.parent(holder) if isinstance(holder, cst.Element) else None
    stmt = ctx.parent(tup) if isinstance(tup, cst.Tuple) else None
    if not (isinstance(stmt, cst.Assign) and stmt.value is tup and len(stmt.targets) == 1):
        return None
    target = stmt.targets[0].target
    if not isinstance(target, (cst.Tuple, cst.List)) or len(target.elements) != len(tup.elements):
        return None
    k = next(k for k, e in enumerate(tup.elements) if e is holder)
    el = target.elements[k]
    return (el.value, stmt) if isinstance(el, cst.Element) and isinstance(el.value, cst.Name) else None


def _in_target(ctx, name: cst.Name) -> bool:
    for anc in ctx.ancestors(name):
        if isinstance(anc, cst.AssignTarget):
            return True
        if not isinstance(anc, (cst.BaseElement, cst.Tuple, cst.List)):
            return False
    return False


def _unpack(facts: StarFacts, arm: Arm, target, run: Run, stmt, lists, pending) -> None:
    """`a, *rest, c = run`: a name per item, a run for the starred one, and the length it needs."""
    if not isinstance(target, (cst.Tuple, cst.List)):
        raise VarargsError(
            f"`{facts.star}` is bound whole to another name; unpack it (`x_ref, o_ref = {facts.star}`) so each ref has its own name"
        )
    items = [e for e in target.elements]
    stars = [k for k, e in enumerate(items) if isinstance(e, cst.StarredElement)]
    facts.unpacks.append((arm, run, len(items), bool(stars), stmt))
    for k, el in enumerate(items):
        value = el.value
        if not isinstance(value, cst.Name):
            raise VarargsError("a nested pattern unpacks `*refs`; unpack it into plain names")
        facts.targets.add(id(value))
        if isinstance(el, cst.StarredElement):
            after = len(items) - k - 1
            sub = Run(run.start + k, run.end - after, run.split, run.head)  # still cut at the same count
            if value.value in lists:
                raise VarargsError(f"`{value.value}` is bound twice from `*refs`")
            lists[value.value] = sub
            pending.append(value.value)
        elif stars and k > stars[0]:
            facts.binds.append((arm, value.value, run, k - len(items)))
        else:
            facts.binds.append((arm, value.value, run, k))


def _arm(ctx: ModuleContext, kernel, stmt: cst.CSTNode, static_test, facts: StarFacts) -> Arm:
    """Which arm of which kernel-level `if` holds the binding statement `stmt`."""
    line = ctx.parent(stmt)
    block = ctx.parent(line) if line is not None else None
    owner = ctx.parent(block) if block is not None else None
    if owner is kernel:
        return None
    if isinstance(owner, cst.Else):
        owner, which = ctx.parent(owner), "orelse"
    else:
        which = "body"
    if isinstance(owner, cst.If) and ctx.parent(ctx.parent(owner)) is kernel and isinstance(ctx.parent(owner), cst.IndentedBlock):
        if not static_test(owner.test):
            raise VarargsError(
                f"`{facts.star}` is unpacked under `if {ctx.code(owner.test).strip()}:`, a traced value, so which refs the "
                "names stand for is not known when the kernel is traced; branch on a static Python value (a "
                "functools.partial keyword) or unpack before the `if`"
            )
        return owner, which
    raise VarargsError(
        f"`{facts.star}` is unpacked inside a nested block (line {ctx.span(stmt).line}); unpack it at the kernel's top "
        "level, or directly in the arms of a kernel-level `if` on a static value (not `elif`)"
    )


def star_ref_names(site: KernelSite, env, leading: int, total: Optional[int], *, forwarded: bool = False,
                   at_least: Optional[int] = None) -> list[Optional[str]]:
    """The names the kernel binds from its `*refs` for each item of the list, when the kernel
    receives `total` refs (None: the call site does not say) of which `leading` are named
    parameters before the varargs. `env` is the kernel's provenance environment. `forwarded`: also
    names refs forwarded into a callee and allows `refs[0].shape` (to read specs, not to rewrite)."""
    facts = checked_star_facts(site, env, forwarded=forwarded)
    if total is None and forwarded and not (facts.binds or facts.unpacks or facts.pops or facts.loops):
        total = at_least  # refs only forwarded, counted from the front: the first `at_least` are named exactly
    return star_names(facts, None if total is None else total - leading, forwarded=forwarded)


def checked_star_facts(site: KernelSite, env, *, forwarded: bool = False) -> StarFacts:
    """The facts of the kernel's `*refs`, each name bound only from it."""
    kernel = site.kernel
    assert kernel is not None
    facts = star_facts(env.ctx, kernel, lambda test: not env.value(test).dynamic)
    assert facts is not None
    if len(site.partial_args) > len(kernel.params.posonly_params) + len(kernel.params.params):
        raise VarargsError(f"functools.partial binds positional arguments into `*{facts.star}`; bind them by keyword")
    problem = None if forwarded else unnamed_problem(env.ctx, facts.star, [c for *_, c in facts.forwards], facts.sized)
    if problem is not None:
        raise VarargsError(problem)
    _refuse_rebound(facts, env)
    return facts


def bound_names(ctx: ModuleContext, kernel: cst.FunctionDef) -> set[str]:
    """The names `kernel` binds from its `*refs` (none when that cannot be read)."""
    try:
        facts = star_facts(ctx, kernel, lambda _test: True)
    except VarargsError:
        return set()
    return facts.names() if facts is not None else set()


def star_bound_in(ctx: ModuleContext, kernel: cst.FunctionDef, name: str, scope) -> bool:
    """Is `name`, read in `scope`, a name `kernel` binds from its `*refs` there: at the kernel's
    level, or as the target of a loop over them in that scope (a fori_loop body)?"""
    try:
        facts = star_facts(ctx, kernel, lambda _test: True)
    except VarargsError:
        return False
    if facts is None:
        return False
    in_loops = [loop for n, _, loop in facts.loops if n == name]
    if in_loops:
        return all(ctx.scope_of(loop) is scope for loop in in_loops)
    return scope is kernel and name in facts.names()


def binds_from_star(ctx: ModuleContext, name: cst.Name) -> bool:
    """Is `name` the target of a binding from its kernel's `*refs` (`x_ref` in `x_ref, o_ref = refs`)?
    Such a mention declares the ref, as a parameter does."""
    loop = ctx.parent(name)
    if not (_in_target(ctx, name) or (isinstance(loop, cst.For) and loop.target is name)):  # `for h_ref in h_refs:`
        return False
    fn = ctx.enclosing_function(name)
    while fn is not None and not isinstance(fn.params.star_arg, cst.Param):
        fn = ctx.enclosing_function(fn) if isinstance(loop, cst.For) else None  # a loop in a fori_loop body
    if fn is None:
        return False
    try:
        facts = star_facts(ctx, fn, lambda _test: True)
    except VarargsError:
        return False
    return facts is not None and id(name) in facts.targets


def _refuse_rebound(facts: StarFacts, env) -> None:
    """A name bound from `*refs` and also assigned elsewhere in the kernel is not one ref."""
    nested = {name: loop for name, _, loop in facts.loops if env.ctx.scope_of(loop) is not env.scope}
    for name, loop in nested.items():  # a loop in a helper of the kernel (a fori_loop body): bound only there
        facts_binding = [n for _, n, _, _ in facts.binds] + [n for n, *_ in facts.pops + facts.loops]
        rebound = len(scope_bindings(env.ctx, env.ctx.scope_of(loop)).get(name, [])) != 1  # the loop's own binding only
        if name in env.params or rebound or facts_binding.count(name) != 1:
            raise VarargsError(f"`{name}` is bound from `*{facts.star}` and also assigned elsewhere in the kernel; give the ref one name")
    for name in facts.names() - set(nested):
        own = sum(1 for _, n, _, _ in facts.binds if n == name) + sum(1 for n, *_ in facts.pops + facts.loops if n == name)
        own += sum(1 for _, n, *_ in facts.guarded if n == name)
        others = len(env.bindings().get(name, [])) - own
        if name in env.params or others != _none_in_other_arm(env.ctx, facts, name):
            raise VarargsError(f"`{name}` is bound from `*{facts.star}` and also assigned elsewhere in the kernel; give the ref one name")


def _none_in_other_arm(ctx: ModuleContext, facts: StarFacts, name: str) -> int:
    """How many `name = None` statements stand directly in the other arm of the one kernel-level
    `if` whose arm binds `name` from `*refs` (`if has_bias: b_ref, o_ref = rest` / `else: (o_ref,)
    = rest; b_ref = None`): on any path the name is either that ref or None, never both, so it
    still names one ref. 0 when the name is bound from `*refs` any other way."""
    arms = {arm for arm, n, *_ in facts.binds + facts.guarded if n == name}
    if len(arms) != 1 or None in arms:
        return 0
    ((node, which),) = arms  # type: ignore[misc]
    other = node.orelse if which == "body" else node.body
    block = other.body if isinstance(other, cst.Else) else other if isinstance(other, cst.IndentedBlock) else None
    statements = [line.body[0] for line in getattr(block, "body", ()) if isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1]
    return sum(
        1 for st in statements
        if isinstance(st, cst.Assign) and len(st.targets) == 1 and isinstance(st.targets[0].target, cst.Name)
        and st.targets[0].target.value == name and _is_none(st.value)
    )

