"""The call-site half of R6: the table becomes a scalar-prefetch operand and the gathered ref gets a
BlockSpec whose index_map reads it.

Scalar-prefetch operands come first, both among the call's arguments and among the kernel's ref
parameters, and every index_map takes them after the grid indices. So moving a table in means:
`num_scalar_prefetch` grows by one (a `pltpu.PrefetchScalarGridSpec` replaces `pl.GridSpec`, or
the call's own grid / in_specs / out_specs / scratch_shapes move into a new one); the table's
argument and kernel parameter move to the end of the prefetch operands; its own spec leaves
in_specs; and every index_map that stays gains a parameter for it. A table that already is a
scalar-prefetch operand is read where it is. Anything that cannot be read exactly is a
`CallSiteError` (a refusal), as everywhere in rewrite.callsite.reading.
"""

from __future__ import annotations


import libcst as cst

from pallas_fix.analysis.context import walk
from pallas_fix.core import names as N
from pallas_fix.core.names import call_arg
from pallas_fix.rewrite.prefetch.call_layout import kwarg, laid_out, layout, move_param, moved, without
from pallas_fix.rewrite.callsite.reading import CallSite
from pallas_fix.rewrite.text.edits import Edit, chain
from pallas_fix.rewrite.blocks.grid_params import GridParams
from pallas_fix.rewrite.callsite.spelling.keywords import insert_keywords
from pallas_fix.rewrite.callsite.spelling.operands import CallSiteError, Slot
from pallas_fix.rewrite.prefetch.index_text import block_text
from pallas_fix.rewrite.prefetch.windows import Gather
from pallas_fix.rewrite.text.syntax import code, elements, names_in
from pallas_fix.rewrite.text.scopes import underscored

_MOVED = ("grid", "in_specs", "out_specs", "scratch_shapes")


def _tuple_text(items: list[str]) -> str:
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


class PrefetchEdits:
    """The call-site edits of one R6 plan: `gather` (its block size written at the call, `size`)."""

    def __init__(self, cs: CallSite, gather: Gather, size: cst.BaseExpression, pl: str, tpu: str) -> None:
        self.cs, self.gather, self.size, self.pl, self.tpu = cs, gather, size, pl, tpu
        self.ctx, self.site = cs.ctx, cs.site
        self.ref_slot = cs.slots[gather.ref]
        # The tables that are inputs now (a composed lookup reads two), moved in the order read.
        self.moving = [cs.slots[t] for t in gather.tables if cs.slots[t].kind == "in"]
        self.moves = bool(self.moving)
        self.edits: dict[cst.CSTNode, Edit] = {}
        prefetch = sorted((s for s in cs.slots.values() if s.kind == "prefetch"), key=lambda s: s.index)
        self.prefetch = [s.param for s in prefetch] + [s.param for s in self.moving]
        self.grid_names = [GridParams.of(cs, None).names[n] for n in range(len(cs.grid))]

    # -- the new specs ------------------------------------------------------------------------------
    def _params(self, taken: set[str] = frozenset()) -> tuple[list[str], dict[str, str]]:
        """Parameter names of a new index_map: the grid's, then one per scalar-prefetch ref (the
        name the call's other index_maps give it, else the kernel's)."""
        used = set(self.grid_names) | set(taken)
        written = self._written_prefetch_names()
        local = {}
        for n, p in enumerate(self.prefetch):
            local[p] = underscored(written.get(n, p), used)
            used.add(local[p])
        return self.grid_names + [local[p] for p in self.prefetch], local

    def _written_prefetch_names(self) -> dict[int, str]:
        ngrid, names = len(self.cs.grid), {}
        for kind in ("in", "out"):
            for expr in self.cs.spec_list(kind) or []:
                node = self.ctx.resolve_value(expr, self.site.call) if expr is not None else None
                lam = next((a.value for a in node.args if isinstance(a.value, cst.Lambda)), None) if isinstance(node, cst.Call) else None
                if lam is None:
                    continue
                for n, param in enumerate(lam.params.params[ngrid:]):
                    names.setdefault(n, param.name.value)
        return names

    def gathered_spec(self) -> str:
        slot, gather = self.ref_slot, self.gather
        spec = self.cs.spec_of(slot)
        placement = spec.carried_placement(gather.ref)  # VMEM kept as written; pl.ANY / HBM refused
        if not spec.whole:
            raise CallSiteError(f"`{gather.ref}` already has a BlockSpec that is not the whole array; pallas-fix gathers whole-array refs")
        rank = self.cs.rank(gather.ref)
        if rank is None:
            raise CallSiteError(f"cannot tell the rank of `{gather.ref}` at the pallas_call")
        params, local = self._params()
        names = {n: g for n, g in enumerate(self.grid_names)}
        sizes, index = [], []
        for e in range(rank):
            if e == gather.dim:
                sizes.append(code(self.size))
                index.append(block_text(gather, local, names, code(self.size)))
                continue
            if e in gather.squeezed:
                sizes.append("None")
                index.append(gather.squeezed[e].render(names))
                continue
            full = self.cs.shape_dim(gather.ref, e)
            if full is None:
                raise CallSiteError(f"cannot write the size of dim {e} of `{gather.ref}` at the pallas_call")
            sizes.append(code(full))
            index.append("0")
        return f"{self.pl}.BlockSpec({_tuple_text(sizes)}, lambda {', '.join(params)}: {_tuple_text(index)}{placement})"

    def _whole_spec(self, slot: Slot) -> str:
        rank = self.cs.rank(slot.param)
        arg = slot.arg if slot.kind == "in" else None
        plain = isinstance(arg, (cst.Name, cst.Attribute)) and self.cs.arg_at_call(arg)
        if rank is None or not plain:
            return f"{self.pl}.BlockSpec()"
        params, _ = self._params()
        return f"{self.pl}.BlockSpec({code(arg)}.shape, lambda {', '.join(params)}: {_tuple_text(['0'] * rank)})"

    # -- in_specs -----------------------------------------------------------------------------------
    def _inputs(self) -> list[Slot]:
        return sorted((s for s in self.cs.slots.values() if s.kind == "in"), key=lambda s: s.index)

    def _check_table_spec(self, slot: Slot) -> None:
        """The table's own spec leaves in_specs: it must have said "the whole table" (a memory
        space alone, SMEM say, is what scalar prefetch gives it anyway)."""
        exprs = self.cs.spec_list("in")
        expr = exprs[slot.index] if exprs is not None else None
        if expr is None:
            return
        node = self.ctx.resolve_value(expr, self.site.call)
        if isinstance(node, cst.Call) and self.ctx.imports.is_(node.func, N.BLOCK_SPEC):
            if node.args and all(a.keyword is not None and a.keyword.value == "memory_space" for a in node.args):
                return
        if not self.cs.spec_of(slot).whole:
            raise CallSiteError(
                f"the table `{slot.param}` has a BlockSpec that is not the whole array; scalar prefetch passes "
                "the whole table"
            )

    def write_in_specs(self) -> None:
        gathered = self.gathered_spec()
        container = self.cs.in_specs_expr
        drop = {s.index for s in self.moving}
        if container is None:
            texts = [gathered if s is self.ref_slot else self._whole_spec(s) for s in self._inputs() if s.index not in drop]
            self.new_in_specs = "[" + ", ".join(texts) + "]"
            return
        self.new_in_specs = None
        self.cs.refuse_if_shared(self.site.kw("in_specs"), "in_specs", within_call=True)
        if elements(container) is None:
            raise CallSiteError("in_specs is not a literal list of BlockSpecs")
        keep, replace = self.ref_slot.index, gathered

        def edit(node: cst.CSTNode) -> cst.CSTNode:
            old = list(node.elements)  # type: ignore[attr-defined]
            new = []
            for k, el in enumerate(old):
                if k in drop:
                    continue
                new.append(el.with_changes(value=cst.parse_expression(replace)) if k == keep else el)
            commas = [el.comma for el in old]
            commas = commas[: len(new) - 1] + commas[-1:]  # the last one closes the list
            new = [el.with_changes(comma=commas[n]) for n, el in enumerate(new)]
            if len(new) < len(old) and len(new) == 1 and isinstance(node, cst.Tuple):
                new[0] = new[0].with_changes(comma=cst.Comma())
            return node.with_changes(elements=new)

        self.edits[container] = edit

    # -- index_maps that stay -----------------------------------------------------------------------
    def extend_index_maps(self) -> None:
        """Every spec that stays takes the new prefetch ref after the ones it already takes."""
        if not self.moves:
            return
        expected = len(self.cs.grid) + len(self.prefetch) - len(self.moving)
        for kind in ("in", "out"):
            for slot in self.cs.slots.values():
                if slot.kind != kind or slot.param == self.gather.ref or slot in self.moving:
                    continue
                expr = self.cs.spec_list(kind)[slot.index]
                if expr is None:
                    continue
                node = self.ctx.resolve_value(expr, self.site.call)
                if node is not expr:
                    self.cs.refuse_if_shared(expr, "BlockSpec", within_call=False)
                spec = self.cs.spec_of(slot)
                written = call_arg(spec.node, 1, "index_map") if isinstance(spec.node, cst.Call) else None
                if written is None:
                    continue
                if isinstance(written, cst.Lambda):
                    self._extend_lambda(slot, written, expected)
                    continue
                # A named index_map (a def, or a lambda bound to a name others may share) is
                # wrapped where this spec names it.
                params, _ = self._params(names_in(written))
                kept = params[: len(params) - len(self.moving)]
                text = f"lambda {', '.join(params)}: {code(written)}({', '.join(kept)})"
                self.edits[written] = lambda _n, t=text: cst.parse_expression(t)

    def _extend_lambda(self, slot: Slot, lam: cst.Lambda, expected: int) -> None:
        ps = lam.params
        if ps.kwonly_params or ps.star_kwarg or ps.posonly_params or any(p.default is not None for p in ps.params):
            raise CallSiteError(f"the index_map of `{slot.param}` has default, keyword or `**` parameters")
        if isinstance(ps.star_arg, cst.Param):
            return  # `*rest` takes the new prefetch ref too
        if len(ps.params) != expected:
            raise CallSiteError(
                f"the index_map of `{slot.param}` takes {len(ps.params)} parameters where the grid and the "
                f"scalar-prefetch refs give {expected}"
            )
        taken = set(names_in(lam))
        added = []
        for table in self.moving:
            added.append(underscored(table.param, taken))
            taken.add(added[-1])

        def edit(node: cst.CSTNode) -> cst.CSTNode:
            params = list(node.params.params)  # type: ignore[attr-defined]
            comma = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
            for name in added:
                if params:
                    params[-1] = params[-1].with_changes(comma=comma)
                params.append(cst.Param(cst.Name(name)))
            return node.with_changes(params=node.params.with_changes(params=params))  # type: ignore[attr-defined]

        self.edits[lam] = edit

    # -- the grid spec ------------------------------------------------------------------------------
    def write_grid_spec(self) -> None:
        """num_scalar_prefetch grows by one: bumped, or a PrefetchScalarGridSpec replaces pl.GridSpec
        or takes the call's own grid keywords."""
        spec = self.site.grid_spec
        if not self.moves:
            if self.new_in_specs is not None:
                self._add_keyword(spec, "in_specs", self.new_in_specs)
            return
        if spec is not None:
            self.cs.refuse_if_shared(self.site.keywords["grid_spec"].value, "grid_spec", within_call=True)
            if any(a.keyword is None for a in spec.args):
                raise CallSiteError("the grid spec is built with positional arguments; write them as keywords")
            count = self.site.grid_spec_keywords.get("num_scalar_prefetch")
            if count is not None:
                value = count.value
                if not isinstance(value, cst.Integer):
                    raise CallSiteError("num_scalar_prefetch is not an integer literal")
                self.edits[value] = lambda _n, v=int(value.evaluated_value) + len(self.moving): cst.Integer(str(v))
            else:
                self.edits[spec] = self._to_prefetch_spec
            if self.new_in_specs is not None:
                self._add_keyword(spec, "in_specs", self.new_in_specs)
            return
        if any(a.star == "**" for a in self.site.call.args):
            raise CallSiteError("the grid and specs come through `**dict(...)`; write them as keywords of the pallas_call to move them into a grid spec")
        self.edits[self.site.call] = self._call_with_grid_spec

    def _add_keyword(self, node: cst.Call, kw: str, value: str) -> None:
        chain(self.edits, node, lambda n: insert_keywords(n, [(kw, value)], None))  # type: ignore[arg-type]

    def _to_prefetch_spec(self, node: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(node, cst.Call)
        args = list(node.args)
        sep = args[0].comma if args and isinstance(args[0].comma, cst.Comma) else cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        first = kwarg("num_scalar_prefetch", cst.Integer(str(len(self.moving))), sep)
        return node.with_changes(func=cst.parse_expression(f"{self.tpu}.PrefetchScalarGridSpec"), args=[first, *args])

    def _call_with_grid_spec(self, node: cst.CSTNode) -> cst.CSTNode:
        """`pallas_call(k, out_shape=..., grid=..., in_specs=..., ...)` ->
        `pallas_call(k, out_shape=..., grid_spec=pltpu.PrefetchScalarGridSpec(num_scalar_prefetch=1, grid=..., ...))`."""
        assert isinstance(node, cst.Call)
        args = list(node.args)
        multi, indent = layout(node)
        taken = [a for a in args if a.keyword is not None and a.keyword.value in _MOVED]
        if self.new_in_specs is not None:
            taken.append(kwarg("in_specs", cst.parse_expression(self.new_in_specs), cst.Comma()))
        taken.sort(key=lambda a: _MOVED.index(a.keyword.value))  # type: ignore[union-attr]
        inner_args = [kwarg("num_scalar_prefetch", cst.Integer(str(len(self.moving))), cst.Comma())] + taken
        inner = laid_out(cst.parse_expression(f"{self.tpu}.PrefetchScalarGridSpec()"), inner_args, multi, indent)
        spot = next((n for n, a in enumerate(args) if a in taken), None)
        kept = [a for a in args if a not in taken and not self._dropped(a)]
        if spot is None:
            spot = next((n + 1 for n, a in enumerate(kept) if a.keyword is not None and a.keyword.value == "out_shape"), len(kept))
        else:
            spot = len([a for a in args[:spot] if a in kept])
        new = kwarg("grid_spec", inner, cst.Comma())
        out = kept[:spot] + [new] + kept[spot:]
        # Each position keeps its comma (its line break); the last one closes the call.
        commas = [a.comma for a in args[:-1]]
        sep = next((c for c in commas if isinstance(c, cst.Comma)), cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        last = args[-1]
        out = [a.with_changes(comma=commas[n] if n < len(commas) else sep) for n, a in enumerate(out[:-1])] + [
            out[-1].with_changes(comma=last.comma, whitespace_after_arg=last.whitespace_after_arg)
        ]
        return node.with_changes(args=out)

    def _dropped(self, arg: cst.Arg) -> bool:
        return arg.keyword is not None and arg.keyword.value == "compiler_params" and self.drop_params

    # -- compiler_params of another backend --------------------------------------------------------
    def check_compiler_params(self) -> None:
        """With scalar prefetch the kernel is a TPU kernel: an empty Mosaic GPU / Triton
        `CompilerParams()` (kept for a --backend tpu run) goes, a non-empty one is refused."""
        self.drop_params = False
        scratch = self.site.kw("scratch_shapes")
        scratch = self.ctx.resolve_value(scratch, self.site.call) if scratch is not None else None
        for node in walk(scratch) if scratch is not None else ():
            if isinstance(node, cst.Call) and self.ctx.imports.is_(node.func, N.SMEM_GPU):
                raise CallSiteError(f"scratch_shapes holds `{code(node)}`, Mosaic GPU memory; scalar prefetch makes this a "
                                    "TPU kernel, so give its scratch pltpu memory spaces")
        params = self.site.kw("compiler_params")
        if params is None:
            return
        node = self.ctx.resolve_value(params, self.site.call)
        if not (isinstance(node, cst.Call) and self.ctx.imports.is_(node.func, N.MOSAIC_GPU_PARAMS | N.TRITON_PARAMS)):
            return
        if node.args or "compiler_params" not in self.site.keywords:
            raise CallSiteError(
                f"compiler_params is `{code(node)}`, settings for another backend; scalar prefetch makes this a TPU "
                "kernel, so write them as pltpu.CompilerParams(...)"
            )
        self.drop_params = True
        if self.site.grid_spec is not None or not self.moves:
            self.edits[self.site.call] = lambda n: n.with_changes(args=without(n.args, "compiler_params"))  # type: ignore[attr-defined]

    # -- operand order ------------------------------------------------------------------------------
    def reorder(self) -> None:
        """The tables' arguments and kernel parameters move right after the prefetch operands, in
        the order the block index reads them."""
        if not self.moves:
            return
        kernel = self.site.kernel
        assert kernel is not None
        if kernel.params.posonly_params:
            raise CallSiteError("the kernel has positional-only parameters")
        names = [p.name.value for p in kernel.params.params]
        first_in = min((names.index(s.param) for s in self.cs.slots.values() if s.kind == "in"), default=None)
        assert first_in is not None
        order = [s.param for s in self.moving]
        if names[first_in:first_in + len(order)] != order:
            def params(n: cst.CSTNode, at=first_in) -> cst.CSTNode:
                for k, table in enumerate(order):
                    n = move_param(n, table, at + k)
                return n

            self.edits[kernel.params] = params
        inv = self.site.invocation
        assert inv is not None
        inputs = sorted(s.index for s in self.cs.slots.values() if s.kind == "in")
        now = list(inputs)  # input slot indices in argument order as the moves go
        steps = []
        for k, slot in enumerate(self.moving):
            src = now.index(slot.index)
            if src != k:
                steps.append((self.cs.num_prefetch + src, self.cs.num_prefetch + k))
                now.insert(k, now.pop(src))
        if steps and self.cs.args_expanded:
            raise CallSiteError("the kernel is called with `*operands`; pass the operands by position to move the table first")
        if steps:
            def move(n: cst.CSTNode) -> cst.CSTNode:
                args = list(n.args)  # type: ignore[attr-defined]
                for src, dst in steps:
                    args = moved(args, src, dst)
                return n.with_changes(args=args)  # type: ignore[attr-defined]

            chain(self.edits, inv, move)

    def build(self) -> dict[cst.CSTNode, Edit]:
        for slot in self.moving:
            self._check_table_spec(slot)
        self.check_compiler_params()
        self.write_in_specs()
        self.extend_index_maps()
        self.write_grid_spec()
        self.reorder()
        return self.edits
