"""One plan that inlines a helper (rewrite.loops.helper_inline) and then lifts: the lift's
planner asked again on the module with the helper inlined, its rewrite the final text. The
inlining alone lifts nothing, so it is never offered on its own, and verification compares the
original with the text after both.

Two helpers are inlined so: the one whose top level holds the loop (the kernel calls it once:
Pallas-Unbound's `decoding_kv_loop`), and the one that builds the specs the pallas_call is passed
(`in_specs, out_specs = get_decoding_specs(seq_len, d)`, called once by the wrapper): a lift
writes the new BlockSpecs where the call's specs stand, and pallas-fix reads and edits specs
only in the function that holds the pallas_call.

May import core, analysis, rewrite.common and the rewrite rooms text, callsite, kernel, and
rewrite.loops."""

from __future__ import annotations

import difflib
import re

from typing import Callable, Optional

import libcst as cst

from pallas_fix.analysis.result import analyze
from pallas_fix.core.model import KernelSite, LoopInfo
from pallas_fix.core.plans import FixPlan, Refuse
from pallas_fix.rewrite.callsite.reading import CallSite
from pallas_fix.rewrite.callsite.spelling.operands import CallSiteError
from pallas_fix.rewrite.kernel.dead_params import drop_dead_params
from pallas_fix.rewrite.loops.helper_inline import HeldCall, held_spec_helper, inlined_source, renamed
from pallas_fix.rewrite.loops.regions import uses_by_loop
from pallas_fix.rewrite.text.line_width import fit_width
from pallas_fix.rewrite.text.syntax import code


def plan_inlined(analysis, loop: LoopInfo, uses: list, held: HeldCall, plan: Callable) -> FixPlan:
    """`plan` asked on the module with the loop's helper inlined into the kernel."""
    site = uses[0].kernel_site
    where = f"the loop sits inside `{held.helper.name.value}` (line {analysis.ctx.span(held.helper).line})"
    return _then(analysis, site, uses, held, site.kernel, renamed(analysis.ctx, held, loop.call), plan, where)


def plan_with_specs_inlined(analysis, loop: LoopInfo, uses: list, plan: Callable) -> Optional[FixPlan]:
    """`plan` asked on the module with the helper that builds the call's specs inlined into the
    function holding the call, where pallas-fix cannot read those specs as they stand; None where
    it can, or where no such helper builds them (the lift then says what stops it)."""
    site = uses[0].kernel_site
    fn = analysis.ctx.enclosing_function(site.call) if site.call is not None else None
    if fn is None:
        return None
    cs = CallSite(analysis.ctx, site, analysis.detection.envs.get(site.kernel))
    for kind in ("in", "out"):
        try:
            cs.spec_list(kind)
            continue
        except CallSiteError as why:
            if not str(why).startswith(f"cannot read {kind}_specs"):
                return None
        spec = site.kw(f"{kind}_specs")
        held = held_spec_helper(analysis.ctx, fn, spec.value) if isinstance(spec, cst.Name) else None
        if held is not None:
            where = f"`{spec.value}` is built by `{held.helper.name.value}` (line {analysis.ctx.span(held.helper).line})"
            return _then(analysis, site, uses, held, fn, code(loop.call), plan, where)
    return None


def _then(analysis, site: KernelSite, uses: list, held: HeldCall, into: cst.FunctionDef, loop_text: str,
          plan: Callable, where: str) -> FixPlan:
    """Inline `held` into `into`, find the loop again (its call's text once inlined is
    `loop_text`) and plan on that module, as one plan."""
    helper = held.helper.name.value
    source = inlined_source(analysis.ctx, into, held)
    again = analyze(source, analysis.path, analysis.config)
    found = [(l, us) for l, us in uses_by_loop(again) if code(l.call) == loop_text and _same_kernel(us, site)]
    if len(found) != 1:
        raise Refuse(f"{where}; pallas-fix could not find the loop again once `{helper}` is inlined")
    try:
        then = plan(again, *found[0])
    except (Refuse, CallSiteError) as err:
        raise Refuse(f"{where}; inlined into `{into.name.value}`, {_in_original(analysis.ctx.source, source, str(err))}") from None
    final = finished(again.ctx.module, then)
    return FixPlan(then.codemod, then.safety, uses, f"inlined `{helper}` into `{into.name.value}` (its only caller), "
                   f"then {then.description}", lambda _module: cst.parse_module(final), site=site, guards=then.guards,
                   pipelined=then.pipelined, divided_only=then.divided_only)


def _in_original(before: str, after: str, text: str) -> str:
    """`text`, a refusal on the inlined module, with each `line N` it names counted in the user's
    file: a line the inlining left as it was keeps its number there, one it wrote (the helper's
    body in place of its call) takes the call's line."""
    lines: dict[int, int] = {}
    opcodes = difflib.SequenceMatcher(None, before.splitlines(), after.splitlines(), autojunk=False).get_opcodes()
    for tag, i1, _i2, j1, j2 in opcodes:
        for k in range(j2 - j1):
            lines[j1 + k + 1] = i1 + k + 1 if tag == "equal" else (i1 + 1 if tag == "replace" else max(i1, 1))
    return re.sub(r"\bline (\d+)", lambda m: f"line {lines.get(int(m.group(1)), m.group(1))}", text)


def _same_kernel(uses: list, site: KernelSite) -> bool:
    other: Optional[KernelSite] = uses[0].kernel_site if uses else None
    return other is not None and other.kernel_name == site.kernel_name


def finished(module: cst.Module, plan: FixPlan) -> str:
    """The text `plan` makes of `module`, finished as the engine finishes every plan's text
    (engine.apply_plan: dead kernel parameters dropped, new lines fitted to the file's width)."""
    new = plan.rewrite(module)
    if plan.site is not None and plan.site.kernel is not None:
        new = drop_dead_params(module, new, plan.site.kernel.name.value)
    return fit_width(module.code, new.code)
