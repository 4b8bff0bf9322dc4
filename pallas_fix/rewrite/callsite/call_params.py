"""What a pallas_call's keywords say, read as written: its compiler_params about its grid axes,
its input_output_aliases about which input and output are one buffer."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from pallas_fix.rewrite.callsite.spelling.operands import CallSiteError, Slot
from pallas_fix.rewrite.text.syntax import code, elements


def dimension_semantics(cs) -> tuple[Optional[cst.Call], Optional[cst.Arg], Optional[list[str]]]:
    """(the compiler_params call, its `dimension_semantics=` argument, the semantics per axis in
    lower case); Nones where they are absent. Refuses values it cannot read."""
    params = cs.site.kw("compiler_params")
    if params is None:
        return None, None, None
    node = cs.ctx.resolve_value(params, cs.site.call)
    if not isinstance(node, cst.Call):
        return None, None, None
    for a in node.args:
        if a.keyword is not None and a.keyword.value == "dimension_semantics":
            items = elements(cs.ctx.resolve_value(a.value, cs.site.call))
            if items is None:
                raise CallSiteError("dimension_semantics is not a literal tuple")
            values = []
            for it in items:
                if isinstance(it, cst.SimpleString):
                    values.append(str(it.evaluated_value))
                elif isinstance(it, cst.Attribute):
                    values.append(it.attr.value.lower())
                else:
                    raise CallSiteError("dimension_semantics holds values pallas-fix cannot read")
            return node, a, values
    return node, None, None


def alias_pairs(cs) -> list[tuple[Slot, Slot]]:
    """(input slot, output slot) per alias; an alias map pallas-fix cannot read is refused."""
    expr = cs.site.kw("input_output_aliases")
    assert expr is not None
    value = cs.ctx.resolve_value(expr, cs.site.call)
    if not isinstance(value, cst.Dict):
        raise CallSiteError(f"cannot read `input_output_aliases={code(expr)}` as a dict literal, so pallas-fix cannot tell "
                            "which input each output aliases")
    by_kind = {(s.kind, s.index): s for s in cs.slots.values()}
    pairs = []
    for element in value.elements:
        if not isinstance(element, cst.DictElement):
            raise CallSiteError("`input_output_aliases` unpacks another dict (`**`): pallas-fix cannot read its pairs")
        k, v = cs.env.static_int(element.key), cs.env.static_int(element.value)
        if k is None or v is None:
            raise CallSiteError(
                f"cannot read the alias `{code(element.key)}: {code(element.value)}` of input_output_aliases as two "
                "integers, so pallas-fix cannot tell which input shares a buffer with which output (blocked "
                "differently, a step could read what another step wrote back); write the alias with literal indices")
        # Alias keys count every operand, scalar-prefetch ones included.
        in_slot, out_slot = by_kind.get(("in", k - cs.num_prefetch)), by_kind.get(("out", v))
        if in_slot is not None and out_slot is not None:
            pairs.append((in_slot, out_slot))
    return pairs


def alias_partner(cs, param: str) -> Optional[Slot]:
    """The slot of the operand `param` shares its buffer with (input_output_aliases), None when
    it aliases none; an alias map pallas-fix cannot read is refused (CallSiteError)."""
    if cs.site.kw("input_output_aliases") is None:
        return None
    for in_slot, out_slot in alias_pairs(cs):
        if param in (in_slot.param, out_slot.param):
            return out_slot if in_slot.param == param else in_slot
    return None


def aliased_output(cs, slot: Slot) -> Optional[Slot]:
    """The output the input `slot` is one buffer with, None when none (or when the alias map
    cannot be read). pallas_call requires the two to have one shape and dtype, so the output's
    out_shape says the input's shape where its operand does not."""
    if slot.kind != "in":
        return None
    try:
        return alias_partner(cs, slot.param)
    except CallSiteError:
        return None
