"""What a pallas_call's operands are, as the call-site reader reports them.

`Slot` places one kernel ref parameter among the call's operands; `Spec` is a BlockSpec as
written; `CallSiteError` carries the reason a call site cannot be read exactly (a refusal).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import libcst as cst

from pallas_fix.analysis.context import walk
from pallas_fix.rewrite.callsite.spelling.block_dims import BlockDim
from pallas_fix.rewrite.text.syntax import elements, is_none


class CallSiteError(Exception):
    """A precondition on the pallas_call failed; the message is the refusal reason."""


@dataclass
class Slot:
    kind: str  # "prefetch" | "in" | "out" | "scratch"
    index: int  # position among its kind
    param: str
    arg: Optional[cst.BaseExpression] = None  # call-site array (inputs / prefetch)
    out_shape: Optional[cst.BaseExpression] = None  # ShapeDtypeStruct (outputs)

    @property
    def noun(self) -> str:
        """The kind as a message says it: "input", "scalar-prefetch input", "output", "scratch"."""
        return {"prefetch": "scalar-prefetch input", "in": "input", "out": "output"}.get(self.kind, self.kind)


@dataclass
class Spec:
    """A BlockSpec as written. block None = whole array; index None = all zeros."""

    node: Optional[cst.BaseExpression]  # the spec expression (None when absent)
    block: Optional[list[cst.BaseExpression]]
    index_map: Optional[cst.BaseExpression]  # lambda / function name / a local def read as a lambda
    index_params: list[str] = field(default_factory=list)
    index_exprs: Optional[list[cst.BaseExpression]] = None  # lambda's returned tuple
    index_all_zero: bool = False  # the lambda returns `(0,) * n`: zeros, as many as the block has dims
    whole: bool = True  # block is the whole array and index is zero
    dims: Optional[list[BlockDim]] = None  # what each entry of `block` means
    index_star: Optional[str] = None  # the lambda's `*args` name: it takes the grid indices past its params
    index_extra: bool = False  # the lambda has defaults, keyword-only or `**` parameters
    placement: Optional[str] = None  # `memory_space=...` / `pipeline_mode=...` as written, if any
    index_arg: Optional[cst.BaseExpression] = None  # the index_map argument as written (a def's name)
    # `None` for a `None` operand (Pallas pairs specs with operands as pytrees): the kernel gets None.
    absent: bool = False

    def carried_placement(self, param: str, drop_space: bool = False) -> str:
        """`, memory_space=pltpu.VMEM` (as written) to repeat on the spec that replaces this one,
        or "". A blocked VMEM / SMEM spec or a pipeline mode keeps its meaning on a new block;
        any other space (`pl.ANY`, HBM) hands the kernel the whole array however it is blocked,
        so pallas-fix refuses to block it, unless `drop_space`: an output written by DMA that
        the plan moves into VMEM blocks (rewrite.inblock.dma_outputs)."""
        if self.placement is None:
            return ""
        if drop_space:
            kept = [p for p in self.placement.split(", ") if not p.startswith("memory_space")]
            return "".join(", " + p for p in kept)
        if self.unblocked():
            raise CallSiteError(f"the BlockSpec of `{param}` sets `{self.placement}`: blocks in that memory space are "
                                "not copied in per grid step, so pallas-fix cannot block it")
        return ", " + self.placement

    def unblocked(self) -> bool:
        """A `memory_space=` other than VMEM / SMEM (`pl.ANY`, HBM): the kernel gets the whole
        array however the spec is blocked."""
        spaces = [part.split("=", 1)[1].strip() for part in (self.placement or "").split(", ") if part.startswith("memory_space")]
        return any(not space.endswith((".VMEM", ".SMEM")) for space in spaces)

    def read_lambda(self, lam: cst.Lambda | cst.FunctionDef) -> None:
        """The index_map's parameters and returned tuple, as this spec reports them (a local
        `def` whose body is one `return`, read as the lambda it could be)."""
        params = lam.params
        self.index_params = [p.name.value for p in params.params]
        self.index_star = params.star_arg.name.value if isinstance(params.star_arg, cst.Param) else None
        self.index_extra = bool(params.kwonly_params or params.star_kwarg or params.posonly_params) or any(
            p.default is not None for p in params.params
        )
        body = lam.body if isinstance(lam, cst.Lambda) else returned(lam)
        assert body is not None
        self.index_exprs = elements(body)
        if self.index_exprs is None and _scalar_index(body, set(self.index_params)):
            self.index_exprs = [body]  # Pallas reads a returned non-tuple as a 1-tuple
        self.index_all_zero = self.index_exprs is None and _zeros_repeated(body)

    def fill_zero_index(self, rank: Optional[int]) -> None:
        """`(0,) * x.ndim` once the block's rank is known: Pallas requires one index per block
        dim, so a call that runs returns exactly `rank` zeros."""
        if self.index_all_zero and rank is not None:
            self.index_exprs = [cst.Integer("0") for _ in range(rank)]

    def visible_dims(self) -> list[int]:
        """The array dims the kernel sees (squeezed dims are gone from its view)."""
        if self.dims is None:
            return []
        return [e for e, d in enumerate(self.dims) if d.kind != "squeezed"]


def absent_spec(ctx, slot: "Slot", at: cst.CSTNode) -> Spec:
    """The spec of an operand passed as `None` with a `None` spec (`None,  # bias` beside `bias =
    None`): Pallas pairs specs with operands as pytrees, so the kernel's parameter is None."""
    arg = ctx.resolve_value(slot.arg, at) if slot.kind == "in" and slot.arg is not None else None
    if arg is None or not is_none(arg):
        raise CallSiteError(f"the spec of `{slot.param}` is `None` while its operand may be an array")
    return Spec(None, None, None, whole=False, absent=True)


def local_index_def(ctx, name: cst.BaseExpression, spec: cst.CSTNode) -> Optional[cst.FunctionDef]:
    """The `def` a BlockSpec's index_map `name` names, when it can be read as a lambda written
    at the spec: defined once, in the spec's own scope, nothing else bound to the name there, a
    plain def returning one value whose other names are assigned at most once in that scope
    (so they mean at the spec what they meant in the def)."""
    if not isinstance(name, cst.Name):
        return None
    scope = ctx.scope_of(spec)
    fn = ctx.resolve_def(name.value, spec)
    if fn is None or ctx.scope_of(fn) is not scope or ctx.assignments(name.value, scope) or returned(fn) is None:
        return None
    defs = [n for n in walk(scope) if isinstance(n, cst.FunctionDef) and n.name.value == name.value]
    params = {p.name.value for p in fn.params.params}
    free = {n.value for n in walk(returned(fn)) if isinstance(n, cst.Name)} - params
    if len(defs) != 1 or any(len(ctx.assignments(n, scope)) > 1 for n in free):
        return None
    return fn


def returned(fn: cst.FunctionDef) -> Optional[cst.BaseExpression]:
    """What `def f(i, j): return i, 0` returns: the value of its only statement, a `return`,
    for a plain (undecorated, not async) def; None otherwise."""
    if fn.decorators or fn.asynchronous is not None:
        return None
    body = fn.body.body
    line = body[0] if len(body) == 1 else None
    if isinstance(line, cst.SimpleStatementLine):
        line = line.body[0] if len(line.body) == 1 else None
    return line.value if isinstance(line, cst.Return) and line.value is not None else None


_SCALAR_OPS = (cst.Add, cst.Subtract, cst.Multiply, cst.FloorDivide, cst.Modulo)


def _scalar_index(expr: cst.BaseExpression, params: set[str]) -> bool:
    """An index_map body that is one integer, not a tuple: an int literal, a grid parameter, or
    `+ - * // %` of those (`lambda i, j: (0)`, `lambda i: i`)."""
    if isinstance(expr, cst.Integer):
        return True
    if isinstance(expr, cst.Name):
        return expr.value in params
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, _SCALAR_OPS):
        return _scalar_index(expr.left, params) and _scalar_index(expr.right, params)
    return False


def _zeros_repeated(expr: cst.BaseExpression) -> bool:
    """`(0,) * n` / `n * (0,)` (or a list): block 0 along every dim, however many there are."""
    if not (isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Multiply)):
        return False
    return any((items := elements(side)) and all(isinstance(i, cst.Integer) and int(i.evaluated_value) == 0 for i in items)
               for side in (expr.left, expr.right))
