"""TPU DMA calls as a kernel spells them: `pltpu.make_async_copy(src_ref, dst_ref, sem)` and
`pltpu.async_copy(...)`, through the module's imports, and which argument is which."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from pallas_fix.core import names as N
from pallas_fix.core.names import call_arg

MAKE_COPY = frozenset({N.TPU + ".make_async_copy"})
COPIES = MAKE_COPY | {N.TPU + ".async_copy"}
_POSITION = {"src_ref": 0, "dst_ref": 1, "sem": 2}


def copy_argument(ctx, node: cst.BaseExpression, role: str, copies: frozenset[str] = COPIES) -> Optional[cst.Call]:
    """The DMA call (one of `copies`) that takes `node` as its `role` argument (`src_ref`,
    `dst_ref` or `sem`, by keyword or position), or None."""
    arg = ctx.parent(node)
    call = ctx.parent(arg) if isinstance(arg, cst.Arg) else None
    if not isinstance(call, cst.Call) or not ctx.imports.is_(call.func, copies):
        return None
    return call if call_arg(call, _POSITION[role], role) is node else None


def semaphore_pick(ctx, parent, read: cst.Name) -> bool:
    """`sems[expr]` passed as the semaphore of a DMA (`pltpu.make_async_copy(src, dst, sems[k % 4])`):
    whatever the index, the item is a semaphore (a DMA takes no other), so scratch semaphores passed
    as `*sems` need no name for a plan to map the operands."""
    return isinstance(parent, cst.Subscript) and parent.value is read and copy_argument(ctx, parent, "sem") is not None
