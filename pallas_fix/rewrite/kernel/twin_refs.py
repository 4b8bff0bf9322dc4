"""A program_id window of an input the kernel also reads elsewhere, lifted by passing the array a
second time (R3 through a twin operand; codemods/program_id_blocks).

    own = x_ref[pl.ds(pl.program_id(0) * bq, bq)]      # the program's query block
    ... x_ref[pl.ds(k * BK, BK)] ...                   # a loop over every tile of the same ref

The loop keeps `x_ref` whole; the window cannot become x_ref's BlockSpec. On Triton a BlockSpec
is a pointer offset into the operand, not a copy, so the call passes `x` again with the window's
BlockSpec, the kernel gains `x_block_ref` (after its last input), and the window reads the whole
block of it: no added memory traffic. The lift itself is program-id-blocks' own plan for the new
ref: the twin is written into the tree, the tree analysed again, and that plan run on it, so the
twin exists only with the lift it makes possible (a refused lift leaves the file as it was).

On TPU and Mosaic GPU every operand with a BlockSpec is copied into on-chip memory: the twin
would be a second copy of the array, a second full read. An output read both ways is refused on
every backend: two refs aliasing one output are not safe.
"""

from __future__ import annotations

from typing import Callable, Optional

import libcst as cst

from pallas_fix.analysis.accesses import only_waited
from pallas_fix.analysis.context import walk
from pallas_fix.analysis.result import analyze
from pallas_fix.core import names as N
from pallas_fix.core.model import Backend, IndexUse, Origin
from pallas_fix.core.plans import FixPlan, Refuse
from pallas_fix.rewrite.callsite.reading import CallSite
from pallas_fix.rewrite.callsite.spelling.repeated_specs import repeated_items
from pallas_fix.rewrite.kernel.ref_access import is_write, ref_base
from pallas_fix.rewrite.text.edits import apply_edits
from pallas_fix.rewrite.text.scopes import bindings, param_names, underscored
from pallas_fix.rewrite.text.syntax import code, elements


class Unwindowed(Refuse):
    """A ref whose program_id window is not its only access: the reason names the first other one."""


# Where the pipeline copies each operand with a BlockSpec, per backend that copies.
_COPIES = {Backend.TPU: ("TPU", "VMEM"), Backend.MOSAIC_GPU: ("Mosaic GPU", "shared memory")}


def unwindowed(analysis, ref: str, dim: int, node: cst.Subscript, windows: list[IndexUse]) -> Refuse:
    """Why an access of `ref` gives no window: a descriptor rebuilt only to wait has its window,
    which detection reads as moving no data (red team 14: it was called 'without a window'); the
    window along another dim in the other arm of an `if`, a layout a flag picks (_flag_layout)."""
    ctx = analysis.ctx
    line = ctx.span(node).line
    layout = _flag_layout(analysis, ref, dim, node, windows)
    if layout is not None:
        return Unwindowed(layout)  # on Triton a twin operand can still take the one arm's window
    if only_waited(ctx, node):
        return Refuse(f"`{ref}` is also named by a DMA descriptor built only to be waited (line {line}, "
                      "`make_async_copy(...).wait()`), which pallas-fix does not re-base onto the block; wait on the "
                      "descriptor that started the copy instead (`c = pltpu.make_async_copy(...)`, `c.start()`, `c.wait()`)")
    return Unwindowed(f"`{ref}` is also accessed without a program_id window along dim {dim} (line {line})")


def _flag_layout(analysis, ref: str, dim: int, node: cst.Subscript, windows: list[IndexUse]) -> Optional[str]:
    """`if trans_b: b_ref.at[g, cols, ks] else: b_ref.at[g, ks, cols]`: the same program-id window
    along `dim` in one arm and along another dim in the other. No one BlockSpec has both block
    shapes (a twin operand can take one arm's window, on Triton)."""
    ctx = analysis.ctx
    other = next((u for u in analysis.uses if u.subscript is node and u.dim != dim and u.provenance.origin is Origin.PROGRAM_ID
                  and u.provenance.program_id_axis == windows[0].provenance.program_id_axis), None) if windows else None
    branch = next((b for w in windows if (b := _opposite_arms(ctx, w.subscript, node)) is not None), None) if other else None
    if branch is None:
        return None
    test = " ".join(code(branch[0].test).split())
    here = f"under `if {test}:`" if branch[1] else f"in the `else` of `if {test}:`"
    there = f"in its `else` (line {ctx.span(node).line})" if branch[1] else f"under the `if` (line {ctx.span(node).line})"
    return (f"`{ref}` is windowed by the program id along dim {dim} {here} (line {ctx.span(branch[2]).line}) and along dim "
            f"{other.dim} {there}: the flag picks which dim the window moves along, and one BlockSpec has one block shape "
            "and index_map (pallas-fix writes no spec chosen by a flag; a kernel per layout, picked at the call with its own "
            "in_specs, or the array transposed in the wrapper would give the window one dim)")


def _opposite_arms(ctx, a: cst.CSTNode, b: cst.CSTNode) -> Optional[tuple[cst.If, bool, cst.CSTNode]]:
    """The innermost `if` statement holding both `a` and `b` when they sit in its two arms:
    (it, whether `a` is in its body, `a`); None when they share an arm or no `if` holds both."""
    above_b = list(ctx.ancestors(b))
    for node in ctx.ancestors(a):
        if isinstance(node, cst.If) and any(x is node for x in above_b):
            in_body = any(x is node.body for x in ctx.ancestors(a))
            if node.orelse is None or in_body == any(x is node.body for x in above_b):
                return None
            return node, in_body, a
    return None


def twin_plan(analysis, cs: CallSite, ref: str, dim: int, windows: list[IndexUse], why: Unwindowed,
              replan: Callable[..., FixPlan], windowed: Callable) -> FixPlan:
    """Program-id-blocks' plan for the twin of `ref` that takes its `windows`, as one plan on the
    original tree; Refuse (saying what the twin would cost, or why it cannot be written) else."""
    slot = cs.slots[ref]
    if len(cs.site.variants) > 1:
        raise Refuse(f"{why}; pallas-fix passes no second operand to a call whose kernel has variants")
    if slot.kind == "out":
        raise Refuse(f"{why}: the output `{ref}` is accessed both at its program_id window and elsewhere; lifting the "
                     "window would take a second ref to the same output, and two refs aliasing one output are not safe")
    backend = cs.site.backend
    arg = code(slot.arg) if slot.arg is not None else ref
    if backend is not Backend.TRITON:
        cost = (f"on {_COPIES[backend][0]} the pipeline copies every operand with a BlockSpec into {_COPIES[backend][1]}, so "
                f"`{arg}` would be copied twice (a second full read of the array beside the whole one the other reads "
                "need)") if backend in _COPIES else (
                "on an unknown backend that may copy the array twice (TPU and Mosaic GPU copy every operand with a "
                "BlockSpec, a second full read); on Triton, where a BlockSpec is only a pointer offset, pass `--backend triton`")
        raise Refuse(f"{why}; lifting the window would pass `{arg}` to the pallas_call a second time with the window's "
                     f"BlockSpec, and {cost}")
    try:
        edits, new = _twin_edits(analysis, cs, ref, [u.subscript for u in windows], arg)
    except Refuse as refused:
        raise Refuse(f"{why}; {refused}") from None
    module = apply_edits(analysis.ctx.module, edits)[0]
    twin = analyze(module.code, analysis.path, analysis.config)
    kernel = cs.site.kernel.name.value
    groups = [(key, uses) for key, uses in windowed(twin).items()
              if key[1] == new and key[2] == dim and uses[0].kernel_site.kernel.name.value == kernel]
    if len(groups) != 1:
        raise Refuse(f"{why}; the twin `{new}` that would take the window is not read as one window")
    uses = groups[0][1]
    try:
        lift = replan(twin, new, dim, uses)
    except Refuse as refused:
        raise Refuse(f"{why}; passing `{arg}` a second time as `{new}` would not lift either: {refused}") from None
    original = analysis.ctx.module

    def rewrite(tree: cst.Module) -> cst.Module:
        if tree is not original:  # the twin's plan addresses nodes of the tree analysed from this one
            raise ValueError("the tree changed under the twin operand's plan")
        return lift.rewrite(twin.ctx.module)

    # The lift's own words, said of the user's ref: its window now reads the twin's block.
    said = lift.description.replace(f"`{new}`", f"`{ref}`", 1).replace(" into its BlockSpec", f" into the BlockSpec of `{new}`", 1)
    note = (f"{said}, `{arg}` passed a second time for it (the other reads keep `{ref}` whole); "
            "on Triton a BlockSpec is a pointer offset into the same array, so this adds no memory traffic")
    return FixPlan(lift.codemod, lift.safety, windows, note, rewrite, site=cs.site, guards=lift.guards,
                   pipelined=lift.pipelined, divided_only=lift.divided_only)


def _twin_edits(analysis, cs: CallSite, ref: str, windows: list[cst.Subscript], arg: str) -> tuple[dict, str]:
    """The edits that add the twin and its name: its parameter after the kernel's last input, its
    operand after the call's last one (and a whole spec after the last input spec, which the lift
    replaces), and the windows reading it."""
    ctx, site, fn = analysis.ctx, cs.site, cs.site.kernel
    if cs.num_prefetch or cs.args_expanded or cs.conditional or isinstance(fn.params.star_arg, cst.Param):
        raise Refuse(f"`{ref}`'s twin operand needs plain operands and kernel parameters (no scalar prefetch or `*args`)")
    if cs.aliased:
        raise Refuse(f"the pallas_call aliases inputs to outputs; `{ref}`'s twin operand would shift nothing, "
                     "but pallas-fix does not rewrite aliased calls this way")
    spec = cs.spec_of(cs.slots[ref])
    for node in walk(fn):
        if isinstance(node, cst.Subscript) and (base := ref_base(node)) is not None and base.value == ref and is_write(ctx, node):
            raise Refuse(f"the kernel writes its input `{ref}` (line {ctx.span(node).line}): a twin would not see the write")
    for sub in windows:
        base = ref_base(sub)
        if base is None or base.value != ref:
            raise Refuse(f"`{ref}`'s window is read through another name or a helper (line {ctx.span(sub).line})")
    stem = ref[:-4] if ref.endswith("_ref") else ref
    new = underscored(f"{stem}_block_ref" if ref.endswith("_ref") else f"{stem}_block",
                      param_names(fn) | set(bindings(fn, nested=True)) | set(bindings(ctx.module, nested=False)))
    inputs = [s for s in cs.slots.values() if s.kind == "in"]
    last = max(inputs, key=lambda s: s.index)
    params = list(fn.params.params)
    after = next(i for i, p in enumerate(params) if p.name.value == last.param)
    if after + 1 >= len(params):
        raise Refuse(f"the kernel has no parameter after its last input `{last.param}`")
    edits: dict = {fn.params: lambda p: p.with_changes(params=_inserted(list(p.params), after, cst.Param(cst.Name(new))))}
    call_args = list(site.invocation.args)
    if len(call_args) != len(inputs) or any(a.keyword is not None for a in call_args):
        raise Refuse(f"the pallas_call's operands are not written one per input, so `{ref}`'s twin has no place")
    twin_arg = cst.parse_expression(arg)
    edits[site.invocation] = lambda c: c.with_changes(args=_inserted(list(c.args), len(c.args) - 1, cst.Arg(twin_arg)))
    _spec_edit(cs, edits, ref, last.index, copy_own=not spec.whole)
    for sub in windows:
        edits[ref_base(sub)] = lambda n: n.with_changes(value=new)
    return edits, new


def _inserted(items: list, after: int, item):
    """`items` with `item` after position `after`, separated as the list separates its items: a
    last item keeps its trailing comma (or none) on the new one. A comment after a comma stays with
    the item it annotates (`),  # o_vjp`); the new item's comma carries none."""
    prev = items[after]
    if after + 1 < len(items):
        return [*items[:after + 1], item.with_changes(comma=_uncommented(prev.comma)), *items[after + 1:]]
    sep = items[after - 1].comma if after > 0 else cst.MaybeSentinel.DEFAULT
    if not isinstance(sep, cst.Comma):
        sep = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    own, gap = prev.comma, sep.whitespace_after
    if isinstance(own, cst.Comma) and isinstance(own.whitespace_after, cst.ParenthesizedWhitespace) \
            and isinstance(gap, cst.ParenthesizedWhitespace):
        # the last item's comment stays on its line, which now breaks to the new item's indent
        kept = sep.with_changes(whitespace_after=gap.with_changes(first_line=own.whitespace_after.first_line))
        return [*items[:after], prev.with_changes(comma=kept), item.with_changes(comma=_uncommented(own))]
    return [*items[:after], prev.with_changes(comma=_uncommented(sep)), item.with_changes(comma=_uncommented(own))]


def _closing_comment_kept(old: cst.List, last: int, items: list) -> cst.List:
    """`old` with `items`, where an item appended after the last keeps the last one's comment with
    it: `),  # o_vjp` then `]` holds the comment before `]`, which would now follow the new item."""
    close = old.rbracket.whitespace_before
    if last + 1 != len(old.elements) or not isinstance(close, cst.ParenthesizedWhitespace) or close.first_line.comment is None:
        return old.with_changes(elements=items)
    prev = items[last]
    if not isinstance(prev.comma, cst.Comma):
        return old.with_changes(elements=items)
    gap = next((e.comma.whitespace_after for e in old.elements[:-1]
                if isinstance(e.comma, cst.Comma) and isinstance(e.comma.whitespace_after, cst.ParenthesizedWhitespace)), None)
    if gap is None:
        return old.with_changes(elements=items)
    moved = prev.comma.with_changes(whitespace_after=gap.with_changes(first_line=close.first_line))
    items = [*items[:last], prev.with_changes(comma=moved), *items[last + 1:]]
    bare = close.with_changes(first_line=cst.TrailingWhitespace(newline=close.first_line.newline))
    return old.with_changes(elements=items, rbracket=old.rbracket.with_changes(whitespace_before=bare))


def _uncommented(comma):
    """`comma` without the comment on its line (a new item says nothing the old one said)."""
    if isinstance(comma, cst.Comma) and isinstance(comma.whitespace_after, cst.ParenthesizedWhitespace):
        ws = comma.whitespace_after
        return comma.with_changes(whitespace_after=ws.with_changes(first_line=cst.TrailingWhitespace(newline=ws.first_line.newline)))
    return comma


def _spec_edit(cs: CallSite, edits: dict, ref: str, last: int, copy_own: bool) -> None:
    """The twin's spec: whole (`pl.BlockSpec()`), or with `copy_own` a copy of the ref's own,
    already blocked; the lift then gives it the window's. None when in_specs is absent (every spec
    whole); a list literal gains an item, `[spec] * n` is spelled out with one more."""
    container = cs.site.kw("in_specs")
    value = cs.ctx.resolve_value(container, cs.anchor(container)) if container is not None else None
    items = elements(value) if isinstance(value, cst.List) else None
    whole = _own_spec(cs, ref, items) if copy_own else cst.parse_expression(f"{cs.pl_alias()}.BlockSpec()")
    if container is None:
        return
    cs.refuse_if_shared(container, "in_specs", within_call=False)
    if items is not None and len(items) == last + 1:
        edits[value] = lambda v: _closing_comment_kept(v, last, _inserted(list(v.elements), last, cst.Element(whole)))
        return
    repeated = repeated_items(cs.ctx, value, cs.anchor(container))
    if repeated is not None and len(repeated) == last + 1:  # spelled out: pallas-fix edits one item of a literal
        spelled = [cst.Element(cst.parse_expression(cs.ctx.code(i)), comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
                   for i in repeated]
        edits[value] = lambda v: cst.List([*spelled, cst.Element(whole)])
        return
    raise Refuse(f"in_specs `{code(container)}` is not a list literal or `[spec] * n`, so `{ref}`'s twin gets no spec")


def _own_spec(cs: CallSite, ref: str, items: Optional[list]) -> cst.BaseExpression:
    """The spec of a `ref` already blocked (folx's mask: `(None, seq_len)` at `(i, 0)`, one batch
    row, whole along the window's dim), copied for its twin: the lift then narrows the copy along
    the window's dim as it would the ref's own spec, or refuses when the window lies inside a
    moving block. Only a BlockSpec written in the in_specs list (`items`) is copied: one held in
    a name or made by a helper would be edited where it is defined, under the ref's own spec too."""
    index = cs.slots[ref].index
    item = items[index] if items is not None and index < len(items) else None
    if not (isinstance(item, cst.Call) and cs.ctx.imports.is_(item.func, N.BLOCK_SPEC)):
        raise Refuse(f"`{ref}` is already blocked by a spec not written as a pl.BlockSpec(...) in the in_specs list, "
                     "so its twin gets no copy of it")
    return item.deep_clone()
