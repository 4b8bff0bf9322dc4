"""Scratch buffers a rewrite adds to a pallas_call (R2's carries): the `scratch_shapes=` entries
at the call, their constructor module, and the matching ref parameters of the kernel."""

from __future__ import annotations

import libcst as cst

from pallas_fix.core.model import Backend
from pallas_fix.core.plans import Refuse
from pallas_fix.rewrite.text import imports
from pallas_fix.rewrite.blocks.edits import CallEdits
from pallas_fix.rewrite.callsite.reading import CallSite
from pallas_fix.rewrite.text.syntax import code, followed_comma, uncommented


def scratch_spelling(ctx, backend: Backend) -> tuple[imports.Spelling, str]:
    """The backend's scratch module as the file spells it, and its scratch memory space."""
    module = imports.TPU if backend is Backend.TPU else imports.MOSAIC_GPU
    found = imports.spelling(ctx, module)
    if found.add is not None and found.text in ctx.imports.bindings:
        raise Refuse(f"the name `{found.text}` is taken; import {module.path} under some alias first")
    return found, "VMEM" if backend is Backend.TPU else "SMEM"


def add_scratch(cs: CallSite, edits: CallEdits, codes: list[str]) -> None:
    """Append `codes` to the call's scratch_shapes (a new keyword when it has none)."""
    star = cs.site.kernel.params.star_arg if cs.site.kernel is not None else None
    if isinstance(star, cst.Param):
        # add_params puts a new ref after the named parameters, where it would take an operand.
        raise Refuse(f"the kernel takes `*{star.name.value}`, so the new scratch ref cannot be added as a parameter; name the refs as parameters")
    existing = cs.site.kw("scratch_shapes")
    if existing is None:
        edits.new_keywords.append(("scratch_shapes", "[" + ", ".join(codes) + "]"))
        return
    value = cs.ctx.resolve_value(existing, cs.site.call)
    if not isinstance(value, (cst.List, cst.Tuple)):
        raise Refuse("scratch_shapes is not a literal list")
    items = [code(e.value) for e in value.elements] + codes
    text = ("[" + ", ".join(items) + "]") if isinstance(value, cst.List) else ("(" + ", ".join(items) + ",)")
    edits.edits[value] = lambda _n, t=text: cst.parse_expression(t)


def add_params(fn: cst.FunctionDef, names: list[str]) -> cst.FunctionDef:
    """The kernel with ref parameters `names` after its positional ones (scratch refs come last)."""
    if not names:
        return fn  # no scratch (R2's accumulate-in-place form): no comma after the last parameter
    params = list(fn.params.params)
    # One parameter per line stays so, and the comment after the last one stays with it.
    first = next((p.comma for p in params if isinstance(p.comma, cst.Comma)), None)
    comma = uncommented(first) if first is not None else cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    if params:
        last = params[-1].comma
        params[-1] = params[-1].with_changes(comma=followed_comma(last, comma) if isinstance(last, cst.Comma) else comma)
    for i, n in enumerate(names):
        last = i == len(names) - 1
        has_more = bool(fn.params.star_arg) if isinstance(fn.params.star_arg, cst.Param) else fn.params.kwonly_params
        params.append(cst.Param(cst.Name(n), comma=comma if (not last or has_more) else cst.MaybeSentinel.DEFAULT))
    return fn.with_changes(params=fn.params.with_changes(params=params))
