"""Read and rewrite what a pallas_call says about its grid and blocks.

`CallSite` maps each kernel ref parameter to its slot (input k, output k, scratch, scalar
prefetch), reads the current grid and BlockSpecs as syntax, and produces the new keyword values
for a plan that adds grid axes or changes some refs' blocks; anything it cannot read exactly is
a `CallSiteError`, never a guess. Operand types: callsite.spelling.operands; ranks: callsite.ranks."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from pallas_fix.core import names as N
from pallas_fix.analysis.context import ModuleContext, walk
from pallas_fix.analysis.relays.splat_dict import splat_problem
from pallas_fix.analysis.discovery.operand_refs import scratch_count
from pallas_fix.analysis.values.provenance import Env
from pallas_fix.analysis.discovery.varargs import VarargsError, star_ref_names
from pallas_fix.analysis.relays.passed_in import passed_for
from pallas_fix.core.model import Backend, KernelSite
from pallas_fix.rewrite.callsite.spelling.block_dims import block_dim
from pallas_fix.rewrite.callsite.spelling.built_lists import built_items, mutates, present_arm
from pallas_fix.rewrite.callsite.call_params import aliased_output, dimension_semantics
from pallas_fix.rewrite.callsite.call_timing import CallTiming
from pallas_fix.rewrite.callsite.forwarded import copy_read, shadowed_read
from pallas_fix.rewrite.callsite.grid_shape import read_grid
from pallas_fix.rewrite.text.imports import pallas_alias
from pallas_fix.rewrite.callsite.operand_group_refs import all_present_ref_names
from pallas_fix.rewrite.callsite.conditional_specs import conditional_in_specs
from pallas_fix.rewrite.callsite.operand_groups import call_entries
from pallas_fix.rewrite.callsite.spelling.operands import CallSiteError, Slot, Spec, absent_spec, local_index_def
from pallas_fix.rewrite.callsite.out_leaves import built_structs, leaf_dim, one_named_output
from pallas_fix.rewrite.callsite.ranks import declared_rank, rank_from_kernel, traced_rank
from pallas_fix.rewrite.callsite.spelling.repeated_specs import no_block_spec, repeated_items
from pallas_fix.rewrite.text.syntax import elements, is_none, is_plain_name, is_zero, shape_index

__all__ = ["CallSite", "CallSiteError", "Slot", "Spec", "pallas_alias"]

class CallSite(CallTiming):
    def __init__(self, ctx: ModuleContext, site: KernelSite, kernel_env: Env, *, read_forwarded: bool = False) -> None:
        self.ctx = ctx
        self.site = site
        self.env = kernel_env
        self.read_forwarded = read_forwarded  # refs named in a callee (discovery.forwarded_refs): specs read, no rewrite
        self.grafted: set[int] = set()  # ids of the nodes an out_shape read by substitution built
        if site.kernel is None:
            raise CallSiteError("the kernel function is not defined in this module")
        if site.invocation is None or site.invocation_issue:
            raise CallSiteError(site.invocation_issue or "the pallas_call's result is not called in this module, so its arguments are unknown")
        problem = splat_problem(ctx, site.call)
        if problem is not None:
            raise CallSiteError(problem)
        self.num_prefetch = self._num_prefetch()
        self.args_expanded = False  # some operands come from `*operands` (see _invocation_args)
        self.built: dict[str, list[cst.BaseExpression]] = {}  # spec lists built by code (rewrite.callsite.spelling.built_lists)
        self.builder_reads: set[int] = set()  # the list names those building statements read
        self.args = self._invocation_args()
        self.out_shapes, self.single_output = self._out_shapes()
        self.slots = self._slots()
        self.in_specs_expr = self._spec_container("in_specs")
        self.out_specs_expr = self._spec_container("out_specs")
        self.grid = self._grid()
        # param -> (rank, the examples that showed it), from their trace: checked (proofs.rank_guards);
        # param -> the rank its kernel accesses spell, a lower bound (`x_ref[h, w]` is legal at rank 3)
        self.hypotheses: dict[str, tuple[int, str]] = {}
        self.counted_ranks: dict[str, int] = {}

    @property
    def aliased(self) -> bool:
        """The call sets input_output_aliases: an output starts as the input it aliases."""
        return self.site.kw("input_output_aliases") is not None

    # -- reading ----------------------------------------------------------------------------------
    def _num_prefetch(self) -> int:
        arg = self.site.grid_spec_keywords.get("num_scalar_prefetch")
        if arg is None:
            return 0
        if (n := self.env.static_int(arg.value)) is None:
            raise CallSiteError("num_scalar_prefetch is not a literal")
        return n

    def _invocation_args(self) -> list[cst.BaseExpression]:
        """The call's operands; `*operands` of a local tuple literal or list built under `if`s: its items."""
        assert self.site.invocation is not None
        self.operand_entries = call_entries(self.ctx, self.site.invocation, self.site)
        self.args_expanded = any(a.star for a in self.site.invocation.args)
        self.conditional = any(e.variable for e in self.operand_entries)  # lists in all-present numbering
        self.default_tail = None  # no in_specs for such operands: see conditional_specs
        return [e.value for e in self.operand_entries]

    def _out_shapes(self) -> tuple[list[cst.BaseExpression], bool]:
        out = self.site.kw("out_shape")
        if out is None:
            raise CallSiteError("pallas_call has no out_shape")
        built = built_items(self.ctx, out, self.anchor(out))
        if built is not None and built[1]:  # `out_shape.append(...)`, also under `if` beside its spec
            if any(id(r) not in built[1] for r in self.other_reads(out, within_call=False)):
                raise CallSiteError(f"`{self.ctx.code(out)}` (out_shape) is also used elsewhere; give this pallas_call its own out_shape")
            self.builder_reads |= built[1]
            return [self.ctx.resolve_value(i, self.anchor(i)) for i in built[0]], False
        out = self.ctx.resolve_value(out, self.anchor(out))
        items = elements(out)
        if items is None:  # `tuple(... for x in (a, b))`, `_out_shapes(x)`, or one struct
            return built_structs(self, out) or ([out], True)
        return [self.ctx.resolve_value(i, self.anchor(i)) for i in items], False

    def _slots(self) -> dict[str, Slot]:
        fn = self.site.kernel
        assert fn is not None
        params = [p.name.value for p in list(fn.params.posonly_params) + list(fn.params.params)]
        params = [p for i, p in enumerate(params) if i >= len(self.site.partial_args) and p not in self.site.partial_kwargs]
        params: list[Optional[str]] = [p for p in params if self.env.params.get(p) is not None and self.env.params[p].is_ref]
        n_in = len(self.args) - self.num_prefetch
        if n_in < 0:
            raise CallSiteError("fewer call arguments than scalar-prefetch operands")
        slots: dict[str, Slot] = {}
        n_out = len(self.out_shapes)
        star = isinstance(fn.params.star_arg, cst.Param)
        params += self._star_names(len(params), n_out) if star else one_named_output(self, len(params) - self.num_prefetch - n_in)
        for i, name in enumerate(params):
            if name is None:
                continue  # an item of `*refs` the kernel gives no name
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

    def _star_names(self, leading: int, n_out: int) -> list[Optional[str]]:
        """The names bound from `*refs`, one per ref it receives (analysis.discovery.varargs)."""
        scratch = scratch_count(self.site, lambda e: self.ctx.resolve_value(e, self.site.call))
        try:
            if self.conditional:
                return all_present_ref_names(self.ctx, self.site, self.env, leading, self.operand_entries, n_out, scratch)
            return star_ref_names(self.site, self.env, leading, None if scratch is None else len(self.args) + n_out + scratch,
                                  forwarded=self.read_forwarded, at_least=len(self.args) + n_out)
        except VarargsError as e:
            raise CallSiteError(str(e)) from None

    def _grid(self) -> list[cst.BaseExpression]:
        grid = self.site.kw("grid")
        if grid is None:
            return []
        self._refuse_if_mutated(grid, "grid")
        items = read_grid(self.ctx, grid, self.anchor(grid), self._array_rank)
        # A helper's `grid=(num_programs,)`: what this kernel's call passes (KernelSite.forwarded).
        return [passed_for(self.ctx, self.site, e) or e for e in items] if self.site.forwarded else items

    def _array_rank(self, array: cst.BaseExpression) -> Optional[int]:
        """The rank of an operand array named in the wrapper (for `x.shape` in a built grid)."""
        for slot in self.slots.values():
            if slot.kind in ("in", "prefetch") and slot.arg is not None and self.ctx.code(slot.arg) == self.ctx.code(array):
                return declared_rank(self.ctx, self.site, self.slots, slot)
        return None

    def _spec_container(self, key: str) -> Optional[cst.BaseExpression]:
        """The spec list as written; for a list built by code (appends, `+`), the expression
        itself, which no literal reader takes for a list, and its items in `self.built`."""
        spec = self.site.kw(key)
        if key == "in_specs" and self.conditional:
            return conditional_in_specs(self, spec)  # fills self.built and self.builder_reads
        if spec is None:
            return None
        value = self.ctx.resolve_value(spec, self.anchor(spec))
        built = built_items(self.ctx, spec, spec)  # read up to where it is taken (a grid spec before the call)
        if built is not None and (built[1] or not isinstance(value, cst.List)):
            items, reads, parts = built
            for part in parts:
                if any(id(r) not in reads and not (self.site.forwarded and copy_read(self.ctx, r)) for r in self.other_reads(part, within_call=False)):
                    raise CallSiteError(f"`{part.value}` ({key}) is also used elsewhere; give this pallas_call its own {key}")
            self.built[key], self.builder_reads = items, self.builder_reads | reads
            return spec
        self._refuse_if_mutated(spec, key)
        return value

    def spec_items(self, kind: str) -> Optional[list[cst.BaseExpression]]:
        """The items of `kind`'s spec list (literal or built), None for a single spec."""
        container = self.in_specs_expr if kind == "in" else self.out_specs_expr
        built = self.built.get(f"{kind}_specs")
        if built is not None:
            return built
        if no_block_spec(self.ctx, container, self.anchor(container)):
            return [container] * self._spec_count(kind)  # type: ignore[list-item]
        return repeated_items(self.ctx, container, self.anchor(container)) or (elements(container) if container is not None else None)

    def _refuse_if_mutated(self, expr: cst.BaseExpression, what: str) -> None:
        """`in_specs = [...]; in_specs.insert(3, ...)`: the literal is not what pallas_call gets."""
        name = expr.value if isinstance(expr, cst.Name) else None
        if name is not None and any(mutates(node, name) for node in walk(self.ctx.scope_of(self.anchor(expr)))):
            raise CallSiteError(f"`{name}` ({what}) is modified after it is built; pallas-fix reads literal lists, extended only by plain `.append` / `.extend` / `+=` statements before the call")

    def spec_list(self, kind: str) -> Optional[list[Optional[cst.BaseExpression]]]:
        """Spec expressions per slot of `kind` ('in' / 'out'); None entries = absent specs."""
        container = self.in_specs_expr if kind == "in" else self.out_specs_expr
        count = self._spec_count(kind)
        if container is None:
            return [None] * count
        items = self.spec_items(kind)
        if items is None:
            if count == 1 and (kind == "out" and self.single_output):
                return [container]
            if kind == "in" and count == 1 and self._is_block_spec(container):
                return [container]
            raise CallSiteError(
                f"cannot read {kind}_specs `{self.ctx.code(container)}` as a list of BlockSpecs (pallas-fix reads list "
                "literals, `+` of them and plain `.append` / `.extend` before the call, not comprehensions or helpers)"
            )
        if len(items) != count:
            raise CallSiteError(f"{kind}_specs has {len(items)} entries for {count} operands")
        return [present_arm(i) for i in items]

    def refuse_if_shared(self, expr: Optional[cst.BaseExpression], what: str, *, within_call: bool) -> None:
        """Edits change a name's bound value in place: refuse when `expr` is a name that is also
        read elsewhere (another operand's spec, another pallas_call's grid), since the edit would
        change those too. `within_call`: reads inside this pallas_call itself are this edit's own."""
        if self.other_reads(expr, within_call=within_call):
            assert isinstance(expr, cst.Name)
            raise CallSiteError(
                f"`{expr.value}` ({what}) is also used elsewhere and the rewrite would change it there too; "
                f"give this pallas_call its own {what}"
            )

    def other_reads(self, expr: Optional[cst.BaseExpression], *, within_call: bool) -> list[cst.Name]:
        """The reads of the name `expr` besides `expr` itself, in the scope that binds it (none
        for anything but a bound name); `within_call` leaves out those inside this pallas_call."""
        if not isinstance(expr, cst.Name):
            return []
        name = expr.value
        scope = next((sc for sc in self.ctx.scope_chain(self.anchor(expr)) if self.ctx.assignments(name, sc)), None)
        if scope is None:
            return []
        out = []
        for node in walk(scope):
            if not isinstance(node, cst.Name) or node.value != name or node is expr:
                continue
            parent = self.ctx.parent(node)
            if isinstance(parent, cst.AssignTarget) or (isinstance(parent, cst.Arg) and parent.keyword is node):
                continue  # a binding, or the `in_specs=` of `in_specs=in_specs`
            if (isinstance(parent, cst.Attribute) and parent.attr is node) or shadowed_read(self.ctx, node, scope):
                continue
            if within_call and any(a is self.site.call or a is self.anchor(expr) for a in self.ctx.ancestors(node)):
                continue
            if id(node) in self.builder_reads:
                continue  # `in_specs.append(...)` building the list this call reads
            out.append(node)
        return out

    def _spec_count(self, kind: str) -> int:
        return (len(self.args) - self.num_prefetch) if kind == "in" else len(self.out_shapes)

    def _is_block_spec(self, expr: cst.BaseExpression) -> bool:
        expr = self.ctx.resolve_value(expr, self.anchor(expr))
        return isinstance(expr, cst.Call) and self.ctx.imports.is_(expr.func, N.BLOCK_SPEC)

    def _is_full_shape(self, block: cst.BaseExpression, slot: Slot) -> bool:
        if not (isinstance(block, cst.Attribute) and block.attr.value == "shape"):
            return False
        text = self.ctx.code(block.value)
        if slot.kind == "in" and slot.arg is not None:
            return self.ctx.code(slot.arg) == text and self.arg_at_call(slot.arg, strict=True)
        if slot.kind == "out" and isinstance(slot.out_shape, cst.Call):
            shape = N.call_arg(slot.out_shape, 0, "shape")
            return shape is not None and self.ctx.code(shape) == self.ctx.code(block) and self.same_at_call(shape, "out_shape")
        return False

    def spec_of(self, slot: Slot) -> Spec:
        if slot.kind not in ("in", "out"):
            raise CallSiteError(f"`{slot.param}` is a {slot.kind} operand; only inputs and outputs have BlockSpecs")
        expr = self.spec_list(slot.kind)[slot.index]
        if expr is None:
            return Spec(None, None, None)
        if no_block_spec(self.ctx, expr, self.anchor(expr)):
            return Spec(None, None, None)
        node = self.ctx.resolve_value(expr, self.anchor(expr))
        if is_none(node):  # `None,  # bias` beside a `None` operand: the kernel's ref is None
            return absent_spec(self.ctx, slot, self.anchor(slot.arg) if slot.arg is not None else node)
        if not (isinstance(node, cst.Call) and self.ctx.imports.is_(node.func, N.BLOCK_SPEC)):
            raise CallSiteError(f"the spec of `{slot.param}` is not a pl.BlockSpec(...) call")
        self.same_at_call(node, f"the BlockSpec of `{slot.param}`")  # its sizes are copied into new specs
        placement = [a for a in node.args if a.keyword is not None and a.keyword.value in ("memory_space", "pipeline_mode")]
        block = N.call_arg(node, 0, "block_shape")
        index_map = N.call_arg(node, 1, "index_map")
        spec = Spec(node, None, index_map)
        if placement:
            # Kept as written on a spec that stays (an SMEM table beside a new axis); a spec that
            # pallas-fix rewrites repeats it, or refuses (Spec.carried_placement).
            spec.placement = ", ".join(self.ctx.code(a).strip().rstrip(",") for a in placement)
        if block is not None and not is_none(block):
            if self._is_full_shape(block, slot):
                block = None  # `pl.BlockSpec(x.shape, ...)`: the whole array
            else:
                items = elements(self.same_at_call(self.ctx.resolve_value(block, self.anchor(block)), f"the block shape of `{slot.param}`"))
                if items is None:
                    raise CallSiteError(f"cannot read the block shape of `{slot.param}`")
                spec.block = items
                spec.dims = [block_dim(self.ctx, b, self.anchor(b)) for b in items]
        if index_map is not None:
            lam = self.ctx.resolve_value(index_map, self.anchor(index_map))
            lam = local_index_def(self.ctx, lam, node) or lam  # `def idx_map(i, j): return i, 0`
            if isinstance(lam, (cst.Lambda, cst.FunctionDef)):
                spec.read_lambda(lam)
                spec.fill_zero_index(len(spec.block) if spec.block is not None else declared_rank(self.ctx, self.site, self.slots, slot))
            spec.index_map, spec.index_arg = lam, index_map
        # an index_map we cannot read may move the block; `(0,) * x.ndim` never does, whatever the rank
        zero_index = (all(is_zero(e) for e in spec.index_exprs) if spec.index_exprs is not None
                      else spec.index_map is None or spec.index_all_zero)
        spec.whole = spec.block is None and zero_index
        return spec

    # -- shapes -------------------------------------------------------------------------------------
    def shape_dim(self, param: str, dim: int) -> Optional[cst.BaseExpression]:
        """The full array's size along `dim`, written at the call site."""
        slot = self.slots.get(param)
        if slot is None:
            return None
        if slot.kind in ("in", "prefetch"):
            if not is_plain_name(slot.arg) or not self.arg_at_call(slot.arg, strict=True):
                out = aliased_output(self, slot)  # one buffer, of one shape (pallas_call checks): the output's
                return None if out is None else self.shape_dim(out.param, dim)
            return shape_index(slot.arg, dim)
        if slot.kind == "out":
            sds = slot.out_shape
            if not isinstance(sds, cst.Call):  # a struct the call names (`kwargs['outs']`): its leaf's dim
                return leaf_dim(self, slot, dim)
            shape = N.call_arg(sds, 0, "shape")
            if shape is None:
                return None
            shape = self.ctx.resolve_value(shape, self.anchor(shape))
            items = elements(shape)
            if items is not None:
                return self.same_at_call(items[dim], "out_shape") if dim < len(items) else None
            if isinstance(shape, cst.Attribute) and shape.attr.value == "shape" and is_plain_name(shape.value):
                return shape_index(self.same_at_call(shape.value, "out_shape"), dim)
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
        if spec.dims is None:
            return self.shape_dim(param, dim) if spec.whole else None
        visible = spec.visible_dims()
        if dim >= len(visible):
            return None
        return spec.dims[visible[dim]].size  # None for pl.Element(...) and other non-size dims

    def kernel_rank(self, param: str) -> Optional[int]:
        """Rank of the kernel's view of `param` (squeezed block dims excluded)."""
        slot = self.slots.get(param)
        if slot is None or slot.kind not in ("in", "out"):
            return None
        spec = self.spec_of(slot)
        return len(spec.visible_dims()) if spec.dims is not None else self.rank(param)

    def rank(self, param: str, counted: bool = True) -> Optional[int]:
        slot = self.slots.get(param)
        if slot is None:
            return None
        # An output shaped like an input takes that input's rank, its BlockSpec counted.
        found = declared_rank(self.ctx, self.site, self.slots, slot, self.rank if slot.kind == "out" else None)
        if found is not None:
            return found
        try:
            spec = self.spec_of(slot) if slot.kind in ("in", "out") else None
        except CallSiteError:
            spec = None
        if spec is not None and spec.block is not None:
            return len(spec.block)
        spelled = rank_from_kernel(self.site, param) if counted else None  # not: x_ref[:, c] is legal at rank 3
        found, shown = traced_rank(self.ctx, self.site, self.slots, slot)
        if spelled is not None and found in (None, spelled):  # a trace of another rank wins
            self.counted_ranks.setdefault(param, spelled)
            return spelled
        if found is not None:  # a hypothesis: the plan says so and waits for verification
            self.hypotheses.setdefault(param, (found, shown))
        return found

    # -- writing ------------------------------------------------------------------------------------
    def pl_alias(self) -> str:
        return pallas_alias(self.ctx)

    def dimension_semantics(self) -> tuple[Optional[cst.Call], Optional[cst.Arg], Optional[list[str]]]:
        """(compiler_params call, its dimension_semantics argument, the values) as written."""
        return dimension_semantics(self)

    def backend(self) -> Backend:
        return self.site.backend
