"""Read and rewrite what a pallas_call says about its grid and blocks.

`CallSite` maps each kernel ref parameter to its slot (input k, output k, scratch, scalar
prefetch), reads the current grid and BlockSpecs as syntax, and produces the new keyword values
for a plan that adds grid axes or changes some refs' blocks. Anything it cannot read exactly
becomes a refusal reason (`CallSiteError`), never a guess.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import libcst as cst

from pallas_fix.core import names as N
from pallas_fix.analysis.context import ModuleContext, walk
from pallas_fix.core.model import Backend, KernelSite
from pallas_fix.analysis.provenance import Env
from pallas_fix.core.names import call_arg as _arg_value


class CallSiteError(Exception):
    """A precondition on the pallas_call failed; the message is the refusal reason."""


@dataclass
class Slot:
    kind: str  # "prefetch" | "in" | "out" | "scratch"
    index: int  # position among its kind
    param: str
    arg: Optional[cst.BaseExpression] = None  # call-site array (inputs / prefetch)
    out_shape: Optional[cst.BaseExpression] = None  # ShapeDtypeStruct (outputs)


@dataclass
class Spec:
    """A BlockSpec as written. block None = whole array; index None = all zeros."""

    node: Optional[cst.BaseExpression]  # the spec expression (None when absent)
    block: Optional[list[cst.BaseExpression]]
    index_map: Optional[cst.BaseExpression]  # lambda / function name
    index_params: list[str] = field(default_factory=list)
    index_exprs: Optional[list[cst.BaseExpression]] = None  # lambda's returned tuple
    whole: bool = True  # block is the whole array and index is zero




def _elements(expr: cst.BaseExpression) -> Optional[list[cst.BaseExpression]]:
    if isinstance(expr, (cst.Tuple, cst.List)):
        if any(isinstance(e, cst.StarredElement) for e in expr.elements):
            return None
        return [e.value for e in expr.elements]
    return None


class CallSite:
    def __init__(self, ctx: ModuleContext, site: KernelSite, kernel_env: Env) -> None:
        self.ctx = ctx
        self.site = site
        self.env = kernel_env
        if site.kernel is None:
            raise CallSiteError("the kernel function is not defined in this module")
        if site.invocation is None:
            raise CallSiteError("the pallas_call's result is not called in this module, so its arguments are unknown")
        if isinstance(site.kernel.params.star_arg, cst.Param):
            raise CallSiteError("the kernel takes `*refs`; pallas-fix cannot map varargs to BlockSpecs")
        self.num_prefetch = self._num_prefetch()
        self.args = self._invocation_args()
        self.out_shapes, self.single_output = self._out_shapes()
        self.slots = self._slots()
        self.grid = self._grid()
        self.in_specs_expr = self._spec_container("in_specs")
        self.out_specs_expr = self._spec_container("out_specs")

    # -- reading ----------------------------------------------------------------------------------
    def _num_prefetch(self) -> int:
        arg = self.site.grid_spec_keywords.get("num_scalar_prefetch")
        if arg is None:
            return 0
        n = self.env.static_int(arg.value)
        if n is None:
            raise CallSiteError("num_scalar_prefetch is not a literal")
        return n

    def _invocation_args(self) -> list[cst.BaseExpression]:
        inv = self.site.invocation
        assert inv is not None
        if any(a.star or a.keyword is not None for a in inv.args):
            raise CallSiteError("the kernel is called with *args or keywords; inputs cannot be matched to refs")
        return [a.value for a in inv.args]

    def _out_shapes(self) -> tuple[list[cst.BaseExpression], bool]:
        out = self.site.kw("out_shape")
        if out is None:
            raise CallSiteError("pallas_call has no out_shape")
        out = self.ctx.resolve_value(out, self.site.call)
        items = _elements(out)
        if items is None:
            return [out], True
        return [self.ctx.resolve_value(i, self.site.call) for i in items], False

    def _slots(self) -> dict[str, Slot]:
        fn = self.site.kernel
        assert fn is not None
        params = [p.name.value for p in list(fn.params.posonly_params) + list(fn.params.params)]
        params = [p for i, p in enumerate(params) if i >= len(self.site.partial_args) and p not in self.site.partial_kwargs]
        params = [p for p in params if self.env.params.get(p) is not None and self.env.params[p].is_ref]
        n_in = len(self.args) - self.num_prefetch
        if n_in < 0:
            raise CallSiteError("fewer call arguments than scalar-prefetch operands")
        slots: dict[str, Slot] = {}
        n_out = len(self.out_shapes)
        for i, name in enumerate(params):
            if i < self.num_prefetch:
                slots[name] = Slot("prefetch", i, name, self.args[i])
            elif i < self.num_prefetch + n_in:
                k = i - self.num_prefetch
                slots[name] = Slot("in", k, name, self.args[self.num_prefetch + k])
            elif i < self.num_prefetch + n_in + n_out:
                k = i - self.num_prefetch - n_in
                slots[name] = Slot("out", k, name, out_shape=self.out_shapes[k])
            else:
                slots[name] = Slot("scratch", i - self.num_prefetch - n_in - n_out, name)
        return slots

    def _grid(self) -> list[cst.BaseExpression]:
        grid = self.site.kw("grid")
        if grid is None:
            return []
        self._refuse_if_mutated(grid, "grid")
        value = self.ctx.resolve_value(grid, self.site.call)
        items = _elements(value)
        if items is not None:
            return items
        if isinstance(value, cst.Integer) or (isinstance(value, (cst.Name, cst.BinaryOperation, cst.Call)) and self._int_like(value)):
            return [value]
        raise CallSiteError(f"cannot read the grid `{self.ctx.code(grid)}` as a tuple")

    def _int_like(self, expr: cst.BaseExpression) -> bool:
        # `grid=n // bs` or `grid=pl.cdiv(n, bs)`: integers, not tuples.
        if isinstance(expr, cst.BinaryOperation):
            return True
        if isinstance(expr, cst.Call):
            return (self.ctx.imports.qualify(expr.func) or "").endswith("cdiv")
        return False

    def _spec_container(self, key: str) -> Optional[cst.BaseExpression]:
        spec = self.site.kw(key)
        if spec is None:
            return None
        self._refuse_if_mutated(spec, key)
        return self.ctx.resolve_value(spec, self.site.call)

    def _refuse_if_mutated(self, expr: cst.BaseExpression, what: str) -> None:
        """`in_specs = [...]; in_specs.insert(3, ...)`: the literal is not what pallas_call gets."""
        if not isinstance(expr, cst.Name):
            return
        name = expr.value
        for node in walk(self.ctx.scope_of(self.site.call)):
            if (
                isinstance(node, cst.Call)
                and isinstance(node.func, cst.Attribute)
                and isinstance(node.func.value, cst.Name)
                and node.func.value.value == name
                and node.func.attr.value in ("append", "insert", "extend", "pop", "remove", "clear", "reverse", "sort")
            ):
                raise CallSiteError(f"`{name}` ({what}) is modified after it is built; pallas-fix reads only literal lists")
            if isinstance(node, cst.AugAssign) and isinstance(node.target, cst.Name) and node.target.value == name:
                raise CallSiteError(f"`{name}` ({what}) is modified after it is built; pallas-fix reads only literal lists")
            if (
                isinstance(node, cst.AssignTarget)
                and isinstance(node.target, cst.Subscript)
                and isinstance(node.target.value, cst.Name)
                and node.target.value.value == name
            ):
                raise CallSiteError(f"`{name}` ({what}) is modified after it is built; pallas-fix reads only literal lists")

    def spec_list(self, kind: str) -> Optional[list[Optional[cst.BaseExpression]]]:
        """Spec expressions per slot of `kind` ('in' / 'out'); None entries = absent specs."""
        container = self.in_specs_expr if kind == "in" else self.out_specs_expr
        count = (len(self.args) - self.num_prefetch) if kind == "in" else len(self.out_shapes)
        if container is None:
            return [None] * count
        items = _elements(container)
        if items is None:
            if count == 1 and (kind == "out" and self.single_output):
                return [container]
            if kind == "in" and count == 1 and self._is_block_spec(container):
                return [container]
            raise CallSiteError(f"cannot read {kind}_specs `{self.ctx.code(container)}` as a list of BlockSpecs")
        if len(items) != count:
            raise CallSiteError(f"{kind}_specs has {len(items)} entries for {count} operands")
        return items

    def _is_block_spec(self, expr: cst.BaseExpression) -> bool:
        expr = self.ctx.resolve_value(expr, self.site.call)
        return isinstance(expr, cst.Call) and self.ctx.imports.is_(expr.func, N.BLOCK_SPEC)

    def _is_full_shape(self, block: cst.BaseExpression, slot: Slot) -> bool:
        if not (isinstance(block, cst.Attribute) and block.attr.value == "shape"):
            return False
        text = self.ctx.code(block.value)
        if slot.kind == "in" and slot.arg is not None:
            return self.ctx.code(slot.arg) == text and self.args_visible_at_call()
        if slot.kind == "out" and isinstance(slot.out_shape, cst.Call):
            shape = _arg_value(slot.out_shape, 0, "shape")
            return shape is not None and self.ctx.code(shape) == self.ctx.code(block)
        return False

    def spec_of(self, slot: Slot) -> Spec:
        if slot.kind not in ("in", "out"):
            raise CallSiteError(f"`{slot.param}` is a {slot.kind} operand; only inputs and outputs have BlockSpecs")
        expr = self.spec_list(slot.kind)[slot.index]
        if expr is None:
            return Spec(None, None, None)
        node = self.ctx.resolve_value(expr, self.site.call)
        if not (isinstance(node, cst.Call) and self.ctx.imports.is_(node.func, N.BLOCK_SPEC)):
            raise CallSiteError(f"the spec of `{slot.param}` is not a pl.BlockSpec(...) call")
        if any(a.keyword is not None and a.keyword.value in ("memory_space", "pipeline_mode") for a in node.args):
            raise CallSiteError(f"the BlockSpec of `{slot.param}` sets a memory space or pipeline mode")
        block = _arg_value(node, 0, "block_shape")
        index_map = _arg_value(node, 1, "index_map")
        spec = Spec(node, None, index_map)
        if block is not None and not (isinstance(block, cst.Name) and block.value == "None"):
            if self._is_full_shape(block, slot):
                block = None  # `pl.BlockSpec(x.shape, ...)`: the whole array
            else:
                items = _elements(self.ctx.resolve_value(block, self.site.call))
                if items is None:
                    raise CallSiteError(f"cannot read the block shape of `{slot.param}`")
                spec.block = items
        if index_map is not None:
            lam = self.ctx.resolve_value(index_map, self.site.call)
            if isinstance(lam, cst.Lambda):
                spec.index_params = [p.name.value for p in lam.params.params]
                body = _elements(lam.body)
                spec.index_exprs = body if body is not None else None
            spec.index_map = lam
        spec.whole = spec.block is None and (spec.index_exprs is None or all(_is_zero(e) for e in spec.index_exprs))
        if spec.index_map is not None and spec.index_exprs is None:
            spec.whole = False
        if spec.block is not None:
            spec.whole = False
        return spec

    # -- shapes -------------------------------------------------------------------------------------
    def shape_dim(self, param: str, dim: int) -> Optional[cst.BaseExpression]:
        """The full array's size along `dim`, written at the call site."""
        slot = self.slots.get(param)
        if slot is None:
            return None
        if slot.kind in ("in", "prefetch"):
            if not _is_plain_name(slot.arg) or not self.args_visible_at_call():
                return None
            return _shape_index(slot.arg, dim)
        if slot.kind == "out":
            sds = slot.out_shape
            if not isinstance(sds, cst.Call):
                return None
            shape = _arg_value(sds, 0, "shape")
            if shape is None:
                return None
            shape = self.ctx.resolve_value(shape, self.site.call)
            items = _elements(shape)
            if items is not None:
                return items[dim] if dim < len(items) else None
            if isinstance(shape, cst.Attribute) and shape.attr.value == "shape" and _is_plain_name(shape.value):
                return _shape_index(shape.value, dim)
        return None

    def kernel_shape_dim(self, param: str, dim: int) -> Optional[cst.BaseExpression]:
        """What `param.shape[dim]` means inside the kernel, written at the call site: the block's
        size when the ref has a BlockSpec (squeezed `None` dims vanish from the kernel's view),
        the array's size otherwise."""
        slot = self.slots.get(param)
        if slot is None or slot.kind not in ("in", "out", "prefetch"):
            return None
        if slot.kind == "prefetch":
            return self.shape_dim(param, dim)
        spec = self.spec_of(slot)
        if spec.block is None:
            return self.shape_dim(param, dim) if spec.whole else None
        visible = [b for b in spec.block if not (isinstance(b, cst.Name) and b.value == "None")]
        if any(self.ctx.imports.qualify(b.func) if isinstance(b, cst.Call) else False for b in visible):
            return None  # pl.Squeezed() / pl.Element(...) block dims: not plain sizes
        return visible[dim] if dim < len(visible) else None

    def kernel_rank(self, param: str) -> Optional[int]:
        """Rank of the kernel's view of `param` (squeezed block dims excluded)."""
        slot = self.slots.get(param)
        if slot is None or slot.kind not in ("in", "out"):
            return None
        spec = self.spec_of(slot)
        if spec.block is not None:
            return sum(1 for b in spec.block if not (isinstance(b, cst.Name) and b.value == "None"))
        return self.rank(param)

    def args_visible_at_call(self) -> bool:
        """Can the call's arguments be named where pallas_call is written? (Not in the decorator
        form, nor when a builder function returns the pallas_call for someone else to call.)"""
        inv = self.site.invocation
        return inv is not None and self.ctx.scope_of(inv) is self.ctx.scope_of(self.site.call)

    def rank(self, param: str) -> Optional[int]:
        slot = self.slots.get(param)
        if slot is None:
            return None
        if slot.kind == "out" and isinstance(slot.out_shape, cst.Call):
            shape = _arg_value(slot.out_shape, 0, "shape")
            if shape is not None:
                shape = self.ctx.resolve_value(shape, self.site.call)
                items = _elements(shape)
                if items is not None:
                    return len(items)
                if isinstance(shape, cst.Attribute) and shape.attr.value == "shape" and _is_plain_name(shape.value):
                    found = self._rank_of_name(shape.value) or self._rank_from_examples(shape.value)
                    if found is not None:
                        return found
                    # `ShapeDtypeStruct(x.shape, ...)`: the same rank as the input `x`.
                    text = self.ctx.code(shape.value)
                    for other in self.slots.values():
                        if other.kind == "in" and other.arg is not None and self.ctx.code(other.arg) == text:
                            found = self._rank_from_kernel(other.param)
                            if found is not None:
                                return found
        if slot.kind in ("in", "prefetch") and _is_plain_name(slot.arg):
            found = self._rank_of_name(slot.arg)
            if found is not None:
                return found
            found = self._rank_from_examples(slot.arg)
            if found is not None:
                return found
        spec = None
        try:
            spec = self.spec_of(slot) if slot.kind in ("in", "out") else None
        except CallSiteError:
            spec = None
        if spec is not None and spec.block is not None:
            return len(spec.block)
        return self._rank_from_kernel(param)

    def _rank_of_name(self, name_expr: cst.BaseExpression) -> Optional[int]:
        """`m, k = x.shape` in the scope of the call, or an output/out_shape built from it."""
        text = self.ctx.code(name_expr)
        scope = self.ctx.scope_of(self.site.call)
        for node in walk(scope):
            if isinstance(node, cst.Assign) and len(node.targets) == 1:
                target, value = node.targets[0].target, node.value
                if (
                    isinstance(target, (cst.Tuple, cst.List))
                    and isinstance(value, cst.Attribute)
                    and value.attr.value == "shape"
                    and self.ctx.code(value.value) == text
                    and not any(isinstance(e, cst.StarredElement) for e in target.elements)
                ):
                    return len(target.elements)
        # Another operand with a literal out_shape built from this array's shape.
        for slot in self.slots.values():
            if slot.kind == "out" and isinstance(slot.out_shape, cst.Call):
                shape = _arg_value(slot.out_shape, 0, "shape")
                if isinstance(shape, cst.Tuple):
                    dims = [self.ctx.code(e.value) for e in shape.elements]
                    used = {d for d in dims if d.startswith(text + ".shape[")}
                    if used and len(used) == len(dims):
                        return len(dims)
        return None

    def _rank_from_examples(self, name_expr: cst.BaseExpression) -> Optional[int]:
        """The file's `# pallas-fix: example entry(f32[256], ...)` directives name the rank of the
        entry's array parameters; an argument that is such a parameter, passed straight through,
        has that rank. All directives for the entry must agree."""
        if not isinstance(name_expr, cst.Name) or "pallas-fix: example" not in self.ctx.source:
            return None
        fn = self.ctx.enclosing_function(self.site.invocation) if self.site.invocation is not None else None
        if fn is None or self.ctx.assignments(name_expr.value, fn):
            return None
        params = [p.name.value for p in [*fn.params.posonly_params, *fn.params.params]]
        if name_expr.value not in params:
            return None
        position = params.index(name_expr.value)
        from pallas_fix.core.examples import ArgSpec, ExampleSyntaxError, extract_directives, parse_example

        ranks = set()
        for d in extract_directives(self.ctx.source):
            if d.kind != "example":
                continue
            try:
                ex = parse_example(d.text)
            except (ExampleSyntaxError, ValueError):
                continue
            if ex.entry != fn.name.value:
                continue
            value = ex.kwargs.get(name_expr.value, ex.args[position] if position < len(ex.args) else None)
            if isinstance(value, ArgSpec):
                ranks.add(len(value.shape))
        return ranks.pop() if len(ranks) == 1 else None

    def _rank_from_kernel(self, param: str) -> Optional[int]:
        """Every access to the ref spells out the same number of indices and no `...`."""
        fn = self.site.kernel
        assert fn is not None
        counts = set()
        for node in walk(fn):
            if isinstance(node, cst.Subscript):
                base = node.value
                if isinstance(base, cst.Attribute) and base.attr.value == "at":
                    base = base.value
                if isinstance(base, cst.Name) and base.value == param:
                    if any(isinstance(e.slice, cst.Index) and isinstance(e.slice.value, cst.Ellipsis) for e in node.slice):
                        continue
                    counts.add(len(node.slice))
            if (
                isinstance(node, cst.Assign)
                and isinstance(node.value, cst.Attribute)
                and node.value.attr.value == "shape"
                and isinstance(node.value.value, cst.Name)
                and node.value.value.value == param
                and isinstance(node.targets[0].target, cst.Tuple)
            ):
                return len(node.targets[0].target.elements)
        if len(counts) == 1:
            n = counts.pop()
            return n if n >= 2 else None
        return None

    # -- writing ------------------------------------------------------------------------------------
    def pl_alias(self) -> str:
        return pallas_alias(self.ctx)

    def needs_pallas_import(self) -> bool:
        return pallas_alias(self.ctx) == "pl" and self.ctx.imports.bindings.get("pl") != N.PALLAS

    def dimension_semantics(self) -> tuple[Optional[cst.Call], Optional[cst.Arg], Optional[list[str]]]:
        params = self.site.kw("compiler_params")
        if params is None:
            return None, None, None
        node = self.ctx.resolve_value(params, self.site.call)
        if not isinstance(node, cst.Call):
            return None, None, None
        for a in node.args:
            if a.keyword is not None and a.keyword.value == "dimension_semantics":
                items = _elements(self.ctx.resolve_value(a.value, self.site.call))
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

    def backend(self) -> Backend:
        return self.site.backend


def _is_zero(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Integer) and int(expr.evaluated_value) == 0


def _is_plain_name(expr: Optional[cst.BaseExpression]) -> bool:
    if isinstance(expr, cst.Name):
        return True
    if isinstance(expr, cst.Attribute):
        return _is_plain_name(expr.value)
    return False


def _shape_index(arr: cst.BaseExpression, dim: int) -> cst.BaseExpression:
    if dim < 0:
        return cst.parse_expression(f"{cst.Module([]).code_for_node(arr)}.shape[{dim}]")
    return cst.Subscript(
        value=cst.Attribute(value=arr, attr=cst.Name("shape")),
        slice=[cst.SubscriptElement(cst.Index(cst.Integer(str(dim))))],
    )


def pallas_alias(ctx: ModuleContext) -> str:
    """How this module spells `jax.experimental.pallas`: its alias, the dotted path, or `pl`."""
    for local, full in ctx.imports.bindings.items():
        if full == N.PALLAS:
            return local
    if N.PALLAS in ctx.imports.modules and ctx.imports.bindings.get("jax") == "jax":
        return N.PALLAS
    return "pl"
