"""Program-id windows at an offset inside their program's block (issue 28).

`o_ref[pl.ds(i * bm + c * 8, 8), :]` with `i = pl.program_id(0)` and `c` walking `range(bm // 8)`
is no block of 8 rows numbered by `i`, but it is a window of the program's block of `bm` rows:
start = pid * B + r, and every window [r, r + size) lies in [0, B). A Pallas expert writes
`pl.BlockSpec((bm, ...), lambda i: (i, 0))` and keeps the inner walk in the kernel,
`o_ref[pl.ds(c * 8, 8), :]`, now inside the block (the two-level form of JAX's flash attention,
block_k_major / block_k). :func:`offset_window` reads that form and proves 0 <= r <= B - size for
every value r takes, from the ranges of static `for` loops and `lax.fori_loop` / `pl.loop`
indices and the facts the code states (rewrite.proofs.bounds); the kernel-side edit drops the
`pid * B` term from the start.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import libcst as cst

from pallas_fix.analysis.context import walk
from pallas_fix.analysis.loops.affine import Affine, Coeff, decompose
from pallas_fix.analysis.loops.symbolic import Poly
from pallas_fix.analysis.in_place import rewritable_in_place
from pallas_fix.analysis.loops.windows import hooks_for, window_of
from pallas_fix.analysis.values.bindings import bound_names
from pallas_fix.core import names as N
from pallas_fix.core.model import IndexUse
from pallas_fix.core.plans import Refuse
from pallas_fix.rewrite.inblock.for_ranges import for_range_iter
from pallas_fix.rewrite.inblock.window_messages import past_block
from pallas_fix.rewrite.proofs.bounds import Bounds
from pallas_fix.rewrite.text.syntax import code, paren_text
from pallas_fix.rewrite.text.translate import Translator


@dataclass(frozen=True)
class OffsetWindow:
    """start = pl.program_id(axis) * B + rest: B the block size (call-site text), `rest` the
    kernel's start inside the block, `dropped` the `pid * B` part of the start that goes."""

    axis: int
    block: cst.BaseExpression  # B, written at the call site
    block_key: str  # B as the kernel spells it: windows of one ref must agree on it
    rest: cst.BaseExpression
    dropped: cst.BaseExpression  # what the rewrite no longer reads (dead_assignments)
    ds: cst.Call  # the `pl.ds(...)`, in the subscript or bound to the name the subscript reads
    start_binding: Optional[cst.SimpleStatementLine] = None  # `row = i * bm + c * 8`, the start's name bound


def loop_walked_window(use: IndexUse) -> bool:
    """A window a loop index drives (its finding PF101) whose start also holds one program id's
    term, `pl.ds(i * bm + j * 8, 8)`, and which is no block of its own size: a loop lift cannot
    take it, the program id's block may (program-id-blocks reads it with the program-id windows)."""
    if use.kind != "ds" or use.start is None or use.size is None or use.env is None:
        return False
    start = decompose(use.start, hooks_for(use.env))
    if start is None or sum(1 for k, c in start.terms.items() if c.mult and k.startswith("pid:")) != 1:
        return False
    return window_of(use).block is None


def offset_window(analysis, cs, use: IndexUse, ref: str, ngrid: int) -> Optional[OffsetWindow]:
    """The offset form of `use`'s window, proved inside its program's block; None when the start
    is not `pid * B + r` with one program id (the caller's usual refusal stands); Refuse when it is
    but the proof or the spelling fails, saying what to change."""
    if use.kind != "ds" or use.start is None or use.size is None or use.starred or not rewritable_in_place(use):
        return None  # the window's own refusal (a packed index tuple, *unpacking) says what to change
    env = use.env
    if use.stride is not None and env.static_int(use.stride) != 1:
        return None  # a strided window spans (size - 1) * stride + 1 rows, not size: its own refusal names the stride
    hooks = hooks_for(env)
    start = decompose(use.start, hooks)
    if start is None:
        return None
    pids = [(k, c) for k, c in start.terms.items() if c.mult and k.startswith("pid:")]
    others = {k: c for k, c in start.terms.items() if c.mult and not k.startswith("pid:")}
    if len(pids) != 1 or any(not k.startswith("loop:") for k in others):
        return None
    key, coeff = pids[0]
    axis = int(key.split(":")[1])
    if axis >= ngrid or coeff.mult <= 0:
        return None
    translator = Translator(analysis.ctx, cs.site, cs.kernel_shape_dim)

    def translate(expr: cst.BaseExpression) -> Optional[cst.BaseExpression]:
        return translator(expr, env)

    block = _written(coeff, start, translate)
    b_text = _spelled(coeff)
    if block is None:
        raise Refuse(f"the start of `{ref}` is `pl.program_id({axis}) * {b_text}` plus an offset, but its block size "
                     f"`{b_text}` cannot be written at the pallas_call: pass it to the kernel as a `functools.partial` "
                     "keyword or a module constant")
    bounds = Bounds(cs)
    hint = _hint(analysis.ctx, use.start)
    ds = _slice_call(analysis.ctx, use)
    start_expr, named_start = hint.args[0].value if hint else use.start, None
    if isinstance(start_expr, cst.Name) and ds is not None:  # `row = i * bm + c * 8; pl.ds(row, 8)`
        bound = env.single_assignment(start_expr.value)
        if bound is not None and _same_values(analysis.ctx, bound, use.subscript):
            start_expr, named_start = bound, start_expr
    dropped, rest = _split_start(start_expr, hooks) if ds is not None else (None, None)
    binding = None
    if named_start is not None:
        dropped = named_start  # the name's binding goes with its last reader (dead_start_bindings)
        binding = next(a for a in analysis.ctx.ancestors(start_expr) if isinstance(a, cst.SimpleStatementLine))
    if rest is None:
        raise Refuse(f"the start `{code(use.start)}` of `{ref}` is `pl.program_id({axis}) * {b_text}` plus an offset; "
                     f"write it as `i * {b_text} + offset` (the program id's term added to the offset), in the `pl.ds` or "
                     "bound to a name in the same block as the access, nothing between rebinding what it reads, to get the "
                     "block of each program")
    if hint is not None:  # `pl.multiple_of(i * bm + c * 8, 8)`: the offset keeps the hint where 8 divides bm
        multiple = translate(hint.args[1].value)
        if multiple is None or not bounds.prover.divides(bounds.poly(multiple), bounds.poly(block)):
            raise Refuse(f"the start of `{ref}` is hinted `pl.multiple_of(..., {code(hint.args[1].value)})`, which the offset "
                         f"inside the block of `{b_text}` keeps only where `{code(hint.args[1].value)}` divides `{b_text}`: "
                         f"check it in the wrapper (`assert {b_text} % {code(hint.args[1].value)} == 0`)")
        rest = hint.with_changes(args=[hint.args[0].with_changes(value=rest), *hint.args[1:]])
    size = translate(use.size)
    if size is None:
        raise Refuse(f"the window size `{code(use.size)}` of `{ref}` cannot be written at the pallas_call")
    b_poly = bounds.poly(block)
    sizes = _base_atoms(bounds, b_poly) | _base_atoms(bounds, bounds.poly(size))
    low, high = _offset_range(analysis, cs, use, start, key, bounds, translate, ref, sizes)
    if not bounds.prover.nonneg(low):
        raise Refuse(f"the offset `{code(rest)}` of `{ref}`'s window inside the block of `{b_text}` rows of "
                     f"`pl.program_id({axis})` may be negative; keep it in [0, {b_text} - {code(use.size)}]")
    if not bounds.prover.nonneg(b_poly - bounds.poly(size) - high):
        raise Refuse(past_block(ref, code(rest), code(use.size), b_text, axis, walked=bool(others)))
    named = ds is not use.subscript.slice[use.dim].slice.value
    return OffsetWindow(axis, block, b_text, rest, use.element if named else dropped, ds, binding)


def _spelled(coeff: Coeff) -> str:
    parts = ([str(coeff.mult)] if coeff.mult != 1 or not coeff.factors else []) + [
        paren_text(f) if " " in f else f for f in coeff.factors]
    return " * ".join(parts)


def _written(coeff: Coeff, start: Affine, translate) -> Optional[cst.BaseExpression]:
    """The coefficient `mult * factors...` written at the call site."""
    parts = [str(coeff.mult)] if coeff.mult != 1 or not coeff.factors else []
    for factor in coeff.factors:
        expr = start.factor_exprs.get(factor)
        moved = translate(expr) if expr is not None else None
        if moved is None:
            return None
        text = code(moved)
        parts.append(f"({text})" if " " in text else text)
    return cst.parse_expression(" * ".join(parts))


def _hint(ctx, start: cst.BaseExpression) -> Optional[cst.Call]:
    """`pl.multiple_of(value, k)` written as the start, else None."""
    if (isinstance(start, cst.Call) and ctx.imports.is_(start.func, N.MULTIPLE_OF) and len(start.args) == 2
            and all(a.keyword is None and not a.star for a in start.args)):
        return start
    return None


def _slice_call(ctx, use: IndexUse) -> Optional[cst.Call]:
    """The `pl.ds` whose first positional argument is the start: written in the subscript, or
    bound once to the name the subscript reads (`rows = pl.ds(...)`; `x_ref[rows, :]`) by a
    statement of the same block before it that nothing between them rebinds a name of, so that
    the window written in the subscript reads what the binding read."""
    elements = use.subscript.slice
    if use.dim >= len(elements) or not isinstance(elements[use.dim].slice, cst.Index):
        return None
    element = elements[use.dim].slice.value
    call = use.env.single_assignment(element.value) if isinstance(element, cst.Name) else element
    if not (isinstance(call, cst.Call) and call.args and call.args[0].keyword is None and call.args[0].value is use.start):
        return None
    if call is element or _same_values(ctx, call, use.subscript):
        return call
    return None


def _same_values(ctx, call: cst.BaseExpression, sub: cst.Subscript) -> bool:
    """`call`'s statement and `sub`'s are in one block, the first before the second, and no
    statement from the one to the other binds a name `call` reads."""
    binding = next((a for a in ctx.ancestors(call) if isinstance(a, cst.SimpleStatementLine)), None)
    using = next((a for a in ctx.ancestors(sub) if isinstance(a, cst.BaseStatement)), None)
    if binding is None or using is None or ctx.parent(binding) is not ctx.parent(using):
        return False
    body = list(getattr(ctx.parent(binding), "body", ()))
    if binding not in body or using not in body or body.index(binding) >= body.index(using):
        return False
    read = {n.value for n in walk(call) if isinstance(n, cst.Name)}
    between = body[body.index(binding) + 1: body.index(using) + 1]
    return not any(bound_names(n) & read for stmt in between for n in walk(stmt))


def check_offset_accesses(ctx, cs, ref: str, subscripts: list[cst.Subscript], squeezed: dict[int, int]) -> None:
    """What a block read through offset windows must not do: squeeze other dims (one edit per
    subscript), and, for an output, be read or aliased. Rows of the block no window writes are
    written back from uninitialised VMEM: that is the original's unwritten output too, except
    where the output starts as an aliased input, and a read would see them."""
    if squeezed:
        raise Refuse(f"`{ref}` is windowed at an offset inside its program's block and indexed by a program id along "
                     "another dim; slice that dim with a `pl.ds` window too")
    if cs.slots[ref].kind != "out":
        return
    if cs.aliased:
        raise Refuse(f"`{ref}` is written at an offset inside its program's block and the call sets "
                     "input_output_aliases: the rows of the block the kernel does not write would be written back "
                     "from uninitialised memory instead of keeping the aliased input's values")
    for sub in subscripts:
        parent = ctx.parent(sub)
        if not isinstance(parent, cst.AssignTarget):
            raise Refuse(f"`{ref}` is written at an offset inside its program's block and also read or passed on "
                         f"(line {ctx.span(sub).line}); its block starts uninitialised in every step, so only plain "
                         "stores (`o_ref[pl.ds(...), :] = value`) move into the block")


def _split_start(expr: cst.BaseExpression, hooks) -> tuple:
    """(the `pid * B` operand, the rest) of a start written `pid * B + rest` or `rest + pid * B`
    (nested sums too: `i * bm + c * 8 + 4`); (None, None) for any other spelling."""
    if _only_pid(expr, hooks):  # `pl.ds(i * bm, 8)`: the block's first rows
        return expr, cst.Integer("0")
    if not (isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, (cst.Add, cst.Subtract))) or expr.lpar:
        return None, None
    minus = isinstance(expr.operator, cst.Subtract)
    for mine, other in ((expr.left, expr.right), (expr.right, expr.left))[: 1 if minus else 2]:
        if _only_pid(mine, hooks):
            if _has_pid(other, hooks):
                return None, None
            return mine, _negated(other) if minus else other
    if _has_pid(expr.right, hooks):
        return None, None
    dropped, rest = _split_start(expr.left, hooks)
    if rest is None:
        return None, None
    return dropped, expr.with_changes(left=rest)


def _negated(expr: cst.BaseExpression) -> cst.BaseExpression:
    """`-expr`, parenthesised unless it is an atom."""
    if not isinstance(expr, (cst.Name, cst.Integer, cst.Call, cst.Attribute, cst.Subscript)) and not expr.lpar:
        expr = expr.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    return cst.UnaryOperation(cst.Minus(), expr)


def _only_pid(expr: cst.BaseExpression, hooks) -> bool:
    aff = decompose(expr, hooks)
    return (aff is not None and not any(c.mult for c in aff.const)
            and [k for k, c in aff.terms.items() if c.mult] != [] and all(k.startswith("pid:") for k, c in aff.terms.items() if c.mult))


def _has_pid(expr: cst.BaseExpression, hooks) -> bool:
    aff = decompose(expr, hooks)
    return aff is None or any(c.mult and k.startswith("pid:") for k, c in aff.terms.items())


def _base_atoms(bounds: Bounds, p: Poly) -> set[str]:
    """The plain atoms `p` reads, through the quotients (`bm // 8` reads `bm`)."""
    out: set[str] = set()
    todo = [key for m, _c in p.terms for key in m]
    while todo:
        key = todo.pop()
        atom = bounds.symbols.atoms.get(key)
        if atom is not None and atom.kind != "value":
            todo.extend(k for q in (atom.num, atom.den) if q is not None for m, _c in q.terms for k in m)
        elif key not in out:
            out.add(key)
    return out


def _a_size(bounds: Bounds, p: Poly, sizes: set[str]) -> bool:
    """`p` reads only sizes: the block's, the window's, array dims. The prover takes every atom to
    be positive; that holds for those, not for a loop's lower bound or an offset passed in
    (`range(lo, n)`, `+ off`), which may be negative where the original still ran."""
    return all(key in sizes or ".shape[" in key for key in _base_atoms(bounds, p))


def _offset_range(analysis, cs, use: IndexUse, start: Affine, pid_key: str, bounds: Bounds, translate, ref: str,
                  sizes: set[str]) -> tuple[Poly, Poly]:
    """(lowest, highest) value of the start less its program-id term, as call-site polynomials:
    each term a product of sizes and loop variables, each loop variable at the end of its range
    that bounds the term from below or above (every size is positive, every range starts >= 0)."""
    env = use.env
    low, high = Poly(), Poly()
    terms = [(c, ()) for c in start.const] + [(c, (k,)) for k, c in start.terms.items() if c.mult and k != pid_key]
    for coeff, atoms in terms:
        lo, hi = Poly.const(coeff.mult), Poly.const(coeff.mult)
        for factor in coeff.factors:
            f_lo, f_hi = _factor_range(env, start.factor_exprs.get(factor), translate, bounds, ref, sizes)
            lo, hi = lo * f_lo, hi * f_hi
        for key in atoms:
            it = _iterations(env, start.atoms[key], translate, bounds, ref)
            lo, hi = lo * Poly.const(0), hi * it
        if coeff.mult < 0:
            lo, hi = hi, lo
        low, high = low + lo, high + hi
    return low, high


def _factor_range(env, expr: Optional[cst.BaseExpression], translate, bounds: Bounds, ref: str,
                  sizes: set[str]) -> tuple[Poly, Poly]:
    """A static factor: a size (one value the call site can write) or the variable of a Python
    `for v in range(n)` / `range(a, b)` (0 <= a <= v <= b - 1)."""
    if expr is None:
        raise Refuse(f"the offset of `{ref}`'s window reads a value pallas-fix cannot bound")
    loop_range = _range_of(env, expr)
    if loop_range is not None:
        lower, upper = loop_range
        lo = bounds.poly(translate(lower)) if lower is not None and translate(lower) is not None else None
        up = translate(upper)
        if (lower is not None and lo is None) or up is None:
            raise Refuse(f"the bounds of the loop over `{code(expr)}` cannot be written at the pallas_call")
        lo = lo if lo is not None else Poly()
        if not bounds.prover.nonneg(lo) or not _a_size(bounds, lo, sizes):
            raise Refuse(f"the loop over `{code(expr)}` may start below 0 (its start `{code(lower)}` is no block or window "
                         "size, which pallas-fix could take as positive); start it at 0 or at a size")
        return lo, bounds.poly(up) - Poly.const(1)
    moved = translate(expr)
    if moved is None:
        raise Refuse(f"the offset of `{ref}`'s window reads `{code(expr)}`, which cannot be written at the pallas_call")
    value = bounds.poly(moved)
    if not _a_size(bounds, value, sizes):
        raise Refuse(f"the offset of `{ref}`'s window reads `{code(expr)}`, which is no block or window size: it may be "
                     "negative, and the window then starts before its program's block")
    return value, value


def _range_of(env, expr: cst.BaseExpression) -> Optional[tuple]:
    """(lower or None, upper) of the `for` over `range(...)` (step 1) that binds the name `expr`
    once; None for anything else."""
    if not isinstance(expr, cst.Name):
        return None
    owner = env.owner(expr.value)
    binds = owner.bindings().get(expr.value, []) if owner is not None else []
    call = for_range_iter(env.ctx, expr, binds)  # one `for`, or the one around `expr` (rewrite.inblock.for_ranges)
    if not (isinstance(call, cst.Call) and isinstance(call.func, cst.Name) and call.func.value == "range"):
        return None
    args = [a.value for a in call.args if a.keyword is None and not a.star]
    if len(args) != len(call.args) or not 1 <= len(args) <= 2:
        return None
    return (None, args[0]) if len(args) == 1 else (args[0], args[1])


def _iterations(env, index: cst.BaseExpression, translate, bounds: Bounds, ref: str) -> Poly:
    """The last iteration number of the `lax.fori_loop` / `pl.loop` whose index is `index`
    (the affine term already carries its lower bound and step): upper - 1, for a loop from 0 by 1."""
    owner = env.owner(index.value) if isinstance(index, cst.Name) else None
    val = owner.params.get(index.value) if owner is not None else None
    loop = getattr(val, "loop", None)
    if loop is None or env.induction_of(index) is not None:
        raise Refuse(f"the offset of `{ref}`'s window moves with `{code(index)}`, whose range pallas-fix cannot read")
    if env.static_int(loop.lower) != 0 or (loop.step is not None and env.static_int(loop.step) != 1):
        raise Refuse(f"the loop over `{code(index)}` does not run from 0 by 1; write its index from 0 and add the "
                     "lower bound to the offset")
    upper = translate(loop.upper)
    if upper is None:
        raise Refuse(f"the trip count `{code(loop.upper)}` of the loop over `{code(index)}` cannot be written at the pallas_call")
    return bounds.poly(upper) - Poly.const(1)


def dead_start_bindings(ctx, kernel: cst.CSTNode, offsets: list[OffsetWindow]) -> list[cst.SimpleStatementLine]:
    """The `row = i * bm + c * 8` statements (inside loops too, where dead_assignments does not
    look) whose every reader is a start the plan writes at its offset: nobody reads them after it."""
    gone = {id(o.dropped) for o in offsets}
    out = []
    for stmt in dict.fromkeys(o.start_binding for o in offsets if o.start_binding is not None):
        assign = stmt.body[0]
        if not (len(stmt.body) == 1 and isinstance(assign, cst.Assign) and len(assign.targets) == 1
                and isinstance(assign.targets[0].target, cst.Name)):
            continue
        target = assign.targets[0].target
        readers = [n for n in walk(kernel) if isinstance(n, cst.Name) and n.value == target.value and n is not target]
        if all(id(n) in gone for n in readers):
            out.append(stmt)
    return out


def ragged_offsets(ref: str) -> str:
    """Why windows at an offset are not moved into a block that may be partial."""
    return (f"`{ref}`'s windows sit at offsets inside a block whose last one may be partial (a `pl.cdiv` grid): "
            "the original's windows past the array's end are clamped back inside it, a partial block's are padded "
            "or masked; make the grid `m // bm` and check `m % bm == 0` in the wrapper")


def offset_subscript_edit(dim: int, offset: OffsetWindow):
    """The kernel-side edit: the window at `dim` becomes the offset window inside the block,
    written in the subscript (a named slice's binding stays for whoever else reads it)."""
    start = offset.rest

    def edit(node: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(node, cst.Subscript)
        elements = list(node.slice)
        el = elements[dim]
        args = list(offset.ds.args)
        args[0] = args[0].with_changes(value=start)
        elements[dim] = el.with_changes(slice=el.slice.with_changes(value=offset.ds.with_changes(args=args)))
        return node.with_changes(slice=elements)

    return edit
