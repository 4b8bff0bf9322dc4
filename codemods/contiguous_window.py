"""An integer-array index that is a contiguous range becomes the `pl.ds` window it reads (fixes PF108).

Before (the Triton idiom for a ragged block):
    rows = i * bm + jnp.arange(bm)
    cols = j * bn + jnp.arange(bn)
    x = pltriton.load(x_ref.at[rows[:, None], cols[None, :]], mask=mask, other=0.0)
After:
    x = pltriton.load(x_ref.at[pl.ds(i * bm, bm), pl.ds(j * bn, bn)], mask=mask, other=0.0)

A range is `start + jnp.arange(n)` with a scalar start (`lax.iota(dtype, n)`, `jnp.arange(n)`
alone, `lax.broadcasted_iota(dtype, (n, 1), 0)`; `analysis.values.ranges`). The window is then
an ordinary `pl.ds` window: a later round of `--apply` asks the lifts about it, and where none
applies its finding says why, as for a window written that way. The mask, `other` and every other
use of `rows` stay as they are.

Preconditions (each failure is a refusal with the reason):
- every integer-array index of the subscript is a range written in the subscript itself (not one
  whose lanes `jnp.where(valid, rows, 0)` sends elsewhere: a window past the end is clamped whole,
  moving the lanes kept), and the integer indices (ranges and scalars) are adjacent: numpy puts a
  gather's dims first otherwise;
- the windows have the gather's shape: range k lies along axis k of the ranges' broadcast
  (`rows[:, None], cols[None, :]`, `rows[:, None], cols`; one range unbroadcast), or the broadcast
  has a dim for every integer index and a scalar fills each dim no range lies along
  (`x_ref.at[rows[:, None], k]` is (bm, 1): `x_ref.at[pl.ds(start, bm), pl.ds(k, 1)]`);
- start and size mean at the subscript what they mean where the range is built;
- a `.at[...]` view is read or written by a subscript or by Triton's `load` / `store` (whose
  masked forms pad a window past the end instead of clamping it), not passed to another call.

Unsafe, applied once verified: outside the ref the two differ. The integer array clamps each
index past the end on its own (a read repeats the last element; a write drops the lanes) and
wraps a negative one around; an unmasked window is clamped whole (moved to fit), a masked `load` /
`store` pads it. They agree wherever the window stays inside the ref or the mask covers the lanes
outside it, which is how Triton code is written (`mask = rows < n`), but pallas-fix does not
prove it.
"""

from __future__ import annotations

import libcst as cst

from pallas_fix.analysis.in_place import atomic_refusal
from pallas_fix.analysis.values.ranges import Range, contiguous_range, redirected_range, unhinted
from pallas_fix.analysis.values.same_value import same_value_at
from pallas_fix.core import names as N
from pallas_fix.core.model import FixSafety, IndexUse, Origin
from pallas_fix.core.plans import FixPlan, Outcome, Recipe, Refuse
from pallas_fix.rewrite import common as C
from pallas_fix.rewrite.text.libcst_scopes import scope_at
from pallas_fix.rewrite.text import imports
from pallas_fix.rewrite.text.edits import apply_edits, remove_statement
from pallas_fix.rewrite.text.statements import siblings_of

NAME = "contiguous-window"
CODE = "PF108"

# Where a `.at[...]` view with a window may go: Triton's masked load and store (and Pallas's own,
# as older code spells them), which read a window past the end through padding.
_VIEW_CALLS = frozenset(
    {N.TRITON + ".load", N.TRITON + ".store", N.PALLAS + ".load", N.PALLAS + ".store"}
)


def plan_use(analysis, use: IndexUse) -> tuple[Outcome, frozenset[int]]:
    """The windows of the use's subscript, with those of every subscript that shares a range name
    with it (one plan, so that a range's binding, once no subscript reads it, goes with it)."""
    ctx = analysis.ctx
    if use.kind != "int_array":
        raise Refuse(f"only integer-array indices are read as windows; this is a {use.kind} index")
    pl = imports.spelling_at(ctx, imports.PALLAS, use.subscript)
    if pl is None:
        raise Refuse("the module has no name for `jax.experimental.pallas` and `pl` is already used for something else")
    windows = {use.subscript: _windows(analysis, use, pl.text)}
    dead = _group(analysis, windows, pl.text)
    edits: dict = {}
    changes = []
    for sub, dims in sorted(windows.items(), key=lambda item: ctx.span(item[0]).line):
        edits[sub] = _edit(dims)
        changes.append(f"`{ctx.code(sub)}` → `{C.code_of(edits[sub](sub))}`")
    for stmt in dead:
        remove_statement(edits, stmt, siblings_of(ctx, stmt))
        changes.append(f"`{ctx.code(stmt).strip()}` goes, no longer read")

    def rewrite(module: cst.Module) -> cst.Module:
        new, _ = apply_edits(module, edits)  # type: ignore[arg-type]
        if dead:  # the ranges' bindings went: so may the imports only they read
            new = imports.drop_unused_loop_imports(new, module, imports.RANGE_IMPORTS)
        return imports.add_imports(new, [pl.add])

    description = (
        f"{CODE} line {C.line(ctx, use.subscript)}: index with the windows the ranges read: " + "; ".join(changes)
        + "; unsafe: outside the ref an unmasked window is clamped whole where the integer array clamped (or wrapped) each index"
    )
    plan = FixPlan(NAME, FixSafety.UNSAFE, [use], description, rewrite, site=use.kernel_site)
    return plan, frozenset(id(n) for n in edits)


def _edit(windows: dict):
    def edit(updated: cst.Subscript) -> cst.Subscript:
        elements = list(updated.slice)
        for dim, window in windows.items():
            elements[dim] = elements[dim].with_changes(slice=cst.Index(value=window))
        return updated.with_changes(slice=elements)

    return edit


def _group(analysis, windows: dict, pl: str) -> list[cst.SimpleStatementLine]:
    """Add to `windows` every subscript that reads a range name one of them reads (and that can
    take its windows); the bindings of the names no longer read anywhere once they have."""
    ctx = analysis.ctx
    int_array_uses = {id(u.subscript): u for u in analysis.uses if u.kind == "int_array"}
    todo = list(windows)
    chains: dict = {}  # id of a chain's first statement -> the chain (_bindings_of)
    while todo:
        sub = todo.pop()
        for name in _range_names(sub):
            chain = _bindings_of(ctx, name)
            if not chain or id(chain[0][0]) in chains:
                continue
            chains[id(chain[0][0])] = chain
            for read in _plain_reads(ctx, chain):
                other = _subscript_read_in(ctx, read)
                use = int_array_uses.get(id(other)) if other is not None else None
                if use is None or other in windows:
                    continue
                try:
                    windows[other] = _windows(analysis, use, pl)
                except Refuse:
                    continue
                todo.append(other)
    dead = []
    for chain in chains.values():
        # A range and the hints rebinding it go together or stay together: a hint kept on a line it
        # shares (`rows = pl.multiple_of(rows, bm); s = 2.0`) would read a range no longer bound.
        lines = [ctx.parent(stmt) for stmt, _assignment in chain]
        if any(not isinstance(line, cst.SimpleStatementLine) or len(line.body) != 1 for line in lines):
            continue
        if all(_subscript_read_in(ctx, read) in windows for read in _plain_reads(ctx, chain)):
            dead.extend(lines)
    return dead


def _bindings_of(ctx, name: cst.Name) -> list[tuple[cst.Assign, object]]:
    """The plain assignments that make the range `name` reads: its one binding, or the range then
    alignment hints that rebind it (`rows = pm * bm + jnp.arange(bm)`, then `rows =
    pltriton.max_contiguous(pl.multiple_of(rows, bm), bm)`, statements of one body in that order,
    each hint reading the name only as what it wraps); empty for anything else."""
    assignment, stmt, _ = C.single_binding(ctx, name)
    if stmt is not None:
        return [(stmt, assignment)]
    scope = scope_at(ctx, name)
    found = [a for a in scope[name.value]] if scope is not None else []
    chain = []
    for a in found:
        holder = ctx.parent(a.node)
        stmt = ctx.parent(holder) if isinstance(holder, cst.AssignTarget) else None
        if not (isinstance(stmt, cst.Assign) and len(stmt.targets) == 1 and stmt.targets[0].target is a.node):
            return []
        chain.append((stmt, a))
    lines = [ctx.parent(stmt) for stmt, _a in chain]
    body = ctx.parent(lines[0]) if lines else None
    if len(chain) < 2 or any(ctx.parent(line) is not body for line in lines):
        return []
    chain.sort(key=lambda link: ctx.span(link[0]).line)
    for stmt, _a in chain[1:]:
        wrapped = unhinted(ctx, stmt.value)
        inner = [n for n in C.reads(chain[0][1]) if any(a is stmt.value for a in ctx.ancestors(n))]
        if wrapped is stmt.value or inner != [wrapped]:
            return []
    return chain


def _plain_reads(ctx, chain: list) -> list[cst.Name]:
    """The reads of the chain's name other than those its own hints wrap. (LibCST links a read to
    every binding of its name in the scope, so the first binding's references are all of them.)"""
    hints = [stmt.value for stmt, _a in chain[1:]]
    return [n for n in C.reads(chain[0][1]) if not any(a is v for a in ctx.ancestors(n) for v in hints)]


def _range_names(sub: cst.Subscript) -> list[cst.Name]:
    """The names an index of `sub` reads a range through: `rows`, `rows[:, None]`."""
    out = []
    for el in sub.slice:
        value = el.slice.value if isinstance(el.slice, cst.Index) else None
        if isinstance(value, cst.Subscript):
            value = value.value
        if isinstance(value, cst.Name):
            out.append(value)
    return out


def _subscript_read_in(ctx, read: cst.Name):
    """The ref subscript whose index `read` is (`x_ref[rows]`, `x_ref[rows[:, None], ...]`), or None."""
    node = read
    parent = ctx.parent(node)
    if isinstance(parent, cst.Subscript) and parent.value is node:
        node, parent = parent, ctx.parent(parent)
    holder = ctx.parent(parent) if isinstance(parent, cst.Index) else None
    sub = ctx.parent(holder) if isinstance(holder, cst.SubscriptElement) else None
    return sub if isinstance(sub, cst.Subscript) else None


def _windows(analysis, use: IndexUse, pl: str) -> dict:
    """{dim: the `pl.ds` window that replaces its index} for the use's subscript; refused when the
    subscript's gather is not these windows."""
    ctx = analysis.ctx
    sub = use.subscript
    if not isinstance(sub, cst.Subscript):
        raise Refuse(atomic_refusal(use))  # an index passed to an atomic: nothing to rewrite in place
    env = use.env
    kinds = [_element_kind(env, el) for el in sub.slice]
    ranges = [(dim, k) for dim, k in enumerate(kinds) if isinstance(k, Range)]
    if "new axis" in kinds:
        raise Refuse(f"`{ctx.code(sub)}` adds a new axis (`None`) beside its integer arrays; broadcast the range itself")
    for el, k in zip(sub.slice, kinds):
        redirected = redirected_range(env, el.slice.value) if k == "array" else None
        if redirected is not None:
            where, r = redirected
            start = ctx.code(r.start) if r.start is not None else "0"
            raise Refuse(
                f"`{ctx.code(el.slice.value)}` is the range `pl.ds({start}, {ctx.code(r.size)})` with some lanes sent elsewhere"
                f" (`{ctx.code(where)}`), which no window reads: past the end a window is clamped whole, moving the lanes"
                " that are kept; pad the array to whole windows and index the window (on Triton, a masked `load` of the"
                " window reads the lanes past the end as padding)"
            )
    if use.provenance.origin is Origin.REF_LOAD and (any(k == "array" for k in kinds) or not ranges):
        raise Refuse(
            f"`{ctx.code(sub)}` gathers at integer arrays computed from data the kernel loads"
            f" ({use.provenance.description}): a data-dependent gather, which no window or BlockSpec expresses;"
            " it stays as it is (the array stays whole on chip)"
        )
    if any(k == "array" for k in kinds) or not ranges:
        raise Refuse(
            f"an integer-array index of `{ctx.code(sub)}` is not a contiguous range `start + jnp.arange(n)` written in the"
            " subscript (a step, a reversal, a wrap around the end (`% n`) or a table read through the range"
            " picks elements no window can); only a range is a `pl.ds(start, n)` window"
        )
    gathered = [dim for dim, k in enumerate(kinds) if isinstance(k, Range) or k == "scalar"]
    if gathered != list(range(gathered[0], gathered[-1] + 1)):
        raise Refuse(
            f"the integer indices of `{ctx.code(sub)}` are not adjacent, so the gather puts its dims first where"
            " `pl.ds` windows keep them in place; write the windows as `pl.ds(start, n)` and index the result"
        )
    ones = _size_one_windows(ctx, sub, kinds, gathered, [r for _, r in ranges])
    _check_view(ctx, use, sub)
    windows = {}
    for dim, r in ranges:
        for part in (r.start, r.size):
            if part is not None and not same_value_at(ctx, part, sub):
                raise Refuse(
                    f"`{ctx.code(part)}` of the range at dim {dim} of `{ctx.code(sub)}` may change between where the range"
                    " is built and where it is indexed; build the range next to the subscript"
                )
        start = ctx.code(r.start) if r.start is not None else "0"
        windows[dim] = cst.parse_expression(f"{pl}.ds({start}, {ctx.code(r.size)})")
    for dim in ones:
        scalar = sub.slice[dim].slice.value
        if not _not_negative(ctx, env, scalar):
            raise Refuse(
                f"the index `{ctx.code(scalar)}` beside the ranges of `{ctx.code(sub)}` would become `pl.ds({ctx.code(scalar)}, 1)`,"
                " which means the same only for an index that is not negative (the gather wraps a negative index around,"
                " the window clamps it); index with a `pl.program_id`, a Python int or the `k` of `for k in range(n)`"
            )
        windows[dim] = cst.parse_expression(f"{pl}.ds({ctx.code(scalar)}, 1)")
    return windows


def _not_negative(ctx, env, expr: cst.BaseExpression) -> bool:
    """A Python int >= 0, the `k` of `for k in range([0,] n)`, or `pl.program_id(...)` itself."""
    static = env.static_int(expr)
    if static is not None:
        return static >= 0
    if isinstance(expr, cst.Name):
        loop = C.range_loop(ctx, expr)
        if loop is not None:
            args = [a.value for a in loop.iter.args]  # type: ignore[attr-defined]
            low = env.static_int(args[0]) if len(args) == 2 else 0
            return len(args) <= 2 and low is not None and low >= 0
        expr = env.reaching_assignment(expr) or expr
    return isinstance(expr, cst.Call) and ctx.imports.is_(expr.func, N.PROGRAM_ID)


def _size_one_windows(ctx, sub: cst.Subscript, kinds: list, gathered: list[int], ranges: list[Range]) -> list[int]:
    """The dims whose integer scalar must become a one-element window for the windows to have the
    gather's shape; refused when no such choice gives it.

    The gather's dims are the broadcast of its ranges (numpy aligns their shapes on the right),
    put where its integer indices are. Either range k lies along axis k of a broadcast of as many
    dims as there are ranges (`rows[:, None], cols` or `rows[:, None], cols[None, :]`: scalars
    beside them drop their dims, as in the window form), or the broadcast has a dim for every
    integer index (`rows[:, None], k`: (bm, 1)), the scalars filling the dims no range lies along,
    and each such scalar becomes `pl.ds(k, 1)`."""
    rank = max(r.rank for r in ranges)
    aligned = [r.axis + rank - r.rank for r in ranges]
    if len(ranges) == rank and aligned == list(range(rank)):
        return []
    if rank == len(gathered):
        positions = [gathered.index(dim) for dim, k in enumerate(kinds) if isinstance(k, Range)]
        if aligned == positions:
            return [dim for dim in gathered if kinds[dim] == "scalar"]
    raise Refuse(
        f"the ranges of `{ctx.code(sub)}` broadcast to a shape that `pl.ds` windows in their dims do not have"
        f" (their broadcast has {rank} dims, laid along {', '.join(str(a) for a in aligned)}); index each dim with its"
        " range broadcast as `rows[:, None], cols[None, :]`, or write the windows as `pl.ds(start, n)`"
    )


def _element_kind(env, el: cst.SubscriptElement):
    """A `Range`, "scalar" (an integer index), "array" (another integer array), "new axis" or "basic"
    (a slice, a `pl.ds` window, `...`)."""
    sl = el.slice
    if isinstance(sl, cst.Slice) or isinstance(sl.value, cst.Ellipsis) or env.ds_call(sl.value) is not None:
        return "basic"
    if isinstance(sl.value, cst.Name) and sl.value.value == "None":
        return "new axis"
    found = contiguous_range(env, sl.value)
    if found is not None:
        return found
    val = env.value(sl.value)
    if val.vtype == "int" and (val.dynamic or isinstance(sl.value, (cst.Integer, cst.Name, cst.BinaryOperation))):
        return "scalar"
    return "array"


def _check_view(ctx, use: IndexUse, sub: cst.Subscript) -> None:
    if not use.via_at:
        return
    parent = ctx.parent(sub)
    if isinstance(parent, cst.Subscript) and parent.value is sub:
        return  # `x_ref.at[rows][...]`: the view is read or written whole
    call = ctx.parent(parent) if isinstance(parent, cst.Arg) else None
    if isinstance(call, cst.Call) and call.args and call.args[0] is parent and ctx.imports.is_(call.func, _VIEW_CALLS):
        return
    raise Refuse(
        f"the view `{ctx.code(sub)}` is passed on, not read or written by a subscript or Triton's `load` / `store`;"
        " pallas-fix cannot tell how the callee treats a window past the end"
    )


RECIPE = Recipe(
    NAME, frozenset({CODE}), C.start_planner(NAME, CODE, plan_use), command="ContiguousWindow",
    description="Read an integer-array index that is a contiguous range (`start + jnp.arange(n)`, broadcast for an"
    " outer product) as the `pl.ds(start, n)` window it is (PF108).",
)
