"""An operand's dtype written at the call site: what `x_ref.dtype` inside the kernel is at the
pallas_call. An input passed as a plain name is `x.dtype` there; an output's is its out_shape's
`dtype`. An array's dtype is exact (arrays carry canonical dtypes), so a scratch buffer given it
agrees with a value read from the ref."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from pallas_fix.core.names import call_arg
from pallas_fix.rewrite.callsite.spelling.operands import CallSiteError
from pallas_fix.rewrite.text.syntax import is_plain_name


def operand_dtype(cs, param: str) -> Optional[cst.BaseExpression]:
    """`param`'s dtype as the call site writes it, or None when it does not."""
    slot = cs.slots.get(param)
    if slot is None:
        return None
    if slot.kind in ("in", "prefetch"):
        if not is_plain_name(slot.arg) or not cs.arg_at_call(slot.arg):
            return None
        return cst.Attribute(slot.arg, cst.Name("dtype"))
    if slot.kind == "out" and isinstance(slot.out_shape, cst.Call):
        dtype = call_arg(slot.out_shape, 1, "dtype")
        if dtype is None:
            return None
        try:
            return cs.same_at_call(dtype, "out_shape")
        except CallSiteError:
            return None
    return None
