"""R2 — lift a reduction loop into a sequential grid axis with scratch carries (fixes PF102).

Before (inside a (M // bm, N // bn) grid):
    def kernel(x_ref, y_ref, o_ref):
        def body(k, acc):
            return acc + jnp.dot(x_ref[:, pl.ds(k * bk, bk)], y_ref[pl.ds(k * bk, bk), :],
                                 preferred_element_type=jnp.float32)
        acc = lax.fori_loop(0, K // bk, body, jnp.zeros((bm, bn), jnp.float32))
        o_ref[...] = acc.astype(o_ref.dtype)

After (grid (M // bm, N // bn, K // bk), scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)]):
    def kernel(x_ref, y_ref, o_ref, acc_ref):
        @pl.when(pl.program_id(2) == 0)
        def _init():
            acc_ref[...] = jnp.zeros((bm, bn), jnp.float32)

        acc = acc_ref[...]
        acc_ref[...] = acc + jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32)

        @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
        def _finalize():
            acc = acc_ref[...]
            o_ref[...] = acc.astype(o_ref.dtype)

Recipe: match a fori_loop at kernel level whose body slices refs with its index and carries a
value; check the backend runs grid axes in order (never Triton), that every carry leaf has an
initial value of known shape and dtype, that only inputs are sliced by the index (outputs stay
resident) and that the sizes can be written at the call site; then move each carry leaf to
scratch, initialise it on the first step, run the body once per step, and run what followed the
loop on the last step. A trip count that depends on pl.program_id (causal attention) becomes a
full-length axis whose body is guarded by `pl.when(k < upper)`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import libcst as cst

from pallas_fix.core import names as N
from pallas_fix.rewrite.blockplan import CallEdits, NewAxis, RefBlock, code, kernel_subscript_edit, paren_text
from pallas_fix.rewrite.callsite import CallSite, CallSiteError, pallas_alias
from pallas_fix.analysis.context import walk
from pallas_fix.core.plans import FixPlan, Outcome, Refusal, Recipe, use_key
from pallas_fix.core.model import Backend, FixSafety, IndexUse, LoopInfo, Origin
from pallas_fix.rewrite.edits import apply_edits, remove_statement

from pallas_fix.rewrite.loops import (
    uses_by_loop,
    drop_unused_loop_imports,
    RegionError,
    _own,
    _stmts,
    add_pallas_import,
    block_index_of,
    check_kernel_ref_uses,
    grid_translator,
    is_write,
    loop_region,
    ref_accesses,
    siblings_of,
    strip_leading_blank_lines,
)

NAME = "lift-reduction"
_ZERO_CTORS = ("jax.numpy.zeros", "jax.numpy.ones", "jax.numpy.full", "jax.numpy.empty")


class _Refuse(Exception):
    pass


@dataclass
class Leaf:
    name: str  # value name in the kernel (acc, m, l)
    ref: str  # scratch ref parameter (acc_ref)
    init: cst.BaseExpression  # kernel-side initial value
    shape: cst.BaseExpression  # call-site shape tuple
    dtype: cst.BaseExpression  # call-site dtype


def planner(analysis) -> dict:
    out: dict = {}
    for loop, uses in uses_by_loop(analysis, carries=True):
        try:
            outcome: Outcome = _plan(analysis, loop, uses)
        except (_Refuse, CallSiteError, RegionError) as exc:
            outcome = Refusal(NAME, str(exc))
        for use in uses:
            out[use_key(use)] = outcome
    return out


def _plan(analysis, loop: LoopInfo, uses: list[IndexUse]) -> FixPlan:
    ctx = analysis.ctx
    site = uses[0].kernel_site
    if site is None or site.kernel is None:
        raise _Refuse("the kernel is not defined in this module")
    if site.backend is Backend.TRITON:
        raise _Refuse("Triton runs grid axes as independent programs, so a reduction cannot live on a grid axis")
    if site.backend is Backend.UNKNOWN:
        raise _Refuse("the backend is unknown (no compiler_params or backend import); name it with --backend tpu|mosaic-gpu")
    if loop.kind != "fori_loop":
        raise _Refuse("only lax.fori_loop reductions are lifted (pl.loop with init_carry is not yet)")
    if sum(1 for s in analysis.sites if s.kernel is site.kernel) > 1:
        raise _Refuse(f"kernel `{site.kernel_name}` is used by more than one pallas_call")
    kernel_env = analysis.detection.envs.get(site.kernel)
    cs = CallSite(ctx, site, kernel_env)
    region = loop_region(analysis, site, loop, reduction=True)
    translate = grid_translator(ctx, site, cs)

    accesses = ref_accesses(analysis, region, loop)
    blocks: list[RefBlock] = []
    for ref, group in accesses.items():
        slot = cs.slots.get(ref)
        if slot is None:
            raise _Refuse(f"`{ref}` is not a kernel parameter pallas-fix can map to an operand")
        if not group.lifted:
            if group.written:
                raise _Refuse(f"the loop body writes `{ref}`; only the carry may change between iterations")
            continue
        if slot.kind == "out":
            raise _Refuse(f"the output `{ref}` is sliced by the loop index, so its block could not stay resident")
        if slot.kind != "in":
            raise _Refuse(f"`{ref}` is a {slot.kind} buffer; only inputs can be blocked along the reduction")
        if any(is_write(ctx, s) for s in group.subscripts):
            raise _Refuse(f"the loop body writes `{ref}`")
        if group.unlifted_accesses:
            raise _Refuse(f"`{ref}` is also accessed without the loop index inside the loop")
        dim, size_expr, size_env, index = block_index_of(group, loop, ref)
        size = translate(size_expr, size_env)
        if size is None:
            raise _Refuse(f"the block size `{code(size_expr)}` of `{ref}` cannot be written at the pallas_call")
        blocks.append(RefBlock(ref, dim, size, index, [(s, {dim}) for s in group.subscripts]))
    if not blocks:
        raise _Refuse("no ref is sliced by the loop index in block-shaped windows")
    check_kernel_ref_uses(analysis, site, region, {b.param for b in blocks})

    lower_static = kernel_env.static_int(loop.lower)
    upper_val = kernel_env.value(loop.upper)
    guard: Optional[str] = None
    if upper_val.dynamic:
        if upper_val.origin is not Origin.PROGRAM_ID or lower_static != 0:
            raise _Refuse(f"the trip count `{code(loop.upper)}` is traced and not a function of pl.program_id")
        b = blocks[0]
        full = cs.kernel_shape_dim(b.param, b.dim)
        if full is None:
            raise _Refuse(f"cannot write the full length of `{b.param}` at the pallas_call for the causal axis")
        trip = cst.parse_expression(f"{paren_text(code(full))} // {paren_text(code(b.size))}")
        guard = code(loop.upper)
    else:
        trip = region.trip_count(translate)
        if trip is None:
            raise _Refuse(f"the trip count ({code(loop.lower)} to {code(loop.upper)}) cannot be written at the pallas_call")

    leaves = _carry_leaves(analysis, region, loop, cs, translate)
    semantics = "arbitrary" if site.backend is Backend.TPU else "sequential"
    axis = NewAxis(trip=trip, name=loop.index_name, semantics=semantics)
    call_edits = CallEdits(cs, blocks, axis)
    scratch_alias, scratch_import = _scratch_alias(ctx, site.backend)
    ctor = "VMEM" if site.backend is Backend.TPU else "SMEM"
    scratch_codes = [f"{scratch_alias}.{ctor}({code(l.shape)}, {code(l.dtype)})" for l in leaves]
    _add_scratch(cs, call_edits, scratch_codes)
    edits = call_edits.build()
    for b in blocks:
        for sub, dims in b.subscripts:
            edits[sub] = kernel_subscript_edit(dims)

    pl = pallas_alias(ctx)
    ax = len(cs.grid)
    holder: dict[str, list] = {"effects": [], "after": []}
    effects = _side_effect_statements(ctx, region)
    for stmt in effects:
        edits[stmt] = _capture(holder["effects"])
    for stmt in region.after:
        edits[stmt] = _capture(holder["after"])
    lifted_ids = {id(el) for b in blocks for sub, dims in b.subscripts for n, el in enumerate(sub.slice) if n in dims}
    need_index = region.index_needed(lifted_ids) or guard is not None
    body_holder: dict[str, cst.CSTNode] = {}
    if region.body_def_stmt is not None:
        def remove_def(updated):
            body_holder["body"] = updated
            body_holder["comments"] = [l for l in updated.leading_lines if l.comment is not None]
            return cst.RemovalSentinel.REMOVE

        edits[region.body_def_stmt] = remove_def

    carry_names = _carry_param_names(region, leaves)
    pid = f"{pl}.program_id({ax})"

    def replace_loop(updated: cst.CSTNode):
        body = body_holder.get("body") if region.body_def_stmt is not None else _lambda_of(updated)
        if body is None:
            raise RegionError("the loop body is defined after the loop")
        stmts, result = _body_and_result(body, region)
        out: list[cst.BaseStatement] = []
        step_id = pid
        if need_index:
            out.append(_stmt(f"{loop.index_name} = {region.index_value_text(pid)}"))
            if region.index_value_text(pid) == pid:
                step_id = loop.index_name
        init_body = list(holder["effects"]) + [_stmt(f"{l.ref}[...] = {code(l.init)}") for l in leaves]
        out.append(_when_def(pl, f"{step_id} == 0", "_init", init_body))
        step = _load(carry_names, leaves) + stmts + _store(result, leaves)
        if guard is not None:
            out.append(_when_def(pl, f"{loop.index_name} < {guard}", "_step", step))
        else:
            step[0] = _with_blank_line(step[0])
            out.extend(step)
        # Comments above the loop and above `def body` stay with the code that replaces them.
        comments = [l for l in getattr(updated, "leading_lines", ()) if l.comment is not None]
        comments += body_holder.get("comments", [])  # type: ignore[arg-type]
        if comments and hasattr(out[0], "leading_lines"):
            first = out[0]
            lines = list(first.leading_lines)
            blank = [l for l in lines if l.comment is None][:1]
            out[0] = first.with_changes(leading_lines=blank + comments + [l for l in lines if l.comment is not None])
        return cst.FlattenSentinel(out)

    edits[region.statement] = replace_loop
    target_names = _result_names(region)

    def finish_kernel(fn: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(fn, cst.FunctionDef)
        fn = _add_params(fn, [l.ref for l in leaves])
        after = list(holder["after"])
        if after or target_names:
            used = {x.value for st in after for x in walk(st) if isinstance(x, cst.Name)}
            loads = [_stmt(f"{name} = {leaf.ref}[...]") for name, leaf in zip(target_names, leaves) if name in used]
            if after:
                last = f"{pid} == {pl}.num_programs({ax}) - 1"
                fdef = _when_def(pl, last, "_finalize", loads + after)
                body = fn.body
                fn = fn.with_changes(body=body.with_changes(body=[*body.body, fdef]))
        return strip_leading_blank_lines(fn)

    edits[site.kernel] = finish_kernel
    removable = list(region.dead_slice_statements(lifted_ids))
    if guard is None:
        removable += list(region.bound_stmts)  # the causal guard still reads the bound
    removable += [st for st in _init_only_statements(ctx, region, loop) if st not in removable and st not in effects]
    for stmt in removable:
        remove_statement(edits, stmt, siblings_of(ctx, stmt))
    needs_pl = cs.needs_pallas_import()

    def rewrite(module: cst.Module) -> cst.Module:
        new = apply_edits(module, edits)[0]
        if needs_pl:
            new = add_pallas_import(new)
        if scratch_import is not None:
            new = _add_import(new, *scratch_import)
        return drop_unused_loop_imports(new)

    description = (
        f"lifted the reduction over `{loop.index_name}` in `{site.kernel_name}` into sequential grid axis {ax}"
        f" with scratch {', '.join(l.ref for l in leaves)}"
    )
    return FixPlan(NAME, FixSafety.UNSAFE, uses, description, rewrite, site=site)


# -- carries ----------------------------------------------------------------------------------------
def _carry_leaves(analysis, region, loop: LoopInfo, cs: CallSite, translate) -> list[Leaf]:
    ctx = analysis.ctx
    env = analysis.detection.envs.get(region.site.kernel)
    init = loop.init
    if init is None:
        raise _Refuse("the loop has no initial carry")
    init = ctx.resolve_value(init, loop.call) if isinstance(init, cst.Name) else init
    items = [e.value for e in init.elements] if isinstance(init, (cst.Tuple, cst.List)) else [init]
    names = _leaf_names(region, len(items))
    taken = {p.name.value for p in region.site.kernel.params.params} | {p.name.value for p in region.site.kernel.params.kwonly_params}
    leaves = []
    for name, item in zip(names, items):
        item = ctx.resolve_value(item, loop.call) if isinstance(item, cst.Name) else item
        if isinstance(item, (cst.Tuple, cst.List)):
            raise _Refuse("nested carry tuples are not lifted")
        shape, dtype = _shape_dtype(ctx, item)
        if shape is None:
            raise _Refuse(f"cannot tell the shape and dtype of the carry `{code(item)}`; write it as jnp.zeros(shape, dtype)")
        shape_cs = translate(shape, env)
        dtype_cs = translate(dtype, env)
        if shape_cs is None or dtype_cs is None:
            raise _Refuse(f"the carry shape `{code(shape)}` cannot be written at the pallas_call")
        if isinstance(shape_cs, cst.Tuple) and not shape_cs.elements:
            raise _Refuse("scalar carries are not lifted yet (give the carry a shape such as (1, 1))")
        ref = f"{name}_ref"
        if ref in taken:
            ref = f"{name}_scratch_ref"
        while ref in taken:
            ref = f"{ref}_"
        taken.add(ref)
        leaves.append(Leaf(name, ref, item, shape_cs, dtype_cs))
    return leaves


def _leaf_names(region, n: int) -> list[str]:
    names = _result_names(region)
    if len(names) == n and all(names):
        return names
    unpack = _unpack_names(region)
    if unpack is not None and len(unpack) == n:
        return unpack
    if n == 1 and region.carry_name:
        return [region.carry_name]
    return [f"carry{i}" for i in range(n)]


def _result_names(region) -> list[str]:
    stmt = region.statement
    small = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) else None
    if isinstance(small, cst.Assign):
        t = small.targets[0].target
        if isinstance(t, cst.Name):
            return [t.value]
        return [e.value.value for e in t.elements]  # type: ignore[union-attr]
    return []


def _unpack_names(region) -> Optional[list[str]]:
    """`m, l, o = carry` as the body's first use of its carry."""
    body = region.body
    if not isinstance(body, cst.FunctionDef) or region.carry_name is None:
        return None
    for stmt in _stmts(body):
        if isinstance(stmt, cst.SimpleStatementLine) and isinstance(stmt.body[0], cst.Assign):
            a = stmt.body[0]
            if isinstance(a.value, cst.Name) and a.value.value == region.carry_name:
                t = a.targets[0].target
                if isinstance(t, (cst.Tuple, cst.List)) and all(isinstance(e.value, cst.Name) for e in t.elements):
                    return [e.value.value for e in t.elements]
    return None


def _carry_param_names(region, leaves: list[Leaf]):
    """How the body refers to its carry: one name, or the names it unpacks the tuple into."""
    unpack = _unpack_names(region)
    if unpack is not None and len(unpack) == len(leaves):
        return ("unpack", unpack)
    if len(leaves) == 1:
        return ("single", [region.carry_name or leaves[0].name])
    raise _Refuse("the body uses its tuple carry without unpacking it (`a, b = carry`)")


def _shape_dtype(ctx, item: cst.BaseExpression):
    if not isinstance(item, cst.Call):
        return None, None
    q = ctx.imports.qualify(item.func) or ""
    if q not in _ZERO_CTORS:
        return None, None
    pos = [a.value for a in item.args if a.keyword is None]
    kw = {a.keyword.value: a.value for a in item.args if a.keyword is not None}
    shape = kw.get("shape", pos[0] if pos else None)
    if q == "jax.numpy.full":
        dtype = kw.get("dtype", pos[2] if len(pos) > 2 else None)
    else:
        dtype = kw.get("dtype", pos[1] if len(pos) > 1 else None)
    if shape is None:
        return None, None
    if dtype is None:
        jnp = next((k for k, v in ctx.imports.bindings.items() if v == "jax.numpy"), None)
        if jnp is None:
            return None, None
        dtype = cst.parse_expression(f"{jnp}.float32")
    if isinstance(shape, cst.Integer):
        shape = cst.Tuple([cst.Element(shape)])
    return shape, dtype


# -- statements ---------------------------------------------------------------------------------
def _body_and_result(body: cst.CSTNode, region):
    """(statements before the return, the returned expression) of the updated body."""
    if isinstance(body, cst.Lambda):
        return [], body.body
    assert isinstance(body, cst.FunctionDef)
    stmts = list(body.body.body)
    last = stmts[-1]
    if not (isinstance(last, cst.SimpleStatementLine) and isinstance(last.body[-1], cst.Return)):
        raise RegionError("the loop body does not end with `return`")
    ret = last.body[-1]
    rest = stmts[:-1] if len(last.body) == 1 else stmts[:-1] + [last.with_changes(body=last.body[:-1])]
    unpack = _unpack_names(region)
    if unpack is not None:
        rest = [s for s in rest if not _is_unpack_of(s, region.carry_name)]
    return rest, ret.value


def _is_unpack_of(stmt, carry: Optional[str]) -> bool:
    return (
        isinstance(stmt, cst.SimpleStatementLine)
        and isinstance(stmt.body[0], cst.Assign)
        and isinstance(stmt.body[0].value, cst.Name)
        and stmt.body[0].value.value == carry
    )


def _load(carry_names, leaves: list[Leaf]) -> list[cst.BaseStatement]:
    kind, names = carry_names
    if kind == "single":
        return [_stmt(f"{names[0]} = {leaves[0].ref}[...]")]
    return [_stmt(f"{n} = {l.ref}[...]") for n, l in zip(names, leaves)]


def _store(result: Optional[cst.BaseExpression], leaves: list[Leaf]) -> list[cst.BaseStatement]:
    if result is None:
        raise RegionError("the loop body returns nothing")
    if len(leaves) == 1:
        return [_stmt(f"{leaves[0].ref}[...] = {code(result)}")]
    if isinstance(result, (cst.Tuple, cst.List)) and len(result.elements) == len(leaves):
        values = [e.value for e in result.elements]
        if all(isinstance(v, cst.Name) for v in values):
            return [_stmt(f"{l.ref}[...] = {code(v)}") for l, v in zip(leaves, values)]
        targets = ", ".join(f"{l.ref}[...]" for l in leaves)
        return [_stmt(f"{targets} = {', '.join(code(v) for v in values)}")]
    raise RegionError("the loop body does not return a tuple matching its carry")


def _stmt(text: str) -> cst.BaseStatement:
    return cst.parse_statement(text + "\n")


def _when_def(pl: str, cond: str, name: str, body: list[cst.BaseStatement]) -> cst.FunctionDef:
    fn = cst.parse_statement(f"@{pl}.when({cond})\ndef {name}():\n    pass\n")
    assert isinstance(fn, cst.FunctionDef)
    body = [_strip_leading(body[0])] + body[1:] if body else [cst.SimpleStatementLine([cst.Pass()])]
    return fn.with_changes(
        body=fn.body.with_changes(body=body),
        leading_lines=[cst.EmptyLine(indent=False)],
    )


def _strip_leading(stmt):
    if hasattr(stmt, "leading_lines"):
        return stmt.with_changes(leading_lines=[l for l in stmt.leading_lines if l.comment is not None])
    return stmt


def _with_blank_line(stmt):
    if hasattr(stmt, "leading_lines"):
        return stmt.with_changes(leading_lines=[cst.EmptyLine(indent=False), *stmt.leading_lines])
    return stmt


def _capture(bucket: list):
    def edit(updated):
        bucket.append(updated)
        return cst.RemovalSentinel.REMOVE

    return edit


def _lambda_of(node):
    for n in walk(node):
        if isinstance(n, cst.Lambda):
            return n
    return None


def _side_effect_statements(ctx, region) -> list[cst.BaseStatement]:
    """Statements before the loop that write refs or copy: they must run once, on the first step."""
    out = []
    for stmt in region.before:
        if stmt in region.bound_stmts:
            continue
        effect = False
        for node in _own(stmt):
            if isinstance(node, (cst.Assign, cst.AugAssign)):
                targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
                if any(isinstance(t, cst.Subscript) for t in targets):
                    effect = True
            if isinstance(node, cst.Call):
                q = ctx.imports.qualify(node.func) or ""
                if q in N.COPIES or (isinstance(node.func, cst.Attribute) and node.func.attr.value in ("start", "wait")):
                    effect = True
            if isinstance(node, cst.FunctionDef) and node.decorators:
                raise _Refuse(f"the kernel runs decorated `{node.name.value}` before the loop")
        if effect:
            written = {
                _base_name(t.target)
                for n in _own(stmt)
                if isinstance(n, cst.Assign)
                for t in n.targets
                if isinstance(t.target, cst.Subscript)
            } | {_base_name(n.target) for n in _own(stmt) if isinstance(n, cst.AugAssign) and isinstance(n.target, cst.Subscript)}
            later = region.before[region.before.index(stmt) + 1 :]
            for other in later:
                names = {x.value for x in walk(other) if isinstance(x, cst.Name)}
                clash = sorted(w for w in written if w and w in names)
                if clash:
                    raise _Refuse(
                        f"`{clash[0]}` is written before the loop and read again before it; moving the write to the "
                        "first grid step would reorder them"
                    )
            assigned = {
                t.target.value
                for n in _own(stmt)
                if isinstance(n, cst.Assign)
                for t in n.targets
                if isinstance(t.target, cst.Name)
            }
            if assigned:
                raise _Refuse(f"a statement before the loop both writes a ref and defines {sorted(assigned)}")
            out.append(stmt)
    return out


def _base_name(target: cst.BaseExpression) -> Optional[str]:
    base = target.value if isinstance(target, cst.Subscript) else target
    if isinstance(base, cst.Attribute) and base.attr.value == "at":
        base = base.value
    return base.value if isinstance(base, cst.Name) else None


def _init_only_statements(ctx, region, loop: LoopInfo) -> list[cst.BaseStatement]:
    """`acc = jnp.zeros(...)` before the loop whose only reader is the loop's init: the value moves
    into `_init`, so the statement would be dead."""
    if loop.init is None:
        return []
    kernel = region.site.kernel
    found = []
    for stmt in region.before:
        if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assign)):
            continue
        assign = stmt.body[0]
        targets = assign.targets[0].target if len(assign.targets) == 1 else None
        names = [targets] if isinstance(targets, cst.Name) else [e.value for e in getattr(targets, "elements", [])]
        if not names or not all(isinstance(n, cst.Name) for n in names):
            continue
        ok = True
        init_leaves = [loop.init] + [e.value for e in getattr(loop.init, "elements", [])]
        for n in names:
            readers = [x for x in walk(kernel) if isinstance(x, cst.Name) and x.value == n.value and x is not n]
            # Only the init itself may read it (`(o, m, l)`), not arithmetic that builds it.
            if not readers or not all(any(r is leaf for leaf in init_leaves) for r in readers):
                ok = False
        if ok:
            found.append(stmt)
    return found


def _add_params(fn: cst.FunctionDef, names: list[str]) -> cst.FunctionDef:
    params = list(fn.params.params)
    comma = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    if params:
        params[-1] = params[-1].with_changes(comma=comma)
    for i, n in enumerate(names):
        last = i == len(names) - 1
        has_more = bool(fn.params.star_arg) if isinstance(fn.params.star_arg, cst.Param) else fn.params.kwonly_params
        params.append(cst.Param(cst.Name(n), comma=comma if (not last or has_more) else cst.MaybeSentinel.DEFAULT))
    return fn.with_changes(params=fn.params.with_changes(params=params))


def _add_scratch(cs: CallSite, edits: CallEdits, codes: list[str]) -> None:
    existing = cs.site.kw("scratch_shapes")
    if existing is None:
        edits.new_keywords.append(("scratch_shapes", "[" + ", ".join(codes) + "]"))
        return
    value = cs.ctx.resolve_value(existing, cs.site.call)
    if not isinstance(value, (cst.List, cst.Tuple)):
        raise _Refuse("scratch_shapes is not a literal list")
    items = [code(e.value) for e in value.elements] + codes
    text = ("[" + ", ".join(items) + "]") if isinstance(value, cst.List) else ("(" + ", ".join(items) + ",)")
    edits.edits[value] = lambda _n, t=text: cst.parse_expression(t)


def _scratch_alias(ctx, backend: Backend) -> tuple[str, Optional[tuple[str, str, str]]]:
    module = N.TPU if backend is Backend.TPU else N.MOSAIC_GPU
    for local, full in ctx.imports.bindings.items():
        if full == module:
            return local, None
    alias = "pltpu" if backend is Backend.TPU else "plgpu"
    if alias in ctx.imports.bindings:
        raise _Refuse(f"the name `{alias}` is taken; import {module} under some alias first")
    leaf = "tpu" if backend is Backend.TPU else "mosaic_gpu"
    return alias, ("jax.experimental.pallas", leaf, alias)


def _add_import(module: cst.Module, mod: str, name: str, alias: str) -> cst.Module:
    from libcst.codemod import CodemodContext
    from libcst.codemod.visitors import AddImportsVisitor

    context = CodemodContext()
    AddImportsVisitor.add_needed_import(context, mod, name, alias)
    return AddImportsVisitor(context).transform_module(module)




RECIPE = Recipe(
    NAME,
    frozenset({"PF102"}),
    planner,
    command="LiftReduction",
    description="Lift fori_loop reductions into sequential grid axes with scratch carries (R2, PF102).",
)
