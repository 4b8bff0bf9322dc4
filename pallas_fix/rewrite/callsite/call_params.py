"""What a pallas_call's compiler_params say about its grid axes, read as written."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from pallas_fix.rewrite.callsite.spelling.operands import CallSiteError
from pallas_fix.rewrite.text.syntax import elements


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
