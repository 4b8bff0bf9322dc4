"""Spec parameters threaded through a helper that holds one pallas_call for several kernels.

    def _call(kernel, args, out_shapes, num_programs):
        return pl.pallas_call(kernel, grid=(num_programs,), out_shape=out_shapes)(*args)

    y = _call(functools.partial(_fwd_kernel, heads=heads), (r, k), ..., batch * heads)
    dr = _call(functools.partial(_bwd_kernel, heads=heads), (r, k, dy), ..., batch * heads)

The kernels window their operands differently, so no one set of BlockSpecs written in `_call`
serves them both. A Pallas author gives the helper spec parameters and each call its own specs:

    def _call(kernel, args, out_shapes, num_programs, in_specs=pl.no_block_spec, out_specs=pl.no_block_spec):
        return pl.pallas_call(kernel, grid=(num_programs,), in_specs=in_specs, out_specs=out_specs, ...)

    y = _call(..., batch * heads, in_specs=[...], out_specs=[...])

`pl.no_block_spec` is what the pallas_call takes without the keyword (every operand whole), so a
call that passes none, in this module or another, runs as before. The lift of one kernel writes
the parameters (discovery marks the keywords: KernelSite.thread) and its own call's specs; the
next round finds the parameters and lifts the other call the same way. What the calls still
share is screened against the helper with its new parameters (rewrite.callsite.forwarded).
"""

from __future__ import annotations

import libcst as cst

from pallas_fix.analysis.context import ModuleContext
from pallas_fix.analysis.relays.relay_chain import chain_calls, chain_functions
from pallas_fix.analysis.relays.splat_dict import splat_dict
from pallas_fix.core.model import KernelSite
from pallas_fix.rewrite.callsite.spelling.keywords import insert_keywords
from pallas_fix.rewrite.text.edits import Edit, apply_edits
from pallas_fix.rewrite.text.imports import PALLAS, spelling


def thread_edits(ctx: ModuleContext, site: KernelSite) -> dict[cst.CSTNode, Edit]:
    """The edits that give the helper holding `site.call` a parameter per keyword in
    `site.thread`, defaulting to `pl.no_block_spec`, and pass it on to its pallas_call. Through a
    chain of helpers (KernelSite.relayed_by) every helper of the chain gets the parameters and
    hands them on to the next; a spec entry of the innermost's `**settings` dict
    (`"in_specs": whole_specs(n)`) becomes `whole_specs(n) if in_specs is None else in_specs`, the
    parameter defaulting to None: a call passing nothing gets the specs it got before."""
    helper = ctx.enclosing_function(site.call)
    if not site.thread or helper is None:
        return {}
    keys = list(site.thread)
    entries = _spec_entries(ctx, site, keys)
    no_spec = f"{spelling(ctx, PALLAS).text}.no_block_spec"
    defaults = {k: "None" if k in entries else no_spec for k in keys}

    def add_params(node: cst.FunctionDef) -> cst.FunctionDef:
        params = node.params
        new = [cst.Param(cst.Name(k), default=cst.parse_expression(defaults[k]),
                         equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace(""))) for k in keys]
        if params.star_arg is not cst.MaybeSentinel.DEFAULT or params.kwonly_params:
            # after `*args` (or a bare `*`) a parameter is keyword-only
            return node.with_changes(params=params.with_changes(kwonly_params=_appended(params.kwonly_params, new)))
        return node.with_changes(params=params.with_changes(params=_appended(params.params, new)))

    def pass_on(node: cst.Call) -> cst.Call:
        return insert_keywords(node, [(k, k) for k in keys if k not in entries], "out_shape")

    def hand_on(node: cst.Call) -> cst.Call:
        return insert_keywords(node, [(k, k) for k in keys], None)

    fns = chain_functions(ctx, site) if site.relayed_by else [helper]
    edits: dict[cst.CSTNode, Edit] = {fn: add_params for fn in fns}
    edits.update({call: hand_on for call in chain_calls(site)[:-1]} if site.relayed_by else {})
    if any(k not in entries for k in keys):
        edits[site.call] = pass_on
    for key, value in entries.items():
        edits[value] = lambda node, k=key: cst.parse_expression(f"{_code(node)} if {k} is None else {k}")
    return edits


def threaded_helpers(ctx: ModuleContext, site: KernelSite) -> list[tuple[cst.FunctionDef, cst.FunctionDef]]:
    """(each helper of the chain, as it is; with its new spec parameters, as it is when none): what
    the helpers' calls share once the lift is applied, to screen the lift against."""
    helper = ctx.enclosing_function(site.call)
    fns = chain_functions(ctx, site) if site.relayed_by else [helper]
    edits = thread_edits(ctx, site)
    out = []
    for fn in fns:
        mine = {n: e for n, e in edits.items() if n is fn or any(a is fn for a in ctx.ancestors(n))}
        out.append((fn, apply_edits(cst.Module(body=[fn]), mine)[0].body[0] if mine else fn))
    return out


def _spec_entries(ctx: ModuleContext, site: KernelSite, keys: list[str]) -> dict[str, cst.BaseExpression]:
    """key -> the value of the `**settings` dict entry the pallas_call takes it from, for `keys`."""
    out = {}
    for arg in site.call.args:
        splat = splat_dict(ctx, arg, site.call) if arg.star == "**" else None
        for setting in splat.settings if splat is not None and not splat.why else ():
            if setting.keyword.value in keys:
                out[setting.keyword.value] = setting.value
    return out


def _code(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node)


def _appended(params, new: list[cst.Param]) -> list[cst.Param]:
    """The parameters, a comma after the last, then `new`: the line break before a hanging
    signature's `)` (after the old last) moves to the new last."""
    out = list(params)
    if not out:
        return new
    tail = out[-1].whitespace_after_param
    if out[-1].comma is cst.MaybeSentinel.DEFAULT:
        out[-1] = out[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    out[-1] = out[-1].with_changes(whitespace_after_param=cst.SimpleWhitespace(""))
    return [*out, *new[:-1], new[-1].with_changes(whitespace_after_param=tail)]
