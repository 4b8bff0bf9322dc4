"""Is a dynamic slice a block? Connects detection's environments to the affine decomposer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import libcst as cst

from pallas_fix.core import names as N
from pallas_fix.analysis.loops.affine import fold_parts, folded_index, shifted_fold, symbolic_block_index, symbolic_offset, Affine, BlockIndex, Coeff, Hooks, block_index, decompose, provably_not_block
from pallas_fix.analysis.in_place import packed_refusal, rewritable_in_place
from pallas_fix.core.model import IndexUse, Origin
from pallas_fix.analysis.values.provenance import Env


def loop_key(loop) -> str:
    return f"loop:{id(loop.call)}"


def hooks_for(env: Env, folds: bool = False) -> Hooks:
    """`folds`: read `pl.program_id(k) // n` and `% n` (n static) as atoms (affine.fold_atom)."""
    ctx = env.ctx

    def atom_key(expr: cst.BaseExpression) -> Optional[str]:
        if isinstance(expr, cst.Call) and ctx.imports.is_(expr.func, N.PROGRAM_ID) and expr.args:
            axis = env.static_int(expr.args[0].value)
            # Negative axes count from the end of a grid the window cannot see: no atom.
            return None if axis is None or axis < 0 else f"pid:{axis}"
        if isinstance(expr, cst.Name):
            carry = env.induction_of(expr)  # a carry stepping with the loop: its index's atom
            if carry is not None:
                return loop_key(carry.loop)
            owner = env.owner(expr.value)
            if owner is not None and env.param_reaches(expr):
                val = owner.params[expr.value]
                if val.origin is Origin.LOOP and val.loop is not None and val.is_index:
                    return loop_key(val.loop)
                if val.dynamic:
                    return f"param:{expr.value}@{id(owner.scope)}"
        return None

    def atom_bounds(expr: cst.BaseExpression) -> tuple:
        if isinstance(expr, cst.Name):
            carry = env.induction_of(expr)
            if carry is not None:  # `init + step * k` (analysis.loops.induction)
                return carry.induction.init, carry.induction.step
            owner = env.owner(expr.value)
            if owner is not None and env.param_reaches(expr):
                val = owner.params[expr.value]
                loop = val.loop
                if loop is not None and val.is_index:
                    lower = None if env.static_int(loop.lower) == 0 else loop.lower
                    step = None if loop.step is None or env.static_int(loop.step) == 1 else loop.step
                    return lower, step
        return None, None

    def strip(expr: cst.BaseExpression) -> Optional[cst.BaseExpression]:
        if isinstance(expr, cst.Call) and ctx.imports.is_(expr.func, N.MULTIPLE_OF) and expr.args:
            return expr.args[0].value
        if isinstance(expr, cst.Call) and ctx.imports.is_(expr.func, N.INT_DTYPES) and len(expr.args) == 1:
            inner = expr.args[0].value
            if env.value(inner).dynamic:
                return inner
        return None

    return Hooks(
        is_dynamic=lambda e: env.value(e).dynamic,
        atom_key=atom_key,
        atom_bounds=atom_bounds,
        static_int=env.static_int,
        inline=env.reaching_assignment,
        strip=strip,
        code=ctx.code,
        folds=folds,
    )


@dataclass
class Window:
    start: Optional[Affine]
    size: Optional[Coeff]
    block: Optional[BlockIndex]  # set when the window provably is a block
    not_block: bool  # set when it provably is not one
    reason: str = ""
    # A block whose index has a symbolic offset (`nb - 1 - i`), for planners that can write the
    # offset at the call site and prove it in bounds; `block` stays None so others refuse.
    symbolic_block: Optional[BlockIndex] = None


def window_of(use: IndexUse, folds: bool = False) -> Window:
    """`folds`: a block index may read quotients and remainders of program ids (`fold:` atoms)."""
    env: Env = use.env  # type: ignore[assignment]
    if use.starred:
        return Window(None, None, None, False, unknown_dims_refusal(use))
    if not rewritable_in_place(use):
        return Window(None, None, None, False, packed_refusal(use))
    if use.kind == "scalar":
        return scalar_window(use, folds)
    if use.kind != "ds" or use.start is None:
        return Window(None, None, None, False, "not a pl.ds window")
    if use.size is None:
        return Window(None, None, None, True, "the slice has no static size")
    if use.size_provenance is not None and use.size_provenance.origin is not Origin.STATIC:
        return Window(None, None, None, True, f"its size `{env.ctx.code(use.size)}` is traced (dynamic size)")
    if use.stride is not None and env.static_int(use.stride) != 1:  # a stride pallas-fix cannot read may be 2
        return Window(None, None, None, True, f"it has stride {env.ctx.code(use.stride)}")
    hooks = hooks_for(env, folds)
    start = decompose(use.start, hooks)
    size_aff = decompose(use.size, hooks_for(env))
    size = size_aff.as_coeff() if size_aff is not None else None
    if start is not None and size is None and size_aff is not None and size_aff.is_static():
        # `pl.ds(t * tile, tile + halo)`: the window is the stride plus something, so
        # consecutive windows overlap (a halo) and cannot be blocks.
        size_terms = {c.factors: c.mult for c in size_aff.const}
        for coeff in start.terms.values():
            if coeff.mult and size_terms.get(coeff.factors) == coeff.mult and len(size_terms) > 1:
                return Window(
                    start,
                    None,
                    None,
                    True,
                    f"the window `{env.ctx.code(use.size)}` is larger than the stride of "
                    f"`{env.ctx.code(use.start)}`: consecutive windows overlap",
                )
    if start is None or size is None:
        why = fold_reason(use.start, hooks) or _traced_lower(use, env) or "the start is not an affine function of the index"
        return Window(start, size, None, False, why)
    blk = block_index(start, size)
    if blk is not None:
        return Window(start, size, blk, False)
    unfollowed = _unfollowed_parameter(use, start)
    if unfollowed:
        return Window(start, size, None, False, unfollowed)
    if provably_not_block(start, size):
        return Window(
            start,
            size,
            None,
            True,
            f"start `{env.ctx.code(use.start)}` is not a multiple of the window size `{env.ctx.code(use.size)}`"
            " (overlapping or unaligned windows)",
        )
    symbolic = symbolic_offset(start, size)
    if symbolic is not None:
        return Window(start, size, None, False,
                      f"the window starts {symbolic} blocks in, an offset pallas-fix cannot compute from the code "
                      "(a loop's lower bound, say); it numbers blocks from constant offsets only",
                      symbolic_block_index(start, size))
    return Window(start, size, None, False, f"cannot prove `{env.ctx.code(use.start)}` is a multiple of `{env.ctx.code(use.size)}`")


_ONE = Coeff(1)


def _unfollowed_parameter(use: IndexUse, start: Affine) -> Optional[str]:
    """Why a start read as a helper's parameter (a `param:` atom, a value its caller passes) is
    neither a block nor provably not one: the parameter stands for whatever the call passes
    (`i * tile` is a multiple of `tile`), which `helper_calls.caller_window` could not read
    together with the window size; None when the start has no such atom."""
    env: Env = use.env  # type: ignore[assignment]
    for key, coeff in start.terms.items():
        expr = start.atoms.get(key)
        if not (coeff.mult and key.startswith("param:") and isinstance(expr, cst.Name)):
            continue
        owner = env.owner(expr.value)
        call = owner.received_from(expr.value) if owner is not None else None
        if call is None:
            continue
        size = env.ctx.code(use.size) if use.size is not None else "?"
        return (f"the start `{env.ctx.code(use.start)}` reads the parameter `{expr.value}`, whose value comes from the call "
                f"`{env.ctx.code(call.func)}(...)` at line {env.ctx.span(call).line}, and pallas-fix could not read that argument "
                f"together with the window size `{size}`: it follows a start into a caller only when the helper passes the "
                "parameter to `pl.ds` as it is (or through `pl.multiple_of`) and the size is an argument too, or a module "
                "constant; pass the size as an argument of the helper (or build the `pl.ds` in the caller)")
    return None


def _traced_lower(use: IndexUse, env: Env) -> Optional[str]:
    """Why the index of a loop that starts at a traced value (`fori_loop(pl.program_id(0), n)`)
    reads as no affine start: the loop's first index is data, not 0 plus steps."""
    loop = use.provenance.loop if use.provenance is not None else None
    if loop is None or not env.value(loop.lower).dynamic:
        return None
    return (f"the loop starts at `{env.ctx.code(loop.lower)}`, a traced value, so its index is not a count of steps "
            "from 0, which a grid axis's index is")


def fold_reason(expr: cst.BaseExpression, hooks: Hooks) -> Optional[str]:
    """Why a start computed from a quotient or remainder of a traced index (`i_nh % H`,
    `lax.div(t, nn)`) is refused, and what to write instead; None for other starts."""
    fold = folded_index(expr, hooks)
    if fold is None:
        shifted = shifted_fold(expr, hooks)
        if shifted is None:
            return None
        return (f"it is computed from `{hooks.code(shifted)}`, which divides a value that moves with a grid or loop index "
                "without being the index itself: it may be negative, where `//` and `%` (floor) and `lax.div` / `lax.rem` "
                "(truncation) disagree, and its parts are not blocks pallas-fix can bound; divide the index itself "
                "(`pid // H`, `pid % H`) and add the offset to the parts")
    parts = fold_parts(fold, hooks)
    divided = decompose(parts[0], hooks) if parts is not None else None
    if divided is not None and any(k.startswith("pid:") for k, c in divided.terms.items() if c.mult):
        return (f"it is computed from `{hooks.code(fold)}`, a quotient or remainder that splits one grid index into "
                "two; only program-id-blocks writes such parts into an index_map: give each part its own grid axis "
                "(a grid `(B, H)` read with two `pl.program_id`s) to get this fix here")
    return (f"it is computed from `{hooks.code(fold)}`, a quotient or remainder that splits one loop index into two; "
            "a lifted loop becomes one grid axis that index_maps add up, never divide: write two nested loops (one "
            "per part), or make the flat loop a grid `(n_i * n_j,)` read with `pl.program_id`, whose quotient and "
            "remainder program-id-blocks moves into the index_maps, to get this fix")


def scalar_window(use: IndexUse, folds: bool = False) -> Window:
    """A scalar index `a * i + b` is a window of size 1, and every integer start is a block index
    of a size-1 block: the start itself, once it is affine in loop indices and program ids with
    static integer coefficients (`r * bs` with `bs` a static name is not: its block index is not
    a number pallas-fix can write)."""
    env: Env = use.env  # type: ignore[assignment]
    assert use.start is not None
    hooks = hooks_for(env, folds)
    start = decompose(use.start, hooks)
    if start is None:
        return Window(None, _ONE, None, False, fold_reason(use.start, hooks)
                      or f"the scalar index `{env.ctx.code(use.start)}` is not an affine function of the index")
    symbolic = [c for c in [*start.terms.values(), *start.const] if c.mult and c.factors]
    if symbolic:
        # `n - 1 - i` (a reversed index, `n` a static size): a block index with a symbolic
        # offset, for the planners that write it at the call site and prove it in bounds.
        return Window(start, _ONE, None, False,
                      f"the scalar index `{env.ctx.code(use.start)}` has a coefficient pallas-fix cannot compute from the code",
                      symbolic_block_index(start, _ONE))
    return Window(start, _ONE, block_index(start, _ONE), False)


def unknown_dims_refusal(use: IndexUse) -> str:
    """Why a window after a `*name` or `...` in its index is not moved: its dim is not known."""
    if use.after_ellipsis:
        return ("`...` comes before it in the index, so its dim depends on how many dims `...` stands for; "
                "pallas-fix takes it only where the call site states the ref's rank and `...` stands for one dim: "
                "spell the dims before it (`x_ref[:, :, pl.ds(...)]`)")
    return "the index tuple is built with *unpacking, so its dims are not known"
