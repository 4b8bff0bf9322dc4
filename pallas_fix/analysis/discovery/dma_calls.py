"""TPU DMA calls as a kernel spells them: `pltpu.make_async_copy(src_ref, dst_ref, sem)` and
`pltpu.async_copy(...)`, read by name (the module's import spelling aside), and which argument
is which."""

from __future__ import annotations

from typing import Optional

import libcst as cst

COPIES = ("make_async_copy", "async_copy")
_POSITION = {"src_ref": 0, "dst_ref": 1, "sem": 2}


def callee(call: cst.Call) -> Optional[str]:
    """The called name: `make_async_copy` for `pltpu.make_async_copy(...)` and a bare name."""
    func = call.func
    return func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else None


def copy_argument(ctx, node: cst.BaseExpression, role: str) -> Optional[cst.Call]:
    """The DMA call that takes `node` as its `role` argument (`src_ref`, `dst_ref` or `sem`, by
    keyword or position), or None."""
    arg = ctx.parent(node)
    call = ctx.parent(arg) if isinstance(arg, cst.Arg) else None
    if not isinstance(call, cst.Call) or callee(call) not in COPIES or arg.value is not node:
        return None
    if arg.keyword is not None:
        return call if arg.keyword.value == role else None
    positional = [a for a in call.args if a.keyword is None and not a.star]
    k = _POSITION[role]
    return call if len(positional) > k and positional[k] is arg else None


def semaphore_pick(ctx, parent, read: cst.Name) -> bool:
    """`sems[expr]` passed as the semaphore of a DMA (`pltpu.make_async_copy(src, dst, sems[k % 4])`):
    whatever the index, the item is a semaphore (a DMA takes no other), so scratch semaphores passed
    as `*sems` need no name for a plan to map the operands."""
    return isinstance(parent, cst.Subscript) and parent.value is read and copy_argument(ctx, parent, "sem") is not None
