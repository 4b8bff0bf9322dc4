"""What one entry of a BlockSpec's block shape means.

jax 0.12 (`jax/_src/pallas/core.py`, `_canonicalize_block_dim`) reads `None`, `pl.squeezed` and
`pl.Squeezed()` as a squeezed dim (size 1, gone from the kernel's view, indexed by element), an
int or `pl.Blocked(n)` as a block of n indexed by block number, and `pl.Element(n)`,
`pl.BoundedSlice(n)` and `Indirect` as dims whose index_map returns element offsets or slices.
Only the first two kinds have a meaning pallas-fix rewrites; the rest are "other" and a plan
that must change such a spec refuses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import libcst as cst

from pallas_fix.analysis.context import ModuleContext
from pallas_fix.core.names import PALLAS
from pallas_fix.rewrite.text.syntax import is_none

_SQUEEZED_VALUE = PALLAS + ".squeezed"
_SQUEEZED_CLASS = PALLAS + ".Squeezed"
_BLOCKED = PALLAS + ".Blocked"


@dataclass(frozen=True)
class BlockDim:
    kind: str  # "squeezed" | "size" | "other"
    expr: cst.BaseExpression  # as written
    size: Optional[cst.BaseExpression] = None  # "size": the block's extent (`n` of `pl.Blocked(n)`)


def block_dim(ctx: ModuleContext, expr: cst.BaseExpression, at: cst.CSTNode) -> BlockDim:
    value = ctx.resolve_value(expr, at)
    if is_none(value) or ctx.imports.qualify(value) == _SQUEEZED_VALUE:
        return BlockDim("squeezed", expr)
    if isinstance(value, cst.Call):
        func = ctx.imports.qualify(value.func) or ""
        if func == _SQUEEZED_CLASS and not value.args:
            return BlockDim("squeezed", expr)
        arg = value.args[0] if len(value.args) == 1 else None
        if func == _BLOCKED and arg is not None and (arg.keyword is None or arg.keyword.value == "block_size"):
            return BlockDim("size", expr, arg.value)
        if func.startswith(PALLAS):
            return BlockDim("other", expr)
    elif (ctx.imports.qualify(value) or "").startswith(PALLAS):
        return BlockDim("other", expr)
    return BlockDim("size", expr, expr)


def other_dim_refusal(param: str, dim: BlockDim) -> str:
    text = cst.Module([]).code_for_node(dim.expr)
    return (
        f"the BlockSpec of `{param}` has the block dim `{text}`, whose index is not a block number; "
        "pallas-fix only rewrites specs whose dims are sizes or squeezed (None, pl.squeezed)"
    )
