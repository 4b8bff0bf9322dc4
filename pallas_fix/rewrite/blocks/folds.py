"""Block indices that read a program id folded into quotient and remainder (`b = pid // H`,
`h = pid % H`): the divisors written at the pallas_call and proved positive there, and the
outputs whose blocks such an index may visit again."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from pallas_fix.core.plans import Refuse
from pallas_fix.rewrite.blocks.blockspecs import ResidentOutput
from pallas_fix.rewrite.blocks.plan import BlockIndexExpr
from pallas_fix.rewrite.callsite.spelling.operands import CallSiteError
from pallas_fix.rewrite.callsite.reading import CallSite
from pallas_fix.rewrite.proofs.bounds import Bounds
from pallas_fix.rewrite.text.syntax import code
from pallas_fix.rewrite.text.translate import Translator


def folds_at_call(ctx, cs: CallSite, ref: str, index: BlockIndexExpr, env, refuse: bool) -> Optional[BlockIndexExpr]:
    """`index` with the divisors of its folded program ids written at the pallas_call, each
    proved positive there: the index_map computes `//` and `%` on a program id, never negative,
    so only a positive divisor gives the kernel's parts whichever rounding the kernel used
    (`lax.div` truncates). None (or a refusal, with `refuse`) otherwise."""
    if not index.folds:
        return index
    translator = Translator(ctx, cs.site, cs.kernel_shape_dim)
    bounds = None
    folds = []
    for mult, axis, op, divisor in index.folds:
        try:
            text = translator(divisor, env)
        except CallSiteError:
            text = None
        if text is None:
            if not refuse:
                return None
            raise Refuse(f"the block index of `{ref}` computes `pl.program_id({axis}) {op} {code(divisor)}`, and "
                         f"`{code(divisor)}` cannot be written at the pallas_call (a name only the kernel has, a parameter "
                         "the kernel rebinds, or one the wrapper binds to something else), so the index_map cannot "
                         "compute the same part; pass the "
                         "divisor to the kernel from the wrapper (a `functools.partial` keyword) or use a module "
                         "constant the wrapper does not rebind to get this fix")
        bounds = bounds or Bounds(cs)
        value = bounds.prover.substitute(bounds.poly(text))
        # Sizes (dims, block counts, static sizes) are positive atoms (analysis.loops.symbolic): a sum of
        # them with positive coefficients is positive; `H - 1` or a literal 0 is not.
        if not value.terms or any(c <= 0 for _m, c in value.terms):
            if not refuse:
                return None
            raise Refuse(f"the block index of `{ref}` computes `pl.program_id({axis}) {op} {code(divisor)}`, and "
                         f"pallas-fix cannot prove `{code(text)}` positive at the pallas_call; `//` and `%` by a zero "
                         "or negative divisor do not give the parts the kernel used, so the index_map would name other "
                         f"blocks; assert `{code(text)} > 0` before the pallas_call to get this fix")
        folds.append((mult, axis, op, text))
    return BlockIndexExpr(dict(index.axes), index.offset, index.symbolic, tuple(folds))


def check_folded_output(cs: CallSite, ref: str, index: BlockIndexExpr) -> None:
    """An output block is copied out when the block index changes and never copied in, so a
    step that revisits a block after others must write all of it. `pid // H` alone visits each
    block in consecutive steps (resident, as an accumulator's block is), which a "parallel" axis
    may split between two cores; `pid % H` alone comes back to block 0 after H steps, with only
    its own rows written. So an output's remainder waits for its quotient (the pair names one
    block per step), and its quotient alone stays off "parallel" axes."""
    slot = cs.slots.get(ref)
    if slot is None or slot.kind != "out" or not index.folds:
        return
    spec = cs.spec_of(slot)
    _, _, semantics = cs.dimension_semantics()
    for _mult, axis, op, divisor in index.folds:
        partner = "//" if op == "%" else "%"
        if _in_spec(spec, axis, partner, divisor):
            continue
        part = f"`{BlockIndexExpr({}, folds=((1, axis, op, divisor),)).render({axis: f'pl.program_id({axis})'})}`"
        if op == "%":
            raise ResidentOutput(f"the output `{ref}` would come back to the block at {part} every "
                                 f"{code(divisor)} steps of grid axis {axis}, with only that step's part written (output blocks "
                                 "are copied out, never in); the quotient "
                                 f"`{BlockIndexExpr({}, folds=((1, axis, '//', divisor),)).render({axis: f'pl.program_id({axis})'})}` must index the output's "
                                 "BlockSpec first, which pallas-fix does for a window or a scalar beside no window: "
                                 "index the output by the quotient's window, or lift it by hand, to get this fix",
                                 ref, frozenset({axis}))
        if semantics is not None and semantics[axis:axis + 1] == ["parallel"]:
            raise Refuse(f"the output `{ref}`'s block at {part} is shared by consecutive steps of grid axis {axis}, "
                         "which is \"parallel\": a chip with two cores may split those steps and each core would "
                         "write its copy of the block back; declare the axis \"arbitrary\", or shape the output "
                         "`(B * H, ...)` and index it by the program id itself, to get this fix")


def fold_note(index: BlockIndexExpr) -> str:
    """What the fix message says about folded program ids: the index_map divides the same way."""
    if not index.folds:
        return ""
    parts = ", ".join(f"`{BlockIndexExpr({}, folds=((1, axis, op, d),)).render({axis: f'pl.program_id({axis})'})}`"
                      for _, axis, op, d in index.folds)
    return f"; its index_map computes {parts} as the kernel did (one grid axis, folded, as written)"


def _in_spec(spec, axis: int, op: str, divisor: cst.BaseExpression) -> bool:
    """The spec's index_map already returns `g op divisor` for grid axis `axis` in some dim."""
    if spec.index_exprs is None or axis >= len(spec.index_params):
        return False
    want = BlockIndexExpr({}, folds=((1, axis, op, divisor),)).render({axis: spec.index_params[axis]})
    return any(code(e) == want for e in spec.index_exprs)
