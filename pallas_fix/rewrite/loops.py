"""What a loop-lifting codemod needs to know about a loop: its region, its ref accesses, its
block windows, and the edits that inline its body in place of the loop.

Shared by R1 (independent loops) and R2 (reductions).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

import libcst as cst

from pallas_fix.core import names as N
from pallas_fix.rewrite.blockplan import BlockIndexExpr, code, paren_text
from pallas_fix.rewrite.callsite import CallSite, pallas_alias
from pallas_fix.analysis.context import ModuleContext, walk
from pallas_fix.core.model import IndexUse, KernelSite, LoopInfo
from pallas_fix.rewrite.edits import Edit, remove_statement
from pallas_fix.rewrite.translate import Translator, simplify
from pallas_fix.analysis.windows import loop_key, window_of


class RegionError(Exception):
    """A precondition on the loop's shape failed (the message is the refusal reason)."""


def grid_translator(ctx: ModuleContext, site: KernelSite, cs: CallSite) -> Translator:
    return Translator(ctx, site, cs.kernel_shape_dim, cs.kernel_rank)


def _stmts(fn: cst.FunctionDef) -> list[cst.BaseStatement]:
    body = fn.body
    return list(body.body) if isinstance(body, cst.IndentedBlock) else []


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
    bound_stmts: list = field(default_factory=list)  # statements that only feed the loop bounds

    @property
    def ctx(self) -> ModuleContext:
        return self.analysis.ctx  # type: ignore[attr-defined]

    def contains(self, node: cst.CSTNode) -> bool:
        for anc in [node, *self.ctx.ancestors(node)]:
            if anc in self.functions:
                return True
        return False

    # -- trip count --------------------------------------------------------------------------------
    def trip_count(self, translate: Translator) -> Optional[cst.BaseExpression]:
        env = self.analysis.detection.envs.get(self.site.kernel)  # type: ignore[attr-defined]
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
        env = self.analysis.detection.envs.get(self.site.kernel)  # type: ignore[attr-defined]
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
        stmts = list(updated_body.body.body) if isinstance(updated_body.body, cst.IndentedBlock) else []
        if stmts and isinstance(stmts[-1], cst.SimpleStatementLine) and isinstance(stmts[-1].body[-1], cst.Return):
            last = stmts[-1]
            if len(last.body) == 1:
                stmts = stmts[:-1]
            else:
                stmts[-1] = last.with_changes(body=last.body[:-1])
        return stmts

    def dead_slice_statements(self, lifted_elements: set[int]) -> list[cst.BaseStatement]:
        """`sl = pl.ds(i * bs, bs)` whose every use was a lifted window: it goes too."""
        from pallas_fix.rewrite.blockplan import dead_assignments

        return dead_assignments(self.ctx, list(self.functions), lifted_elements)

    def index_needed(self, lifted_elements: set[int]) -> bool:
        """Does the index name survive once the lifted windows (and dead named slices) are gone?"""
        name = self.loop.index_name
        body = self.body
        dead = {id(s) for s in self.dead_slice_statements(lifted_elements)}
        for node in walk(body.body if isinstance(body, cst.FunctionDef) else body.body):
            if isinstance(node, cst.Name) and node.value == name and not self._inside(node, lifted_elements):
                if any(id(a) in dead for a in self.ctx.ancestors(node)):
                    continue
                return True
        return False

    def _inside(self, node: cst.CSTNode, elements: set[int]) -> bool:
        return any(id(a) in elements for a in self.ctx.ancestors(node))

    def inline_edits(
        self,
        program_id: str,
        lifted_elements: Optional[set[int]] = None,
        prologue: Optional[Callable[[], list[cst.BaseStatement]]] = None,
        wrap: Optional[Callable[[list[cst.BaseStatement]], list[cst.BaseStatement]]] = None,
    ) -> dict[cst.CSTNode, Edit]:
        edits: dict[cst.CSTNode, Edit] = {}
        lifted_elements = lifted_elements or set()
        need_index = self.index_needed(lifted_elements)
        index_stmt = (
            [cst.parse_statement(f"{self.loop.index_name} = {self.index_value_text(program_id)}\n")] if need_index else []
        )
        holder: dict[str, cst.CSTNode] = {}
        if self.body_def_stmt is not None:
            def remove_def(updated: cst.CSTNode) -> cst.RemovalSentinel:
                holder["body"] = updated
                # Comments above `def body` move with the body's statements.
                holder["comments"] = [l for l in updated.leading_lines if l.comment is not None]  # type: ignore[attr-defined]
                return cst.RemovalSentinel.REMOVE

            edits[self.body_def_stmt] = remove_def

        body_node = self.body

        def replace_loop(updated: cst.CSTNode):
            if self.body_def_stmt is not None:
                body_updated = holder.get("body")
                if body_updated is None:
                    raise RegionError("the loop body is defined after the loop")
            elif isinstance(body_node, cst.Lambda):
                body_updated = _find_lambda(updated)
            else:
                body_updated = updated  # @pl.loop: the statement is the body def
            stmts = index_stmt + self.body_statements(body_updated)
            if wrap is not None:
                stmts = wrap(stmts)
            if prologue is not None:
                stmts = prologue() + stmts
            if not stmts:
                stmts = [cst.SimpleStatementLine([cst.Pass()])]
            first = stmts[0]
            leading = (
                list(getattr(updated, "leading_lines", ()))
                + list(holder.get("comments", []))  # type: ignore[arg-type]
                + list(getattr(first, "leading_lines", ()))
            )
            if hasattr(first, "leading_lines"):
                stmts[0] = first.with_changes(leading_lines=leading)
            return cst.FlattenSentinel(stmts)

        edits[self.statement] = replace_loop
        for stmt in self.dead_slice_statements(lifted_elements) + list(self.bound_stmts):
            remove_statement(edits, stmt, siblings_of(self.ctx, stmt))
        return edits


def _find_lambda(node: cst.CSTNode) -> cst.Lambda:
    for n in walk(node):
        if isinstance(n, cst.Lambda):
            return n
    raise RegionError("cannot find the loop's lambda body")


def loop_region(analysis, site: KernelSite, loop: LoopInfo, *, reduction: bool = False) -> LoopRegion:
    """The loop's statement, body and helpers. `reduction` admits a used result, code after the
    loop and a used carry (R2 handles those); R1 refuses them."""
    ctx: ModuleContext = analysis.ctx
    kernel = site.kernel
    assert kernel is not None
    stmts = _stmts(kernel)
    statement = loop.statement
    if statement not in stmts:
        raise RegionError("the loop is not a top-level statement of the kernel (it sits inside another block)")
    body = loop.body
    body_def_stmt = None
    if loop.kind == "fori_loop":
        if reduction:
            if not _is_result_statement(statement, loop.call):
                raise RegionError("the loop's result is used inside a larger expression; assign it to names first")
        elif not _is_bare_loop_statement(statement, loop.call):
            raise RegionError("the loop's result is used; only a loop run for its effects can become a grid axis")
        if isinstance(body, cst.FunctionDef):
            if body not in stmts:
                raise RegionError("the loop body is not defined directly in the kernel")
            if stmts.index(body) > stmts.index(statement):
                raise RegionError("the loop body is defined after the loop")
            body_def_stmt = body
            refs = [
                n
                for n in walk(kernel)
                if isinstance(n, cst.Name) and n.value == body.name.value and n is not body.name
            ]
            if len(refs) != 1:
                raise RegionError(f"the loop body `{body.name.value}` is used elsewhere in the kernel")
    params = [p.name.value for p in body.params.params]
    carry = params[1] if len(params) > 1 else None
    region = LoopRegion(analysis, site, loop, statement, body, body_def_stmt, carry_name=carry)
    index = stmts.index(statement)
    region.before = [s for s in stmts[:index] if s is not body_def_stmt]
    region.after = [s for s in stmts[index + 1 :] if not _is_trivial(s)]
    region.functions = [body] + _helpers(ctx, kernel, body)
    region.bound_stmts = _bound_only_statements(ctx, kernel, loop, region.before)
    _check_body(region, carry_used_ok=reduction)
    if not reduction:
        check_before_loop(region)
    return region


def _is_result_statement(stmt: cst.BaseStatement, call: cst.Call) -> bool:
    """`fori_loop(...)`, `acc = fori_loop(...)` or `m, l = fori_loop(...)`."""
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return False
    small = stmt.body[0]
    if isinstance(small, cst.Expr):
        return small.value is call
    if isinstance(small, cst.Assign) and small.value is call and len(small.targets) == 1:
        t = small.targets[0].target
        if isinstance(t, cst.Name):
            return True
        return isinstance(t, (cst.Tuple, cst.List)) and all(isinstance(e.value, cst.Name) for e in t.elements)
    return False


def _bound_only_statements(ctx: ModuleContext, kernel, loop: LoopInfo, before) -> list[cst.BaseStatement]:
    """`n = x_ref.shape[0] // bs` whose only reader is the loop's bound: it goes with the loop."""
    bounds = [loop.lower, loop.upper] + ([loop.step] if loop.step is not None else [])
    names = {n.value for b in bounds for n in walk(b) if isinstance(n, cst.Name)}
    found = []
    for stmt in before:
        if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assign)):
            continue
        assign = stmt.body[0]
        if len(assign.targets) != 1 or not isinstance(assign.targets[0].target, cst.Name):
            continue
        name = assign.targets[0].target.value
        if name not in names:
            continue
        readers = [
            n for n in walk(kernel)
            if isinstance(n, cst.Name) and n.value == name and n is not assign.targets[0].target
        ]
        if readers and all(any(a is b for a in [r, *ctx.ancestors(r)] for b in bounds) for r in readers):
            found.append(stmt)
    return found


def _is_bare_loop_statement(stmt: cst.BaseStatement, call: cst.Call) -> bool:
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return False
    small = stmt.body[0]
    if isinstance(small, cst.Expr):
        return small.value is call
    if isinstance(small, cst.Assign) and small.value is call and len(small.targets) == 1:
        t = small.targets[0].target
        return isinstance(t, cst.Name) and t.value == "_"
    return False


def _helpers(ctx: ModuleContext, kernel: cst.FunctionDef, body) -> list[cst.CSTNode]:
    """Kernel-local defs called from the loop body and from nowhere else."""
    local = {s.name.value: s for s in _stmts(kernel) if isinstance(s, cst.FunctionDef) and s is not body}
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
    for helper in found:
        for node in walk(kernel):
            if isinstance(node, cst.Name) and node.value == helper.name.value and node is not helper.name:
                if not any(a is body or a in found for a in ctx.ancestors(node)):
                    raise RegionError(f"helper `{helper.name.value}` is also used outside the loop")
    return found


def _check_body(region: LoopRegion, carry_used_ok: bool = False) -> None:
    body = region.body
    if isinstance(body, cst.FunctionDef):
        stmts = _stmts(body)
        for n, stmt in enumerate(stmts):
            if isinstance(stmt, cst.FunctionDef):
                continue  # a nested def's returns are its own
            for node in _own(stmt):
                last = n == len(stmts) - 1 and node is stmt.body[-1] if isinstance(stmt, cst.SimpleStatementLine) else False
                if isinstance(node, cst.Return) and not (last and (carry_used_ok or _returns_carry(node, region.carry_name))):
                    raise RegionError("the loop body returns early")
    if region.carry_name is not None and not carry_used_ok:
        target = body.body
        for node in _walk_binding(target, region.carry_name):
            if isinstance(node, cst.Name) and node.value == region.carry_name:
                parent = region.ctx.parent(node)
                if isinstance(parent, cst.Return) and _enclosing_def(region.ctx, node) is body:
                    continue
                if isinstance(body, cst.Lambda) and node is body.body:
                    continue
                if isinstance(parent, cst.Param):
                    continue
                raise RegionError(f"the loop body uses its carry `{region.carry_name}`")


def _walk_binding(node: cst.CSTNode, name: str):
    """Walk `node` without entering nested functions that rebind `name` as a parameter."""
    stack = [node]
    while stack:
        cur = stack.pop()
        yield cur
        if isinstance(cur, (cst.FunctionDef, cst.Lambda)) and cur is not node:
            if any(p.name.value == name for p in cur.params.params):
                continue
        stack.extend(cur.children)


def _enclosing_def(ctx: ModuleContext, node: cst.CSTNode):
    for anc in ctx.ancestors(node):
        if isinstance(anc, (cst.FunctionDef, cst.Lambda)):
            return anc
    return None


def _returns_carry(ret: cst.Return, carry: Optional[str]) -> bool:
    if ret.value is None:
        return True
    if isinstance(ret.value, cst.Name) and ret.value.value in ("None", carry):
        return True
    return False


def _own(stmt: cst.CSTNode):
    stack = [stmt]
    while stack:
        cur = stack.pop()
        yield cur
        if isinstance(cur, (cst.FunctionDef, cst.Lambda)) and cur is not stmt:
            continue
        stack.extend(cur.children)


# -- ref accesses -----------------------------------------------------------------------------------
@dataclass
class AccessGroup:
    ref: str
    subscripts: list[cst.Subscript] = field(default_factory=list)  # lifted
    uses: dict[int, list[IndexUse]] = field(default_factory=dict)  # id(subscript) -> loop uses
    unlifted_accesses: list[cst.Subscript] = field(default_factory=list)
    written: bool = False

    @property
    def lifted(self) -> bool:
        return bool(self.subscripts)


def _ref_base(sub: cst.Subscript) -> Optional[cst.Name]:
    base = sub.value
    if isinstance(base, cst.Attribute) and base.attr.value == "at":
        base = base.value
    if isinstance(base, cst.Attribute) and base.attr.value in ("shape", "strides"):
        return None
    return base if isinstance(base, cst.Name) else None


def is_write(ctx: ModuleContext, sub: cst.Subscript) -> bool:
    parent = ctx.parent(sub)
    if isinstance(parent, cst.AssignTarget) or (isinstance(parent, cst.AugAssign) and parent.target is sub):
        return True
    if isinstance(sub.value, cst.Attribute) and sub.value.attr.value == "at":
        # A view handed to a call (copies, helpers) may be written through.
        return not isinstance(parent, cst.Subscript)
    return False


def ref_accesses(analysis, region: LoopRegion, loop: LoopInfo) -> dict[str, AccessGroup]:
    ctx: ModuleContext = analysis.ctx
    kernel_env = analysis.detection.envs.get(region.site.kernel)
    uses_by_sub: dict[int, list[IndexUse]] = {}
    for use in analysis.uses:
        uses_by_sub.setdefault(id(use.subscript), []).append(use)
    groups: dict[str, AccessGroup] = {}
    seen: set[int] = set()
    for fn in region.functions:
        for node in walk(fn):
            if not isinstance(node, cst.Subscript) or id(node) in seen:
                continue
            seen.add(id(node))
            base = _ref_base(node)
            if base is None:
                continue
            env = analysis.detection.envs.get(fn) or kernel_env
            if env is None or not env.value(base).is_ref:
                continue
            owner = env.owner(base.value)
            if owner is None or owner.scope is not region.site.kernel or base.value not in owner.params:
                raise RegionError(
                    f"`{base.value}` is a ref view, alias or helper parameter inside the loop; "
                    "pallas-fix only rewrites accesses through the kernel's own ref parameters"
                )
            group = groups.setdefault(base.value, AccessGroup(base.value))
            loop_uses = [
                u for u in uses_by_sub.get(id(node), []) if u.provenance.loop is loop
            ]
            if loop_uses:
                group.subscripts.append(node)
                group.uses[id(node)] = loop_uses
            else:
                group.unlifted_accesses.append(node)
                if is_write(ctx, node):
                    group.written = True
    return groups


def block_index_of(group: AccessGroup, loop: LoopInfo, ref: str):
    """(dim, size expr, env, BlockIndexExpr) shared by every lifted access of `ref`."""
    found = None
    for sub in group.subscripts:
        uses = group.uses[id(sub)]
        if len(uses) != 1:
            raise RegionError(f"`{ref}` is sliced by the loop index in more than one dimension")
        use = uses[0]
        window = window_of(use)
        if window.block is None:
            raise RegionError(f"the window on `{ref}` is not provably a block ({window.reason})")
        axes: dict[object, int] = {}
        for key, mult in window.block.atoms.items():
            if key == loop_key(loop):
                axes["new"] = mult
            elif key.startswith("pid:"):
                axes[int(key.split(":")[1])] = mult
            else:
                raise RegionError(f"the start of `{ref}` depends on `{code(window.block.atom_exprs[key])}`, which no grid axis provides")
        if "new" not in axes:
            raise RegionError(f"the window on `{ref}` does not move with the loop index")
        index = BlockIndexExpr(axes, window.block.offset)
        entry = (use.dim, code(use.size), index.key())
        if found is None:
            found = (entry, use, index)
        elif found[0] != entry:
            raise RegionError(f"`{ref}` is accessed at different blocks within one iteration (e.g. neighbouring blocks)")
    assert found is not None
    _, use, index = found
    return use.dim, use.size, use.env, index


def check_kernel_ref_uses(analysis, site: KernelSite, region: LoopRegion, lifted: set[str]) -> None:
    """A lifted ref may only be touched through the lifted windows (and `.dtype`/other dims)."""
    ctx: ModuleContext = analysis.ctx
    kernel = site.kernel
    assert kernel is not None
    bounds = [region.loop.lower, region.loop.upper] + ([region.loop.step] if region.loop.step is not None else [])
    bounds += list(region.bound_stmts)
    allowed: set[int] = set()
    for fn in region.functions:
        for node in walk(fn):
            if isinstance(node, cst.Subscript):
                base = _ref_base(node)
                if base is not None and base.value in lifted:
                    allowed.add(id(base))
    kernel_env = analysis.detection.envs.get(kernel)
    for node in walk(kernel):
        if not isinstance(node, cst.Name) or node.value not in lifted or id(node) in allowed:
            continue
        parent = ctx.parent(node)
        if isinstance(parent, cst.Param) or (isinstance(parent, cst.Attribute) and parent.attr is node):
            continue
        if isinstance(parent, cst.Attribute) and parent.value is node and parent.attr.value in ("dtype", "ndim"):
            continue
        if any(any(a is b for b in bounds) for a in ctx.ancestors(node)):
            continue  # the loop bounds disappear with the loop
        if isinstance(parent, cst.Attribute) and parent.attr.value == "shape":
            grand = ctx.parent(parent)
            if _unpacked_shape_ok(ctx, kernel, grand, parent, _lifted_dims(analysis, region, node.value), bounds):
                continue
            if isinstance(grand, cst.Subscript) and len(grand.slice) == 1 and isinstance(grand.slice[0].slice, cst.Index):
                dim = kernel_env.static_int(grand.slice[0].slice.value) if kernel_env else None
                lifted_dims = _lifted_dims(analysis, region, node.value)
                if dim is not None and dim not in lifted_dims:
                    continue
            raise RegionError(f"`{node.value}.shape` is read in the kernel; it would mean the block's shape after the rewrite")
        raise RegionError(f"`{node.value}` is used outside the lifted windows (line {ctx.span(node).line})")


def _lifted_dims(analysis, region: LoopRegion, ref: str) -> set[int]:
    dims: set[int] = set()
    for use in analysis.uses:
        if use.provenance.loop is region.loop and use.ref_name == ref:
            dims.add(use.dim)
    return dims


def lifted_element_ids(groups: dict[str, AccessGroup], blocks) -> set[int]:
    ids: set[int] = set()
    for b in blocks:
        for sub, dims in b.subscripts:
            for n, el in enumerate(sub.slice):
                if n in dims:
                    ids.add(id(el))
    return ids


def strip_leading_blank_lines(fn: cst.CSTNode) -> cst.CSTNode:
    """A kernel whose first statements were removed should not start with an empty line."""
    assert isinstance(fn, cst.FunctionDef)
    body = fn.body
    if not isinstance(body, cst.IndentedBlock) or not body.body:
        return fn
    first = body.body[0]
    lines = list(getattr(first, "leading_lines", ()))
    while lines and lines[0].comment is None:
        lines.pop(0)
    if hasattr(first, "leading_lines"):
        first = first.with_changes(leading_lines=lines)
    return fn.with_changes(body=body.with_changes(body=[first, *body.body[1:]]))


def _unpacked_shape_ok(ctx, kernel, assign, shape_attr, lifted_dims: set[int], bounds) -> bool:
    """`rows, cols = x_ref.shape` where the names of lifted dims only feed the loop bounds."""
    if not (isinstance(assign, cst.Assign) and assign.value is shape_attr and len(assign.targets) == 1):
        return False
    target = assign.targets[0].target
    if not isinstance(target, (cst.Tuple, cst.List)):
        return False
    for n, el in enumerate(target.elements):
        if n not in lifted_dims:
            continue
        if not isinstance(el.value, cst.Name):
            return False
        name = el.value.value
        readers = [x for x in walk(kernel) if isinstance(x, cst.Name) and x.value == name and x is not el.value]
        for r in readers:
            if not any(a is b for a in [r, *ctx.ancestors(r)] for b in bounds):
                return False
    return True


def check_before_loop(region: LoopRegion) -> None:
    """Statements before the loop will run on every grid step: they must not have effects."""
    ctx = region.ctx
    for stmt in region.before:
        if stmt in region.bound_stmts or isinstance(stmt, cst.FunctionDef) and not stmt.decorators:
            continue
        for node in _own(stmt):
            if isinstance(node, (cst.Assign, cst.AugAssign, cst.AnnAssign)):
                targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
                if any(isinstance(t, cst.Subscript) for t in targets):
                    raise RegionError(
                        f"the kernel writes a ref before the loop (line {ctx.span(node).line}); "
                        "after lifting it would run on every grid step"
                    )
            if isinstance(node, cst.Call):
                q = ctx.imports.qualify(node.func) or ""
                if q in N.COPIES or q in N.FORI_LOOP or q in N.PL_LOOP or q.endswith(".when") or q.endswith("run_scoped"):
                    raise RegionError(
                        f"the kernel runs `{code(node.func)}` before the loop (line {ctx.span(node).line}); "
                        "after lifting it would run on every grid step"
                    )
                if isinstance(node.func, cst.Attribute) and node.func.attr.value in ("start", "wait"):
                    raise RegionError(f"the kernel starts or waits on a copy before the loop (line {ctx.span(node).line})")
            if isinstance(node, cst.FunctionDef) and node.decorators:
                raise RegionError(f"the kernel runs decorated `{node.name.value}` before the loop")
    if region.after:
        raise RegionError(
            f"the kernel has code after the loop (line {ctx.span(region.after[0]).line}); "
            "after lifting it would run on every grid step"
        )


def add_pallas_import(module: cst.Module) -> cst.Module:
    from libcst.codemod import CodemodContext
    from libcst.codemod.visitors import AddImportsVisitor

    context = CodemodContext()
    AddImportsVisitor.add_needed_import(context, "jax.experimental", "pallas", "pl")
    return AddImportsVisitor(context).transform_module(module)


def siblings_of(ctx: ModuleContext, stmt: cst.CSTNode) -> list:
    parent = ctx.parent(stmt)
    return list(getattr(parent, "body", ())) if parent is not None else []


def drop_unused_loop_imports(module: cst.Module) -> cst.Module:
    """`from jax import lax` / `from jax.lax import fori_loop` that only served the lifted loop."""
    from libcst.codemod import CodemodContext
    from libcst.codemod.visitors import RemoveImportsVisitor

    context = CodemodContext()
    RemoveImportsVisitor.remove_unused_import(context, "jax", "lax")
    RemoveImportsVisitor.remove_unused_import(context, "jax.lax", "fori_loop")
    return RemoveImportsVisitor(context).transform_module(module)


def uses_by_loop(analysis, *, carries: bool) -> list[tuple[LoopInfo, list[IndexUse]]]:
    """The dynamic indices driven by each loop index, for loops that do (or do not) carry."""
    from pallas_fix.core.model import Origin

    groups: dict[int, tuple[LoopInfo, list[IndexUse]]] = {}
    for use in analysis.uses:
        loop = use.provenance.loop
        if use.provenance.origin is not Origin.LOOP or loop is None or loop.carries is not carries:
            continue
        groups.setdefault(id(loop.call), (loop, []))[1].append(use)
    return list(groups.values())
