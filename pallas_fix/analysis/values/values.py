"""The value model of the provenance analysis: what one expression inside a kernel is.

A `Val` says where a value comes from (its `Origin`), what kind of value it is and, in words,
why. The rank order of `Origin` decides what an expression combining several sources is called:
`pid * nk + i` is driven by the loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Protocol

import libcst as cst

from pallas_fix.analysis.context import ModuleContext
from pallas_fix.core.model import ORIGIN_RANK, LoopInfo, Origin


@dataclass(frozen=True)
class Val:
    origin: Origin
    vtype: str = "int"  # int | float | bool | array1 | array | ref | reflist | unknown
    words: str = ""
    loop: Optional[LoopInfo] = None
    pid_axis: Optional[int] = None
    is_index: bool = False  # the loop's induction variable itself, not arithmetic on it
    carry_loop: Optional[LoopInfo] = None  # a loop body's carry parameter: the loop it threads
    induction: Optional[object] = None  # analysis.loops.induction.Induction: a carry stepping with the loop
    scalar_ref: bool = False  # a 0-d ref (its BlockSpec squeezes every dim): `ref[...]` is a scalar

    @property
    def dynamic(self) -> bool:
        return self.origin is not Origin.STATIC

    @property
    def is_ref(self) -> bool:
        return self.vtype in ("ref", "reflist")


STATIC = Val(Origin.STATIC, "int", "a Python value")
STATIC_FLOAT = Val(Origin.STATIC, "float", "a Python value")
REF = Val(Origin.STATIC, "ref", "a ref")
REFLIST = Val(Origin.STATIC, "reflist", "refs")  # `*refs`, or a tuple of refs


class ValueEnv(Protocol):
    """What evaluating an expression needs from its environment (provenance.Env provides it)."""

    ctx: ModuleContext

    def value(self, expr: cst.BaseExpression) -> Val: ...

    def static_int(self, expr: cst.BaseExpression, depth: int = 0) -> Optional[int]: ...

    def ref_load(self, expr: cst.Subscript) -> Val: ...


def combine(vals: list[Val]) -> Val:
    """The value of an expression built from `vals`: the most troublesome origin wins."""
    if not vals:
        return STATIC
    top = max(vals, key=lambda v: ORIGIN_RANK[v.origin])
    vtype = _combined_type(vals)
    loop = top.loop or next((v.loop for v in vals if v.loop), None)
    pid = top.pid_axis if top.pid_axis is not None else next((v.pid_axis for v in vals if v.pid_axis is not None), None)
    return Val(top.origin, vtype, top.words, loop, pid)


def _combined_type(vals: list[Val]) -> str:
    if len({v.vtype for v in vals}) == 1 and vals[0].is_ref:
        # a ref bound in both arms of a static `if` (`if bias: x_ref, b_ref, o_ref = refs` /
        # `else: x_ref, o_ref = refs`) is a ref whichever arm runs
        return vals[0].vtype
    dyn = [v for v in vals if v.dynamic]
    types = {v.vtype for v in dyn} or {v.vtype for v in vals}
    if "array" in types:
        return "array"
    if "array1" in types:
        return "array1"
    if "float" in types or (dyn and any(v.vtype == "float" for v in vals)):
        return "float"
    if "bool" in types and len(types) == 1:
        return "bool"
    return "int"


def int_binop(op: cst.BaseBinaryOp, a: int, b: int) -> Optional[int]:
    """`a op b` for the integer operators Python code writes in index arithmetic; None for the
    others, for division by zero and for shifts or powers too large to mean an index."""
    if isinstance(op, cst.Add):
        return a + b
    if isinstance(op, cst.Subtract):
        return a - b
    if isinstance(op, cst.Multiply):
        return a * b
    if isinstance(op, cst.FloorDivide) and b:
        return a // b
    if isinstance(op, cst.Modulo) and b:
        return a % b
    if isinstance(op, cst.Power) and 0 <= b < 64:
        return a**b
    if isinstance(op, cst.LeftShift) and 0 <= b < 64:
        return a << b
    if isinstance(op, cst.RightShift) and b >= 0:
        return a >> b
    if isinstance(op, cst.BitAnd):
        return a & b
    if isinstance(op, cst.BitOr):
        return a | b
    if isinstance(op, cst.BitXor):
        return a ^ b
    return None
