"""A static unroll's loop index: where a Python int means what the traced index meant.

`lax.fori_loop` / `pl.loop` over Python-int bounds hands its body a weakly typed int32 scalar;
a Python `for` over `range(...)` hands it a Python int, and the two differ: `i * 1103515245`
wraps around in int32 and not in Python, `1.0 / i` is a ZeroDivisionError at 0 instead of inf,
`i / 2` is a Python float, `i.astype(...)` does not exist. :func:`index_typing` sorts every read
of the index in the body:

* it stays a Python int where that is provably the same: the read is the root of integer
  arithmetic (`+ - * // %` and friends, with Python-int operands: literals, module constants,
  body-local names bound once to such arithmetic) whose value, computed for every iteration,
  never leaves int32 and lands as a non-negative slice start (`pl.ds(start, ...)`), a subscript
  index or a slice bound - so the slice stays static, which is the point of the unroll;
* every other read becomes `jnp.asarray(i)`: a weakly typed int32 scalar (or int64 under
  jax_enable_x64, like the traced index), which computes exactly what the traced index did.

A window into a ref is clamped by the traced loop when it runs past the end; static, Pallas rejects
it at trace time ("Out of bound slice"). So a read landing in a ref's slice start or index stays a
Python int only when `fits` proves every window lies inside the ref as the pallas_call shapes it;
otherwise it keeps the traced form, as a negative start does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

import libcst as cst

from pallas_fix.analysis.binders import is_label
from pallas_fix.analysis.context import ModuleContext, walk
from pallas_fix.analysis.values.values import int_binop
from pallas_fix.core import names as N
from pallas_fix.core.model import LoopInfo
from pallas_fix.core.plans import Refuse
from pallas_fix.rewrite.text import imports
from pallas_fix.rewrite.text.edits import NodeReplacer
from pallas_fix.rewrite.text.scopes import bindings, param_names

_INT32 = (-(2**31), 2**31 - 1)
_DEPTH = 12


@dataclass
class IndexTyping:
    """The edits that give the reads of the index outside static positions their int32 type."""

    index: str
    edits: dict = field(default_factory=dict)  # Name read -> edit wrapping it in `jnp.asarray`
    kept: int = 0  # reads that stay Python ints
    unplaced: list = field(default_factory=list)  # "`ref` dim d up to end": windows kept traced, unproved
    numpy: Optional[imports.Spelling] = None  # how to write jax.numpy (None: nothing wrapped)

    def applied(self, node: cst.CSTNode) -> cst.CSTNode:
        """`node` (part of the original tree) with the wraps inside it done."""
        return node.visit(NodeReplacer(dict(self.edits))) if self.edits else node

    def describe(self) -> str:
        if not self.edits:
            return ""
        n = len(self.edits)
        return (f"; {n} read{'s' if n > 1 else ''} of `{self.index}` outside a static index position become"
                f" `{self.numpy.text}.asarray({self.index})`, the weakly typed int32 the traced index was")


# (ref name, dim, end of the last window) -> the window provably lies inside the ref; None for a
# subscript of something that is not a ref of the kernel (its static indices need no proof here).
Fits = Callable[[str, int, int], Optional[bool]]


def index_typing(ctx: ModuleContext, env, loop: LoopInfo, values: range, fits: Fits) -> IndexTyping:
    """Sort the reads of `loop`'s index in its body, which runs for the index `values`; `env` is
    the enclosing function's (raises Refuse when the body binds the index again)."""
    body = loop.body
    index = loop.index_name
    root = body.body
    _check_not_rebound(ctx, body, index)
    locals_ = _int_locals(body, index)
    sorter = _Sorter(ctx, env, index, values, locals_, root, fits)
    typing = IndexTyping(index)
    for read in _reads(ctx, root, index):
        if sorter.stays_python(read):
            typing.kept += 1
        else:
            typing.edits[read] = None
    typing.unplaced = sorted(set(sorter.unplaced))
    if typing.edits:
        typing.numpy = imports.spelling_at(ctx, imports.NUMPY, body)
        if typing.numpy is None:
            raise Refuse(f"`{index}` needs an int32 cast where a Python int would mean something else, and the"
                         " module has no free name for `jax.numpy`")
        asarray = cst.parse_expression(f"{typing.numpy.text}.asarray")
        typing.edits = {read: _wrap(asarray) for read in typing.edits}
    return typing


def _wrap(func: cst.BaseExpression) -> Callable[[cst.CSTNode], cst.CSTNode]:
    return lambda name: cst.Call(func=func, args=[cst.Arg(name)])


def _check_not_rebound(ctx: ModuleContext, body, index: str) -> None:
    """A body that binds its index name again (`i = i + 1`, a nested `def f(i)`, `for i in ...`)
    has reads pallas-fix cannot tell apart from the loop index."""
    if index in set(bindings(body.body, nested=True)) or any(
        isinstance(n, (cst.FunctionDef, cst.Lambda)) and index in param_names(n) for n in walk(body.body)
    ):
        raise Refuse(f"the loop body binds its index `{index}` again; unrolled, pallas-fix cannot tell which"
                     " reads are the loop index (use another name)")


def _reads(ctx: ModuleContext, root: cst.CSTNode, index: str) -> list[cst.Name]:
    """The Name nodes under `root` that read `index` (not attributes, keywords or parameters)."""
    out = []
    for node in walk(root):
        if not (isinstance(node, cst.Name) and node.value == index):
            continue
        parent = ctx.parent(node)
        if is_label(parent, node):
            continue
        if isinstance(parent, (cst.Param, cst.FunctionDef, cst.ClassDef, cst.ImportAlias)):
            continue
        out.append(node)
    return out


def _int_locals(body, index: str) -> dict[str, cst.Assign]:
    """Body-level `name = expr` statements whose name the body binds only there."""
    stmts = body.body.body if isinstance(body.body, cst.IndentedBlock) else []
    counts: dict[str, int] = {}
    for name in bindings(body.body, nested=True):
        counts[name] = counts.get(name, 0) + 1
    out = {}
    for stmt in stmts:
        if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1):
            continue
        small = stmt.body[0]
        if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name):
            name = small.targets[0].target.value
            if name != index and counts.get(name) == 1:
                out[name] = small
    return out


class _Sorter:
    def __init__(self, ctx, env, index: str, values: range, locals_: dict[str, cst.Assign], root, fits: Fits) -> None:
        self.ctx, self.env, self.index, self.values = ctx, env, index, values
        self.locals = locals_
        self.root = root
        self.fits = fits
        self.unplaced: list[str] = []
        self.local_static: dict[str, bool] = {}

    def stays_python(self, read: cst.Name) -> bool:
        top = self._arithmetic_top(read)
        results = [self.value(top, k) for k in self.values]
        if any(r is None for r in results):
            return False
        return self._static_position(top, min(results, default=0)) and self._inside_refs(top, max(results, default=0))

    # -- windows into refs ----------------------------------------------------------------------
    def _inside_refs(self, top: cst.BaseExpression, largest: int) -> bool:
        """Every ref window `top` starts (or index it is) provably ends inside the ref."""
        parent = self.ctx.parent(top)
        if isinstance(parent, cst.Index):
            return self._element_fits(parent, largest + 1)
        if self._ds_start(parent, top):
            call = self.ctx.parent(parent)
            size_arg = call.args[1] if len(call.args) > 1 and call.args[1].keyword is None else None  # type: ignore[attr-defined]
            size = self.env.static_int(size_arg.value) if size_arg is not None else None
            return size is not None and self._window_fits(call, largest + size)
        return True  # a slice bound or a body-local: judged where it lands

    def _window_fits(self, ds: cst.Call, end: int) -> bool:
        """`ds` is an element of ref subscripts, directly or through a body-local bound once to it."""
        parent = self.ctx.parent(ds)
        if isinstance(parent, cst.Index):
            return self._element_fits(parent, end)
        if isinstance(parent, cst.Assign) and parent.value is ds and len(parent.targets) == 1:
            name = parent.targets[0].target
            if isinstance(name, cst.Name) and self.locals.get(name.value) is parent:
                reads = [r for r in _reads(self.ctx, self.root, name.value) if r is not name]
                return all(isinstance(self.ctx.parent(r), cst.Index) and self._element_fits(self.ctx.parent(r), end)
                           for r in reads)
        return False

    def _element_fits(self, index: cst.Index, end: int) -> bool:
        element = self.ctx.parent(index)
        subscript = self.ctx.parent(element)
        if not (isinstance(element, cst.SubscriptElement) and isinstance(subscript, cst.Subscript)):
            return False
        target = subscript.value
        items = list(subscript.slice)
        dim = items.index(element)
        if isinstance(target, cst.Attribute) and target.attr.value == "at":
            fits = False  # a view: its dims are not the ref's
        elif not isinstance(target, cst.Name):
            fits = False  # `refs[0][...]` and the like: pallas-fix cannot tell what is indexed
        elif any(isinstance(e.slice, cst.Index) and (isinstance(e.slice.value, cst.Ellipsis)
                                                      or (isinstance(e.slice.value, cst.Name) and e.slice.value.value == "None"))
                 for e in items):
            fits = self.fits(target.value, -1, end) is None  # positions are not dims
        else:
            fits = self.fits(target.value, dim, end) is not False
        if not fits:
            self.unplaced.append(f"`{self.ctx.code(target)}` dim {dim} up to {end}")
        return fits

    def _arithmetic_top(self, node: cst.BaseExpression) -> cst.BaseExpression:
        """The largest integer arithmetic expression with `node` at its root."""
        while True:
            parent = self.ctx.parent(node)
            if isinstance(parent, cst.BinaryOperation) or (
                isinstance(parent, cst.UnaryOperation) and isinstance(parent.operator, (cst.Minus, cst.Plus))
            ):
                node = parent
            else:
                return node

    def _static_position(self, top: cst.BaseExpression, smallest: int) -> bool:
        parent = self.ctx.parent(top)
        if isinstance(parent, (cst.Index, cst.Slice)) or self._ds_start(parent, top):
            return smallest >= 0
        if isinstance(parent, cst.Assign) and parent.value is top:
            name = parent.targets[0].target
            if isinstance(name, cst.Name) and self.locals.get(name.value) is parent:
                return self._local_stays_python(name.value)
        return False

    def _ds_start(self, parent, top) -> bool:
        if not isinstance(parent, cst.Arg) or parent.value is not top:
            return False
        call = self.ctx.parent(parent)
        if not (isinstance(call, cst.Call) and self.ctx.imports.is_(call.func, N.DS | N.SLICE)):
            return False
        if parent.keyword is not None:
            return parent.keyword.value == "start"
        return call.args.index(parent) == 0

    def _local_stays_python(self, name: str) -> bool:
        """Every read of a body-local bound to index arithmetic stays a Python int."""
        if name not in self.local_static:
            self.local_static[name] = False  # a cycle reads as "no"
            self.local_static[name] = all(self.stays_python(r) for r in _reads(self.ctx, self.root, name))
        return self.local_static[name]

    def value(self, expr: cst.BaseExpression, k: int, depth: int = 0) -> Optional[int]:
        """`expr` at index value `k`, as int32 arithmetic that never wraps; None when it is not
        integer arithmetic on the index and Python ints, or a step leaves int32."""
        if depth > _DEPTH:
            return None
        if isinstance(expr, cst.Name) and expr.value == self.index:
            return k
        if isinstance(expr, cst.Name) and expr.value in self.locals:
            return self.value(self.locals[expr.value].value, k, depth + 1)
        if isinstance(expr, cst.BinaryOperation):
            a, b = self.value(expr.left, k, depth + 1), self.value(expr.right, k, depth + 1)
            result = int_binop(expr.operator, a, b) if a is not None and b is not None else None
        elif isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, (cst.Minus, cst.Plus)):
            a = self.value(expr.expression, k, depth + 1)
            result = None if a is None else (-a if isinstance(expr.operator, cst.Minus) else a)
        else:
            result = self.env.static_int(expr)
        return result if result is not None and _INT32[0] <= result <= _INT32[1] else None
