"""Turn "this ref is read in blocks of S along dim d at block index I" into edits.

Shared by the loop-lifting (R1) and program_id (R3) codemods: kernel-side, the dynamic window
becomes a whole-block access (`x_ref[pl.ds(i * bs, bs), :]` -> `x_ref[...]`, rewrite.blocks.kernel_edits);
call-side, the grid may gain an axis, the ref gets a BlockSpec (rewrite.blocks.blockspecs), and every
other index_map learns the new axis. Before any of it is written, the blocks are proved to stay
inside their arrays (rewrite.proofs.bounds), negative grid axes in the kernel are renumbered
(rewrite.blocks.axis_numbers) and the new axis gets semantics no resident output can race on
(rewrite.blocks.grid_params). `CallEdits` collects the call-side edits of one plan; the plan types and
helpers the codemods use are re-exported from here.
"""

from __future__ import annotations

from typing import Optional

import libcst as cst

from pallas_fix.analysis.context import walk
from pallas_fix.analysis.relays.passed_in import outer_call
from pallas_fix.core import names as N
from pallas_fix.rewrite.blocks.plan import BlockIndexExpr, NewAxis, RefBlock, skipped_reads
from pallas_fix.rewrite.blocks.axis_numbers import renumber_negative_axes
from pallas_fix.rewrite.blocks.blockspecs import SpecWriter
from pallas_fix.rewrite.proofs.aliases import check_aliased_blocks
from pallas_fix.rewrite.proofs.bounds import Bounds
from pallas_fix.rewrite.guards.shape_guards import guard_edit, placement, uses_asserts
from pallas_fix.rewrite.guards.rank_guards import rank_checks
from pallas_fix.rewrite.callsite.reading import CallSite, CallSiteError, Slot, Spec
from pallas_fix.rewrite.text.edits import Edit, chain
from pallas_fix.rewrite.blocks.grid_params import GridParams, new_axis_semantics, touches
from pallas_fix.rewrite.callsite.forwarded import copied_slot, set_before
from pallas_fix.rewrite.callsite.spec_params import thread_edits
from pallas_fix.rewrite.callsite.grid_shape import extended_grid
from pallas_fix.rewrite.callsite.out_leaves import mirrored_spec
from pallas_fix.rewrite.blocks.kernel_edits import dead_assignments, kernel_subscript_edit, packed_tuple, touched_element_ids
from pallas_fix.rewrite.callsite.spelling.keywords import insert_keywords
from pallas_fix.rewrite.callsite.spelling.repeated_specs import no_block_spec, repeated_items
from pallas_fix.rewrite.callsite.conditional_specs import sized_tail_specs, whole_tail_specs
from pallas_fix.rewrite.blocks.spec_slots import drop_unused_index_defs, drop_unused_spec_names, own_spec_node
from pallas_fix.rewrite.text.syntax import code, names_in, paren_text

__all__ = [
    "BlockIndexExpr", "CallEdits", "NewAxis", "RefBlock", "code", "dead_assignments", "insert_keywords",
    "kernel_subscript_edit", "packed_tuple", "paren_text", "touched_element_ids",
]


class CallEdits:
    """Collects the call-site edits for one plan."""

    def __init__(self, cs: CallSite, blocks: list[RefBlock], new_axis: Optional[NewAxis], witnesses: list[RefBlock] = (),
                 partial_ok: frozenset = frozenset(), guarding: bool = False) -> None:
        """`witnesses`: blocks of operands the plan leaves alone, read in lockstep with `blocks`
        (see Bounds.check_blocks); `partial_ok`: blocks allowed a partial last block (Bounds);
        `guarding`: blocks may be proved by checks written into the wrapper (`self.guards`)."""
        self.cs = cs
        self.blocks = {b.param: b for b in blocks}
        self.witnesses = list(witnesses)
        self.new_axis = new_axis
        self.ngrid = len(cs.grid)
        self.edits: dict[cst.CSTNode, Edit] = {}
        self.new_keywords: list[tuple[str, str]] = []  # (keyword, code) added to the call
        check_aliased_blocks(cs, self.blocks, lambda param: touches(cs, param))
        reads = skipped_reads(new_axis).union(*(b.index.read_names() for b in blocks))
        self.grid_params = GridParams.of(cs, new_axis, frozenset(reads))
        self.bounds = Bounds(cs, partial_ok, guarding)
        self.specs = SpecWriter(cs, self.grid_params, cs.pl_alias(), self.bounds)
        self.semantics = new_axis_semantics(cs, new_axis, set(self.blocks)) if new_axis is not None else None

    def spec_code(self, slot: Slot) -> Optional[str]:
        """New spec source for `slot`, or None when the existing spec can stay as it is."""
        block = self.blocks.get(slot.param)
        if block is None and self.new_axis is None:
            return None  # a spec the plan neither blocks nor extends stays as written, whatever it is
        spec = self.cs.spec_of(slot)
        if spec.absent and block is not None:
            raise CallSiteError(f"`{slot.param}` is None at this pallas_call (its operand and its spec are `None`), "
                                "so the kernel's accesses of it never run")
        if spec.absent:
            return None  # stays `None`, as its operand
        if block is not None:
            return self.specs.lifted(slot, spec, block)
        if self.new_axis is None:
            return None
        if spec.node is None:
            return self._whole(slot)
        return None  # existing specs are extended in place (see extend_index_maps)

    def _whole(self, slot: Slot) -> str:
        """The whole-array spec of `slot`, spelled as every other new whole-array spec of this
        call: `pl.BlockSpec(x.shape, lambda ...: (0, 0))`, or `pl.BlockSpec()` for all of them
        when one operand's shape or rank cannot be written at the call site."""
        plain = self.specs.plain_whole()
        others = (s for s in self.cs.slots.values() if s.kind in ("in", "out") and s.param not in self.blocks
                  and self.cs.spec_of(s).node is None)
        return plain if any(self.specs.whole(s) == plain for s in others) else self.specs.whole(slot)

    def extend_index_maps(self) -> None:
        """Existing specs that stay: their index_maps take one more (ignored) grid parameter."""
        if self.new_axis is None:
            return
        for kind in ("in", "out"):
            for slot in self.cs.slots.values():
                if slot.kind != kind or slot.param in self.blocks:
                    continue
                spec = self.cs.spec_of(slot)
                if spec.node is None or spec.index_map is None:
                    continue
                self.cs.refuse_if_shared(self.cs.site.kw(f"{kind}_specs"), f"{kind}_specs", within_call=True)
                self.cs.refuse_if_shared(self.cs.spec_list(kind)[slot.index], "BlockSpec", within_call=True)
                if isinstance(spec.index_map, cst.Lambda):
                    lam = spec.index_map
                    if lam in self.edits or _ignores_new_axis(lam, spec, self.ngrid, slot.param):
                        continue
                    self.edits[lam] = _add_lambda_param(self.ngrid, self.grid_params.fresh(spec.index_params + sorted(names_in(lam))))
                else:
                    node = spec.index_arg  # a named function (a def stays as it is)
                    grid, _rest = self.grid_params.for_spec(Spec(None, None, None))
                    old = grid[:-1]
                    call_args = ", ".join(old + (["*_prefetch"] if self.cs.num_prefetch else []))
                    params = ", ".join(grid + (["*_prefetch"] if self.cs.num_prefetch else []))
                    self.edits[node] = _replace_with(f"lambda {params}: {code(node)}({call_args})")

    # -- containers -----------------------------------------------------------------------------------
    def write_specs(self) -> None:
        for kind in ("in", "out"):
            slots = sorted((s for s in self.cs.slots.values() if s.kind == kind), key=lambda s: s.index)
            new_codes = {s.index: self.spec_code(s) for s in slots}
            if not any(c is not None for c in new_codes.values()):
                continue
            exprs = self.cs.spec_list(kind)
            container = self.cs.in_specs_expr if kind == "in" else self.cs.out_specs_expr
            single = kind == "out" and self.cs.single_output
            if container is None:
                texts = [new_codes[s.index] or self._whole(s) for s in slots]
                value = mirrored_spec(self.cs, texts[0]) if single else "[" + ", ".join(texts) + "]"
                if kind == "in" and self.cs.default_tail is not None:  # operands appended under `if`s or `*args`
                    blocked = {s.index for s in slots if s.param in self.blocks}
                    value = whole_tail_specs(self.cs, {s.index: t for s, t in zip(slots, texts)}, blocked, self.specs.plain_whole())
                self.new_keywords.append((f"{kind}_specs", value))
                continue
            items = self.cs.spec_items(kind)
            if items is None:
                # a single spec standing for the single operand (rewrite.blocks.spec_slots: a shared name keeps its value)
                c = new_codes[slots[0].index]
                self.edits[own_spec_node(self.cs, self.cs.site.kw(f"{kind}_specs"))] = _replace_with(c)
                continue
            self.cs.refuse_if_shared(self.cs.site.kw(f"{kind}_specs"), f"{kind}_specs", within_call=False)
            at = self.cs.anchor(container)
            if repeated_items(self.cs.ctx, container, at) is not None or no_block_spec(self.cs.ctx, container, at):
                # `[spec] * k`, or one `pl.no_block_spec` for all: written out, one entry per
                # operand (rewrite.callsite.spelling.repeated_specs)
                texts = [new_codes[s.index] or code(exprs[s.index]) for s in slots]
                target = self.cs.ctx.resolve_value(self.cs.site.kw(f"{kind}_specs"), at)
                # The specs mirror out_shape's pytree: one output given as a leaf takes one spec.
                single = kind == "out" and self.cs.single_output and len(texts) == 1
                self.edits[target] = _replace_with(texts[0] if single else "[" + ", ".join(texts) + "]")
                continue
            if kind == "in" and self.cs.default_tail is not None:  # `[s] * 3 + [pl.no_block_spec] * (len(ops) - 3)`: one node, many slots
                blocked = {s.index: s.param for s in slots if s.param in self.blocks}
                text = sized_tail_specs(self.cs, new_codes, blocked, self.new_axis is not None)
                self.edits[self.cs.ctx.resolve_value(container, at)] = _replace_with(text)
                continue
            for s in slots:
                c = new_codes[s.index]
                if c is None:
                    continue
                copied = copied_slot(self.cs, kind, s.index)  # an item of a list the helper's calls copy: set on this call's copy
                if copied is not None:
                    chain(self.edits, copied[0], set_before(f"{copied[1]}[{s.index}] = {c}"))
                    continue
                self.edits[own_spec_node(self.cs, exprs[s.index])] = _replace_with(c)
        drop_unused_spec_names(self.cs, self.edits)

    def write_grid(self) -> None:
        if self.new_axis is None:
            return
        trip = self.new_axis.grid_trip()
        grid_expr = self.cs.site.kw("grid")
        if grid_expr is None:
            self.new_keywords.insert(0, ("grid", f"({trip},)"))
            return
        resolved = self.cs.ctx.resolve_value(grid_expr, self.cs.anchor(grid_expr))
        scalar = len(self.cs.grid) == 1 and self.cs.grid[0] is resolved  # `grid=n // bs`
        if not isinstance(resolved, (cst.Tuple, cst.List)) and not scalar:  # built by code
            self.edits[grid_expr] = _replace_with(extended_grid(grid_expr, self.cs.grid, trip))
            return
        self.cs.refuse_if_shared(grid_expr, "grid", within_call=True)
        dims = [code(d) for d in self.cs.grid] + [trip]
        text = "(" + ", ".join(dims) + ")"
        node = resolved if isinstance(resolved, (cst.Tuple, cst.List)) else grid_expr
        self.edits[node] = _replace_with(text)

    def write_semantics(self) -> None:
        if self.new_axis is None:
            return
        call, arg, values = self.cs.dimension_semantics()
        if arg is None:
            self._declare_semantics(call)
            return
        assert values is not None
        self.cs.refuse_if_shared(self.cs.site.kw("compiler_params"), "compiler_params", within_call=True)
        self.cs.refuse_if_shared(arg.value, "dimension_semantics", within_call=True)
        if len(values) != self.ngrid:
            raise CallSiteError(f"dimension_semantics has {len(values)} entries for a {self.ngrid}-axis grid")
        new = self.semantics
        if new == "parallel" and any(v not in ("parallel",) for v in values):
            new = "arbitrary" if self.cs.backend().value == "tpu" else "sequential"
        value = self.cs.ctx.resolve_value(arg.value, self.cs.site.call)
        quote = '"'
        if isinstance(value, (cst.Tuple, cst.List)) and value.elements:  # keep the user's quoting / enum style
            first = value.elements[0].value
            if isinstance(first, cst.SimpleString):
                quote = first.quote[0] if first.quote else '"'
            elif isinstance(first, cst.Attribute):
                # enum style: pltpu.GridDimensionSemantics.PARALLEL
                base = code(first.value)
                text = _tuple_text([code(e.value) for e in value.elements] + [f"{base}.{new.upper()}"])
                self.edits[value] = _replace_with(text)
                return
        items = [f"{quote}{v}{quote}" for v in values] + [f"{quote}{new}{quote}"]
        self.edits[value] = _replace_with(_tuple_text(items))

    def _declare_semantics(self, params_call: Optional[cst.Call]) -> None:
        """No dimension_semantics written. TPU treats every axis as "arbitrary" (sequential): a new
        parallel axis that is the whole grid is declared "parallel" (a megacore chip splits it
        over its cores), while one after existing axes stays undeclared, since "parallel" axes
        must be a prefix of the grid. Mosaic GPU treats every axis as "parallel", so a sequential
        axis must be declared, keeping the existing axes parallel as they were."""
        if self.new_axis is None:
            return
        backend = self.cs.backend().value
        if self.semantics == "parallel":
            if backend == "tpu" and self.ngrid == 0 and self.cs.site.grid_spec is None:
                # Optional: compiler params pallas-fix cannot edit (a dict, a name) stay as they are.
                self._declare(params_call, '("parallel",)', N.TPU, N.TPU_PARAMS)
            return
        if backend == "mosaic_gpu":
            semantics = _tuple_text(['"parallel"'] * self.ngrid + [f'"{self.semantics}"'])
            if self._declare(params_call, semantics, N.MOSAIC_GPU) is None:
                raise CallSiteError("cannot name jax.experimental.pallas.mosaic_gpu to declare the sequential axis")

    def _declare(self, params_call: Optional[cst.Call], semantics: str, module: str,
                 only: Optional[frozenset] = None) -> Optional[bool]:
        """Write `dimension_semantics=semantics` into the call's compiler params (a new
        `<module>.CompilerParams(...)` when it has none); None when the module has no name here.
        With `only`, compiler params that are not one of those calls are left alone (False)."""
        if only is not None and (self.cs.site.kw("compiler_params") is not None) != (params_call is not None):
            return False  # a name or a dict pallas-fix cannot edit
        if params_call is not None:
            if only is not None and not self.cs.ctx.imports.is_(params_call.func, only):
                return False
            if params_call in self.edits:
                raise CallSiteError("compiler_params is edited twice")
            self.edits[params_call] = lambda n, t=semantics: insert_keywords(n, [("dimension_semantics", t)], None, explode=False)
            return True
        alias = next((k for k, v in self.cs.ctx.imports.bindings.items() if v == module), None)
        if alias is None:
            return None
        name = "TPUCompilerParams" if module == N.TPU and "TPUCompilerParams" in self.cs.ctx.source else "CompilerParams"
        self.new_keywords.append(("compiler_params", f"{alias}.{name}(dimension_semantics={semantics})"))
        return True

    def write_keywords(self) -> None:
        site = self.cs.site
        # A keyword the helper's call passes in for this kernel (KernelSite.forwarded) and does
        # not pass yet is written at that call, through the helper's (new) parameter.
        passed = [kw for kw in self.new_keywords if kw[0] in site.forwarded and kw[0] not in site.keywords]
        own = [kw for kw in self.new_keywords if kw not in passed]
        if passed:
            chain(self.edits, outer_call(site), lambda node: insert_keywords(node, passed, None))
            for node, edit in thread_edits(self.cs.ctx, site).items():
                chain(self.edits, node, edit)
        if own:
            target = site.grid_spec if site.grid_spec is not None else site.call
            anchor = "out_shape" if target is site.call else None
            chain(self.edits, target, lambda node: insert_keywords(node, own, anchor))

    def check_bounds(self) -> None:
        """Every block the new grid visits lies inside its array (rewrite.proofs.bounds)."""
        trip = self.new_axis.trip if self.new_axis is not None else None
        self.bounds.check_blocks(list(self.blocks.values()), trip, self.witnesses)

    @property
    def guards(self) -> list:
        """(guard, what the original did without it) for each check the proof needed."""
        return self.bounds.guards

    def write_guards(self) -> None:
        """The checks the bounds proof assumed, before the statement that runs the pallas_call
        (rewrite.guards.shape_guards)."""
        checks = [*(g for g, _why in self.guards), *rank_checks(self.cs)]  # ranks from the examples' trace
        anchor = placement(self.cs.ctx, self.cs.site) if checks else None
        if anchor is None:
            assert not self.guards  # Bounds guards only where there is a place
            return
        use_assert = uses_asserts(self.cs.ctx, self.cs.ctx.enclosing_function(anchor))
        chain(self.edits, anchor, guard_edit(checks, use_assert))

    def renumber_axes(self) -> None:
        """Negative grid axes in the kernel keep naming the axes they named (rewrite.blocks.axis_numbers)."""
        if self.new_axis is not None and self.cs.site.kernel is not None:
            self.edits.update(renumber_negative_axes(self.cs.ctx, self.cs.site.kernel, self.ngrid))

    def build(self) -> dict[cst.CSTNode, Edit]:
        self.write_grid()
        self.write_specs()
        self.extend_index_maps()
        drop_unused_index_defs(self.cs, self.edits)
        self.check_bounds()
        self.write_guards()
        self.renumber_axes()
        self.write_semantics()
        self.write_keywords()
        return self.edits


def _ignores_new_axis(lam: cst.Lambda, spec: Spec, ngrid: int, param: str) -> bool:
    """Can `lam` stay as written when the grid gains an axis? A lambda with a parameter per grid
    axis cannot (it gets one more). `lambda *g: (g[0], 0)`, whose `*g` takes grid indices, can
    when it reads only grid indices by position: the new last index lands past them. Anything
    else about `*g` (`len(g)`, `g[-1]`, unpacking, scalar-prefetch refs) is refused."""
    if spec.index_extra:
        raise CallSiteError(f"the index_map of `{param}` has default, keyword or `**` parameters")
    star = spec.index_star
    if star is None or len(spec.index_params) >= ngrid:
        return False
    reads = ngrid - len(spec.index_params)  # grid indices `*star` holds before the new one
    for node in walk(lam.body):
        if isinstance(node, cst.Name) and node.value == star and not _reads_position(lam, node, reads):
            raise CallSiteError(
                f"the index_map of `{param}` takes grid indices through `*{star}` and uses it as a whole; "
                "give it one parameter per grid axis"
            )
    return True


def _reads_position(lam: cst.Lambda, name: cst.Name, limit: int) -> bool:
    """`name[k]` with a literal 0 <= k < limit."""
    for node in walk(lam.body):
        if isinstance(node, cst.Subscript) and node.value is name and len(node.slice) == 1:
            index = node.slice[0].slice
            return isinstance(index, cst.Index) and isinstance(index.value, cst.Integer) and int(index.value.evaluated_value) < limit
    return False


def _tuple_text(items: list[str]) -> str:
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


def _replace_with(text: str) -> Edit:
    return lambda _node: cst.parse_expression(text)


def _add_lambda_param(position: int, name: str) -> Edit:
    def edit(node: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(node, cst.Lambda)
        params = list(node.params.params)
        new = cst.Param(cst.Name(name))
        if position < len(params):
            params.insert(position, new.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))))
        else:
            if params:
                params[-1] = params[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
            params.append(new)
        return node.with_changes(params=node.params.with_changes(params=params))

    return edit


def guarded_edits(cs: CallSite, blocks: list[RefBlock], new_axis: Optional[NewAxis], witnesses: list[RefBlock] = (),
                  *, unproved: Exception) -> tuple[dict[cst.CSTNode, Edit], Optional[str], tuple[str, ...]]:
    """The last resort when the blocks are not proved inside their arrays (`unproved`, the
    plain proof's error, raised again when this fails too): the edits with checks written into
    the wrapper that make the proof go through (rewrite.guards.shape_guards), and what the fix message
    says about them, and the checks (each the condition under which it raises, `FixPlan.guards`).
    An example call of the file that breaks a needed check is named instead, and a plan that
    fails before its bounds are checked fails for its own reason."""
    calls = CallEdits(cs, blocks, new_axis, witnesses, guarding=True)
    try:
        edits = calls.build()
    except CallSiteError as failed:
        if not calls.bounds.checked:
            raise failed from None
        refused = calls.bounds.broken_guard
        raise (type(unproved)(f"{unproved}; {refused}") if refused else unproved) from None
    # No new check where one an earlier rewrite of this call wrote proves it, as a check of the user's
    # would: the bounds proof reads it as a stated fact (rewrite.guards.shape_guards.written_before).
    note = guards_note(calls.guards) if calls.guards else None
    return edits, note, tuple(g.failing() for g, _why in calls.guards)


def guards_note(guards: list) -> str:
    """What the fix message says of the checks it adds."""
    added = "; ".join(f"`{g.statement(False).splitlines()[0]} raise ValueError(...)`" for g, _why in guards)
    whys = "; ".join(dict.fromkeys(why for _g, why in guards))
    return (f"guarded: adds {added} before the pallas_call (a fact the code leaves unsaid; the rewrite is exact "
            f"for every call that passes it, and one that does not fails at trace time); {whys}")
