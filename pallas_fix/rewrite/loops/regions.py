"""The region of a kernel a loop-lifting codemod rewrites: the loop's statement, its body and
helpers, what runs before and after it, and the edits that inline its body in place of the loop.

Shared by R1 (independent loops) and R2 (reductions); the preconditions on the loop's shape live
in `loop_checks`, the statements around it in `before_loop`.
"""

from __future__ import annotations

import functools

from dataclasses import dataclass, field
from typing import Callable, Optional

import libcst as cst

from pallas_fix.analysis.context import ModuleContext, walk
from pallas_fix.core.model import IndexUse, KernelSite, LoopInfo, Origin
from pallas_fix.core.plans import Refuse
from pallas_fix.rewrite.loops.before_loop import bound_only_statements, check_before_loop
from pallas_fix.rewrite.callsite.reading import CallSite, pallas_alias
from pallas_fix.rewrite.common import attempt, per_use
from pallas_fix.rewrite.text.edits import Edit, remove_statement
from pallas_fix.rewrite.blocks.kernel_edits import dead_assignments
from pallas_fix.rewrite.kernel.dead_stores import DeadStore, overwritten_stores
from pallas_fix.rewrite.loops.dependence import check_iterations_independent
from pallas_fix.rewrite.loops.nesting import refuse_nested, static_branch, strip_block_blank_lines, when_container
from pallas_fix.rewrite.kernel.ref_helpers import RefHelper, drop_index_edits, helper_aliases, orphan_args, ref_helpers
from pallas_fix.rewrite.loops.checks import (
    check_body, check_hygiene, check_loop_statement, check_loop_writes, check_no_core_prng_draws, check_signature,
    check_writes_before_loop, loop_helpers,
)
from pallas_fix.rewrite.text.statements import body_statements, siblings_of, strip_leading_blank_lines
from pallas_fix.rewrite.loops.threaded_carry import as_statement, check_threaded_init, threaded_return
from pallas_fix.rewrite.text.syntax import code, paren_text
from pallas_fix.rewrite.callsite.dtypes import operand_dtype
from pallas_fix.rewrite.text.translate import Translator, simplify


def grid_translator(ctx: ModuleContext, site: KernelSite, cs: CallSite) -> Translator:
    return Translator(ctx, site, cs.kernel_shape_dim, cs.kernel_rank, lambda ref: operand_dtype(cs, ref))


def uses_by_loop(analysis, *, carries: Optional[bool] = None) -> list[tuple[LoopInfo, list[IndexUse]]]:
    """The dynamic indices driven by each loop index, for loops that do (or do not) carry;
    `carries=None`: every loop."""
    groups: dict[int, tuple[LoopInfo, list[IndexUse]]] = {}
    for use in analysis.uses:
        loop = use.provenance.loop
        if use.provenance.origin is not Origin.LOOP or loop is None:
            continue
        if carries is not None and loop.carries is not carries:
            continue
        groups.setdefault(id(loop.call), (loop, []))[1].append(use)
    return list(groups.values())


def loop_planner(codemod: str, plan: Callable, *, carries: Optional[bool] = None) -> Callable[..., dict]:
    """A planner asking `plan(analysis, loop, uses)` once per loop (see `uses_by_loop`), its
    outcome (or refusal) anchored on every index the loop drives."""

    def planner(analysis) -> dict:
        groups = uses_by_loop(analysis, carries=carries)
        return per_use(groups, lambda loop, uses: attempt(codemod, plan, analysis, loop, uses))

    return planner


def _is_trivial(stmt: cst.CSTNode) -> bool:
    if isinstance(stmt, cst.SimpleStatementLine):
        return all(
            isinstance(s, cst.Pass) or (isinstance(s, cst.Expr) and isinstance(s.value, (cst.SimpleString, cst.ConcatenatedString)))
            for s in stmt.body
        )
    return False


@dataclass
class LoopRegion:
    analysis: object
    site: KernelSite
    loop: LoopInfo
    statement: cst.BaseStatement  # the kernel-level statement that runs the loop
    body: cst.FunctionDef | cst.Lambda
    body_def_stmt: Optional[cst.FunctionDef]  # the def of the body when separate from `statement`
    functions: list[cst.CSTNode] = field(default_factory=list)  # body + helpers it calls
    before: list[cst.BaseStatement] = field(default_factory=list)
    after: list[cst.BaseStatement] = field(default_factory=list)
    carry_name: Optional[str] = None
    bound_stmts: list = field(default_factory=list)  # statements that go with the loop (its bounds, dead stores)
    dead_stores: list[DeadStore] = field(default_factory=list)  # whole writes the loop overwrites
    when: Optional[cst.FunctionDef] = None  # the `@pl.when` body holding the loop (loop_nesting)
    branch: Optional[cst.IndentedBlock] = None  # the branch of a static `if` holding the loop
    threaded: Optional[cst.Return] = None  # `return lax.fori_loop(..., carry)`: the carry is only threaded
    ref_helpers: list[RefHelper] = field(default_factory=list)  # functions the loop hands kernel refs to
    helper_refs: dict = field(default_factory=dict)  # (id(helper), parameter) -> kernel ref

    @property
    def ref_arg_names(self) -> list[cst.Name]:
        """The kernel refs the loop passes to its ref helpers, as the call arguments name them."""
        return [n for h in self.ref_helpers for n in h.ref_args]

    @property
    def ctx(self) -> ModuleContext:
        return self.analysis.ctx  # type: ignore[attr-defined]

    @property
    def env(self):
        return self.analysis.detection.envs.get(self.site.kernel)  # type: ignore[attr-defined]

    # -- trip count --------------------------------------------------------------------------------
    def trip_count(self, translate: Translator) -> Optional[cst.BaseExpression]:
        env = self.env
        lower = translate(self.loop.lower, env)
        upper = translate(self.loop.upper, env)
        if lower is None or upper is None:
            return None
        low0 = env.static_int(self.loop.lower) == 0
        text = code(upper) if low0 else f"{paren_text(code(upper))} - {paren_text(code(lower))}"
        if self.loop.step is not None and env.static_int(self.loop.step) != 1:
            step = translate(self.loop.step, env)
            if step is None:
                return None
            pl = pallas_alias(self.ctx)
            text = f"{pl}.cdiv({text}, {code(step)})"
        return simplify(cst.parse_expression(text))

    # -- inlining ----------------------------------------------------------------------------------
    def index_value_text(self, program_id: str) -> str:
        env = self.env
        text = program_id
        if self.loop.step is not None and env.static_int(self.loop.step) != 1:
            text = f"{paren_text(code(self.loop.step))} * {text}"
        if env.static_int(self.loop.lower) != 0:
            text = f"{paren_text(code(self.loop.lower))} + {text}"
        return text

    def body_statements(self, updated_body: cst.CSTNode) -> list[cst.BaseStatement]:
        """The body's statements as they will stand in the kernel (trailing return dropped)."""
        if isinstance(updated_body, cst.Lambda):
            if isinstance(updated_body.body, cst.Name) and updated_body.body.value == self.carry_name:
                return []
            return [cst.SimpleStatementLine([cst.Expr(updated_body.body)])]
        assert isinstance(updated_body, cst.FunctionDef)
        stmts = body_statements(updated_body)
        if stmts and isinstance(stmts[-1], cst.SimpleStatementLine) and isinstance(stmts[-1].body[-1], cst.Return):
            last = stmts[-1]
            if self.threaded is not None:  # the nested loop stays, started from the outer initial value
                assert self.loop.init is not None and self.carry_name is not None
                nested = as_statement(last.body[-1], self.loop.init, self.carry_name)
                stmts[-1] = last.with_changes(body=[*last.body[:-1], nested])
            elif len(last.body) == 1:
                stmts = stmts[:-1]
            else:
                stmts[-1] = last.with_changes(body=last.body[:-1])
        return stmts

    def dead_slice_statements(self, lifted_elements: set[int], *, loop_gone: bool = False) -> list[cst.BaseStatement]:
        """`sl = pl.ds(i * bs, bs)` whose every use was a lifted window, or an argument a ref
        helper stops receiving: it goes too. `loop_gone`: the loop's bounds go with it (R1), so
        `nb = x_ref.shape[0] // bs` read by the bound and by dead starts (`src = (nb - 1 - i) * bs`)
        goes as well; R2 may keep the bound in a guard."""
        unread, still_reads = self._helper_reads(lifted_elements)
        dropped = {id(h.index_arg) for h in unread}
        loop = self.loop
        bounds = {id(b) for b in (loop.lower, loop.upper, loop.step) if b is not None} if loop_gone else set()
        # The other arguments those helpers stop receiving (`tile` of `_store(o_ref, tile, v)`).
        orphans = orphan_args(unread, still_reads)
        return dead_assignments(self.ctx, [*self.functions, self.site.kernel], lifted_elements | dropped | bounds | orphans)

    def _helper_reads(self, lifted_elements: set[int]):
        """The helpers whose index goes, and `still_reads(helper, name, skip)` for their other
        parameters: one reading, so that the parameters `edits` drops and the arguments whose
        feeding statements `dead_slice_statements` removes are the same."""
        unread = self.unread_index_helpers(lifted_elements)
        dropped = {id(h.index_arg) for h in unread}

        @functools.cache
        def dead() -> list:  # only where a helper has another parameter to ask about
            return dead_assignments(self.ctx, [*self.functions, self.site.kernel], lifted_elements | dropped)

        return unread, lambda h, name, skip: self._reads(h.fn, name, lifted_elements, dropped | skip, dead())

    def index_needed(self, lifted_elements: set[int]) -> bool:
        """Does the index name survive once the lifted windows (and dead named slices) are gone,
        and the ref helpers that no longer read it stop receiving it?"""
        dropped = {id(h.index_arg) for h in self.unread_index_helpers(lifted_elements)}
        return self._reads(self.body, self.loop.index_name, lifted_elements, dropped)

    def unread_index_helpers(self, lifted_elements: set[int]) -> list[RefHelper]:
        """The ref helpers whose index parameter nothing reads once their windows are blocks. A
        read that is only the argument another such helper stops receiving (`_put(ref,
        pl.ds(start, size), v)` in `_store`, whose `start` drives `_put`'s window) is no read:
        iterated until no helper joins, so a chain of helpers drops the index at every level."""
        dead = dead_assignments(self.ctx, list(self.functions), lifted_elements)
        unread: list[RefHelper] = []
        while True:
            dropped = {id(h.index_arg) for h in unread}
            more = [h for h in self.ref_helpers if h.index_param is not None and all(h is not u for u in unread)
                    and not self._reads(h.fn, h.index_param, lifted_elements, dropped, dead)]
            if not more:
                return unread
            unread += more

    def _reads(self, fn, name: str, lifted_elements: set[int], skip: set[int], dead_stmts=None) -> bool:
        """`fn` mentions `name` outside the lifted windows, the dead named slices and `skip`."""
        dead_stmts = self.dead_slice_statements(lifted_elements) if dead_stmts is None else dead_stmts
        dead = {id(s) for s in dead_stmts} | skip
        for node in walk(fn.body):
            if isinstance(node, cst.Name) and node.value == name and not self._inside(node, lifted_elements):
                if any(id(a) in dead for a in self.ctx.ancestors(node)):
                    continue
                return True
        return False

    def _inside(self, node: cst.CSTNode, elements: set[int]) -> bool:
        return any(id(a) in elements for a in self.ctx.ancestors(node))

    def loop_comments_note(self) -> str:
        """`; kept ... : `# walk the row blocks`` for the comments above the loop statement: they
        move to the code that replaces the loop, which no longer loops, so the user should look."""
        lines = getattr(self.statement, "leading_lines", ())
        comments = [l.comment.value for l in lines if l.comment is not None]
        if not comments:
            return ""
        if len(comments) == 1:
            return f"; kept the comment above the removed loop, check it still holds: `{comments[0]}`"
        return "; kept the comments above the removed loop, check they still hold: " + ", ".join(f"`{c}`" for c in comments)

    def take_body_def(self, edits: dict[cst.CSTNode, Edit]) -> dict:
        """Remove `def body` when it stands apart from the loop; the returned holder receives its
        updated form and the comments above it, which move to where the loop was."""
        holder: dict = {}
        if self.body_def_stmt is not None:

            def remove_def(updated: cst.CSTNode) -> cst.RemovalSentinel:
                holder["body"] = updated
                holder["comments"] = [l for l in updated.leading_lines if l.comment is not None]  # type: ignore[attr-defined]
                return cst.RemovalSentinel.REMOVE

            edits[self.body_def_stmt] = remove_def
        return holder

    def updated_body(self, holder: dict, updated_statement: cst.CSTNode) -> cst.CSTNode:
        """The body as edited: the def `take_body_def` kept, the lambda in the loop call, or (for
        `@pl.loop`) the loop statement itself."""
        if self.body_def_stmt is not None:
            if "body" not in holder:
                raise Refuse("the loop body is defined after the loop")
            return holder["body"]
        if isinstance(self.body, cst.Lambda):
            for n in walk(updated_statement):
                if isinstance(n, cst.Lambda):
                    return n
            raise Refuse("cannot find the loop's lambda body")
        return updated_statement

    def inline_edits(
        self,
        program_id: str,
        lifted_elements: Optional[set[int]] = None,
    ) -> dict[cst.CSTNode, Edit]:
        edits: dict[cst.CSTNode, Edit] = {}
        lifted_elements = lifted_elements or set()
        need_index = self.index_needed(lifted_elements)
        index_stmt = (
            [cst.parse_statement(f"{self.loop.index_name} = {self.index_value_text(program_id)}\n")] if need_index else []
        )
        holder = self.take_body_def(edits)

        def replace_loop(updated: cst.CSTNode):
            stmts = index_stmt + self.body_statements(self.updated_body(holder, updated))
            if not stmts:
                stmts = [cst.SimpleStatementLine([cst.Pass()])]
            first = stmts[0]
            leading = (
                list(getattr(updated, "leading_lines", ()))
                + list(holder.get("comments", []))
                + list(getattr(first, "leading_lines", ()))
            )
            if hasattr(first, "leading_lines"):
                stmts[0] = first.with_changes(leading_lines=leading)
            return cst.FlattenSentinel(stmts)

        edits[self.statement] = replace_loop
        if self.when is not None:
            edits[self.when] = strip_leading_blank_lines
        if self.branch is not None:
            edits[self.branch] = strip_block_blank_lines
        edits.update(drop_index_edits(*self._helper_reads(lifted_elements)))
        for stmt in dict.fromkeys(self.dead_slice_statements(lifted_elements, loop_gone=True) + list(self.bound_stmts)):
            remove_statement(edits, stmt, siblings_of(self.ctx, stmt))
        return edits


def _if_of(ctx: ModuleContext, branch: cst.IndentedBlock) -> cst.If:
    holder = ctx.parent(branch)
    return holder if isinstance(holder, cst.If) else ctx.parent(holder)  # type: ignore[return-value]


def loop_region(analysis, site: KernelSite, loop: LoopInfo, *, reduction: bool = False) -> LoopRegion:
    """The loop's statement, body and helpers. `reduction` admits a used result, code after the
    loop and a used carry (R2 handles those); R1 refuses them."""
    ctx: ModuleContext = analysis.ctx
    kernel = site.kernel
    assert kernel is not None
    stmts = body_statements(kernel)
    statement = loop.statement
    when, branch = None, None
    if statement not in stmts and not reduction:
        when = when_container(ctx, kernel, statement)
        branch = None if when is not None else static_branch(ctx, analysis.detection.envs.get(kernel), kernel, statement)
    if statement not in stmts and when is None and branch is None:
        raise refuse_nested(ctx, kernel, loop, analysis.detection.loops, analysis.uses)
    # The kernel-level statement holding the loop (`pl.when` def, static `if`), and the loop's block.
    container = when if when is not None else (_if_of(ctx, branch) if branch is not None else None)
    inner = list(branch.body) if branch is not None else (body_statements(when) if when is not None else stmts)
    body = loop.body
    check_signature(ctx, loop)
    body_def_stmt = check_loop_statement(kernel, loop, inner, reduction=reduction)
    params = [p.name.value for p in body.params.params]
    carry = params[1] if len(params) > 1 else None
    region = LoopRegion(analysis, site, loop, statement, body, body_def_stmt, carry_name=carry, when=when, branch=branch)
    index, outer = inner.index(statement), stmts.index(container if container is not None else statement)
    # Nested: the kernel's statements around the `pl.when` / `if`, and the block's around the loop.
    before = stmts[:outer] + (inner[:index] if container is not None else [])
    after = (inner[index + 1 :] if container is not None else []) + stmts[outer + 1 :]
    region.before = [s for s in before if s is not body_def_stmt]
    region.after = [s for s in after if not _is_trivial(s)]
    region.functions = [body] + loop_helpers(ctx, kernel, body, lambda fn: _touches_refs(analysis, fn))
    check_no_core_prng_draws(ctx, region.functions)
    if not reduction:  # R2 keeps its own model of the refs a reduction touches
        region.ref_helpers = ref_helpers(analysis, site, loop, region.functions)
        region.functions += [h.fn for h in region.ref_helpers if h.fn not in region.functions]
        region.helper_refs = helper_aliases(region.ref_helpers)
    region.bound_stmts = bound_only_statements(ctx, kernel, loop, region.before)
    if not reduction and container is None:  # dead once the loop overwrites them: they go with it
        region.dead_stores = overwritten_stores(analysis, region)
        region.bound_stmts += [d.stmt for d in region.dead_stores]
    check_body(ctx, body, carry, carry_used_ok=reduction)
    region.threaded = threaded_return(ctx, body, carry)
    if region.threaded is not None:
        if reduction:  # R2's inlining would drop the nested loop with the return
            raise Refuse("the loop only threads its carry through a nested loop; it is not a reduction (see PF101)")
        check_threaded_init(loop)
    check_loop_writes(analysis, region)
    check_iterations_independent(analysis, region)  # before the rest: the reason no other change removes
    if not reduction:  # R2 renames the carry's leaves into scratch refs: its own model of names
        check_hygiene(ctx, kernel, loop, carry, [statement, body_def_stmt, *region.bound_stmts])
    if not reduction:  # R2 moves what the code before the loop writes to the first grid step
        check_writes_before_loop(analysis, region)
        check_before_loop(ctx, region.before, region.bound_stmts, region.after, region.functions)
    return region


def _touches_refs(analysis, fn: cst.FunctionDef) -> bool:
    """Does `fn` subscript a ref or call anything with one (as its analysed environment sees
    them)? Unanalysed: taken to."""
    env = analysis.detection.envs.get(fn) if analysis.detection is not None else None
    if env is None:
        return True
    for node in walk(fn):
        if isinstance(node, cst.Subscript) and env.value(node.value).is_ref:
            return True
        if isinstance(node, cst.Call) and any(env.value(a.value).is_ref for a in node.args):
            return True
    return False
