"""Prove that the blocks a plan writes at a pallas_call stay inside their arrays.

The original kernel slices a whole ref with `pl.ds(i * bs, bs)`; a window past the end is clamped
(the interpreter moves it back inside), while a BlockSpec block past the end is a partial block:
padded on read, masked on write. So a rewrite is the same program only when every block the new
grid visits lies inside the array, and when a block nests in an existing block it must divide it.
`Bounds` proves those from the code (analysis.loops.proofs) or raises `CallSiteError` saying what the
user could add: a trip count `n // bs`, or `assert n % bs == 0` before the pallas_call.
"""

from __future__ import annotations

from typing import Optional

import libcst as cst

from pallas_fix.analysis.loops.proofs import Facts, Prover, read_facts, statements_before
from pallas_fix.analysis.loops.symbolic import Poly, Symbols
from pallas_fix.rewrite.blocks.plan import BlockIndexExpr, RefBlock
from pallas_fix.rewrite.callsite.reading import CallSite
from pallas_fix.rewrite.proofs.every_step import Reader, read_every_step
from pallas_fix.rewrite.proofs.masked_outputs import equal_count
from pallas_fix.rewrite.proofs.example_facts import broken_checks, evaluate, example_values
from pallas_fix.rewrite.proofs.necessity import rejects_a_good_call
from pallas_fix.rewrite.proofs.row_masks import row_guarded_access
from pallas_fix.rewrite.proofs.spec_blocks import index_map_entry, lockstep_key, spec_lockstep
from pallas_fix.rewrite.guards.shape_guards import (Guard, as_guard, breaks_example, candidates, masked_access, optional_operands,
                                              placement, traced_names, written_before)
from pallas_fix.rewrite.callsite.spelling.operands import CallSiteError
from pallas_fix.rewrite.text.syntax import code, parenthesized
from pallas_fix.rewrite.proofs.unproved import unproved_blocks
from pallas_fix.rewrite.text.translate import Translator

_ONE = Poly.const(1)


class Bounds:
    def __init__(self, cs: CallSite, partial_ok: frozenset = frozenset(), guarding: bool = False) -> None:
        """`partial_ok`: (param, dim) whose last block may be partial along a `pl.cdiv` grid axis
        (an unsafe fix that says so, rewrite.proofs.ragged_blocks). `guarding`: a block the code
        does not prove inside its array may be proved by a shape fact written into the wrapper as
        a check (rewrite.guards.shape_guards); the facts chosen are `self.guards`."""
        self.cs = cs
        self.partial_ok = partial_ok
        self.guarding = guarding
        self.guards: list[tuple[Guard, str]] = []  # (guard, what the original did without it)
        self.broken_guard: Optional[str] = None  # why the guard a proof needed was refused
        self.too_strong = False  # the last choice of guards found one that would reject a good call
        # Blocks taken to share the extent of a lockstep witness whose own last block may be partial
        # along a `pl.cdiv` axis (check_blocks): param -> (the witness, the array extent the grid
        # counts); their lift carries that witness's ragged doubt (rewrite.proofs.ragged_blocks), so
        # it is no proof where checks are sought (`guarding`: that doubt was refused).
        self.ragged_lockstep: dict[str, tuple[RefBlock, cst.BaseExpression]] = {}
        self.checked = False  # check_blocks ran: a plan that failed before it failed for another reason
        self.symbols = Symbols(cs.ctx)
        self.symbols.ranks = self._rank_of
        self.broken: list[str] = []  # wrapper checks an example call breaks (rewrite.proofs.example_facts)
        facts = Facts()
        self._read_call_facts(facts)
        self._read_kernel_facts(facts)
        self.prover = Prover(self.symbols, facts)

    def _rank_of(self, key: str) -> Optional[int]:
        """The rank of the operand the array key names, as the call site states it: not as the
        kernel's subscripts count it, since `x.shape[-1]` is `x.shape[1]` at rank 2 only."""
        for param, slot in self.cs.slots.items():
            if slot.kind == "in" and isinstance(slot.arg, cst.Name) and self.symbols.array_key(slot.arg, slot.arg) == key:
                return self.cs.rank(param, counted=False)
        return None

    def _read_call_facts(self, facts: Facts) -> None:
        """Checks that run before the pallas_call: earlier statements of every enclosing scope."""
        ctx, call = self.cs.ctx, self.cs.anchor()  # the pallas_call, or the helper's call passing its specs
        for before in statements_before(ctx, call):
            broken = broken_checks(self.symbols, before, call)
            self.broken.extend(broken.values())
            read_facts(self.symbols, [s for s in before if id(s) not in broken], call, facts)

    def _read_kernel_facts(self, facts: Facts) -> None:
        """The kernel's own top-level checks run when it is traced, before any block is read."""
        kernel, env = self.cs.site.kernel, self.cs.env
        if kernel is None or env is None:
            return
        translator = Translator(self.cs.ctx, self.cs.site, self.cs.kernel_shape_dim, self.cs.kernel_rank)
        stmts = self.cs.ctx.body_statements(kernel)
        read_facts(self.symbols, stmts, self.cs.anchor(), facts, lambda e: _translated(translator, e, env))

    def poly(self, expr: cst.BaseExpression) -> Poly:
        """A call-site expression (as written there, or translated to mean the same there)."""
        return self.symbols.poly(expr, self.cs.anchor())

    # -- the checks -------------------------------------------------------------------------------
    def check_blocks(self, blocks: list[RefBlock], trip: Optional[cst.BaseExpression], witnesses: list[RefBlock] = ()) -> None:
        """Every block is proved inside its array, with one assumption: an input the kernel sees
        whole along the dim, read in lockstep with a proved operand (the same window and block
        index, read in every step: not under `pl.when`), has that operand's extent. The kernel treats them as one length;
        were the input shorter, the original would read past its end whatever the grid (only the
        HLO interpreter clamps). Operands the plan leaves alone vouch too: `witnesses` (windows
        the kernel reads in lockstep) and existing BlockSpecs whose blocks are proved inside."""
        self.checked = True
        # Witnesses proved but for a partial last block along a `pl.cdiv` axis: key -> (block, extent).
        ragged: dict[tuple, tuple[RefBlock, cst.BaseExpression]] = {}
        proven: set[tuple] = spec_lockstep(self.cs, self.symbols, {b.param for b in blocks}, ragged, self._fits, self.cdiv_axis)
        failed: list[tuple[RefBlock, CallSiteError]] = []
        for block in [*blocks, *witnesses]:
            try:
                self.check_block(block, trip)
                proven.add(lockstep_key(block))
            except CallSiteError as err:
                failed.append((block, err))
                extent = self.cs.kernel_shape_dim(block.param, block.dim)
                if any(block is w for w in witnesses) and self.cdiv_axis(block, extent, trip) is not None:
                    ragged.setdefault(lockstep_key(block), (block, extent))
        for block, err in failed:
            if any(block is b for b in blocks) and not (lockstep_key(block) in proven and self._shares_extent(block)):
                if not self.guarding and lockstep_key(block) in ragged and self._shares_extent(block):
                    self.ragged_lockstep[block.param] = ragged[lockstep_key(block)]
                    continue
                if not self.guarding:
                    raise err
                self._guard_block(block, trip, err)

    def _guard_block(self, block: RefBlock, trip: Optional[cst.BaseExpression], err: CallSiteError) -> None:
        """Prove `block` inside its array with a guard (rewrite.guards.shape_guards), or raise `err`
        (with the guard an example breaks named): along its dim, then along each dim a grid axis
        indexes by itself (a squeezed dim: the axis must not outrun the dim)."""
        try:
            self.check_block(block, trip)  # a guard chosen for another block may prove it
            return
        except CallSiteError:
            pass
        size_expr = self.cs.kernel_shape_dim(block.param, block.dim)
        if size_expr is None or placement(self.cs.ctx, self.cs.site) is None or (block.index.folds and not self._fold_row(block)):
            raise err  # a window at a folded program id (`pid // H * bs`): its count is no fact a plain check states
        # A mask over a window's dims never covers a squeezed row: past its end the original reads
        # another array's memory on hardware, so a check rejects no call it handles, unless a mask or
        # `pl.when` tests the program id (`b < nb`) and so may skip the rows past the end.
        # A row a loop index picks is judged as a window: any mask may test that index.
        pid_row = block.squeeze and "new" not in block.index.axes
        masked = (row_guarded_access(self.cs.ctx, self.cs.site.kernel, _row_axes(block)) if pid_row
                  else masked_access(self.cs.ctx, self.cs.site.kernel))
        if masked is not None and not pid_row and equal_count(self, block, trip, size_expr):
            return  # an output stored under a mask at the count (rewrite.proofs.masked_outputs)
        if masked is not None:
            what = ("tests the program id in a mask or `pl.when` (line {}), so the original may skip a row past the "
                    "end" if pid_row else "masks its loads or stores (line {}), so on hardware the original "
                    "handles a last window past the end").format(masked)
            self.broken_guard = (f"pallas-fix adds no check here: the kernel {what}, and a check would reject "
                                 "calls it handles; if every caller passes whole blocks, state that check yourself")
            raise CallSiteError(f"{err}; {self.broken_guard}") from None
        side = "read of" if self.cs.slots[block.param].kind == "in" else "write to"
        if not self._fits(block.index, block.size, size_expr, trip):
            extents = [self.poly(self.extent(a, trip)) for a in block.index.axes]
            texts = (code(size_expr), code(block.size))
            exact = self._exact_bound(block, size_expr, trip)
            combos = candidates(self.symbols, self.prover.substitute, self.poly(size_expr), self.poly(block.size), extents, texts, exact)
            bound = list(self._fit_polys(block.index, block.size, size_expr, trip))
            why = (f"without it the original's last {side} `{block.param}` runs past the end of its dim {block.dim} "
                   "(clamped in interpret mode, out of bounds on hardware) where a BlockSpec block is partial")
            try:
                self.choose(combos, bound, why, err, lambda prover: self._fits(block.index, block.size, size_expr, trip, prover))
            except CallSiteError:
                if self.broken_guard is None and not self.too_strong:
                    counts = " * ".join(f"`{code(e)}`" for e in map(lambda a: self.extent(a, trip), block.index.axes))
                    self.broken_guard = (f"pallas-fix adds no check here, and a check on `{code(size_expr)}` alone would not do: "
                                         f"it cannot follow the count {counts} back to `{code(size_expr)}`; compute the count "
                                         f"from `{code(size_expr)}` where the pallas_call is written")
                raise
        for dim, axis in block.squeezed.items():
            full, extent = self.cs.kernel_shape_dim(block.param, dim), self.extent(axis, trip)
            if full is None or self.prover.nonneg(self.poly(full) - self.poly(extent)):
                continue
            room = self.poly(full) - self.poly(extent)
            fact = ("at_least", self.poly(full), self.poly(extent), code(full), code(extent))
            why = (f"without it the original's {side} `{block.param}` at a grid index past the end of its dim {dim} "
                   "is clamped in interpret mode and out of bounds on hardware, where a BlockSpec block is out of range")
            try:
                self._check_squeezed(block.param, dim, extent)
            except CallSiteError as squeezed:
                try:
                    self.choose([(fact,)], [room], why, squeezed, lambda prover, room=room: prover.nonneg(room))
                except CallSiteError:
                    if self.broken_guard is None and str(squeezed) not in str(err):  # what else stands in the way
                        self.broken_guard = f"nor can a check pallas-fix writes prove dim {dim}: {squeezed}"
                    raise
        self.check_block(block, trip)

    def choose(self, combos: list, bound: list[Poly], why: str, err: CallSiteError, proves) -> None:
        """Adopt the first combination of facts that `proves` the bound (a predicate of a Prover)
        and can be written as guards no good call and no example of the file breaks; raise `err`
        otherwise, naming the guard an example broke."""
        broken = []
        self.too_strong = False
        at = self.cs.anchor()
        traced = traced_names(self.cs.ctx, self.cs.ctx.enclosing_function(at))
        places = [at] if at is not self.cs.site.call else [at, *([self.cs.site.invocation] if self.cs.site.invocation is not None else [])]
        optional = optional_operands(self.cs)  # `b.shape` raises where the caller passes b=None
        for combo in combos:
            guards = [as_guard(self.symbols, fact, places, traced) for fact in combo]
            if any(g is None or g.reads(optional) for g in guards):
                continue
            facts = self.prover.facts
            for g in guards:
                facts = g.add_to(facts)
            if not proves(Prover(self.symbols, facts)):
                continue
            if rejects_a_good_call(self.symbols, self.prover.facts, bound, guards) is not None:
                self.too_strong = True
                continue  # too strong: it would reject a call whose windows all fit (rewrite.proofs.necessity)
            how = [b for b in (breaks_example(self.symbols, g, example_values(self.cs.ctx, self.cs.anchor()), evaluate) for g in guards) if b]
            if how:
                broken.extend(how)
                continue
            self.prover = Prover(self.symbols, facts)
            written = written_before(self.cs.ctx, placement(self.cs.ctx, self.cs.site))
            fresh = [g for g in guards if g.failing() not in written and f"not {g.fact()}" not in written]
            self.guards.extend((g, why) for g in fresh if all(g != h for h, _w in self.guards))
            return
        if broken:
            self.broken_guard = (f"pallas-fix does not add that check itself: {broken[0]}, which the original runs "
                                 "(a check must not reject a call the original handles)")
            raise CallSiteError(f"{err}; {self.broken_guard}") from None
        raise err

    def _shares_extent(self, block: RefBlock) -> bool:
        """`block` may take a lockstep operand's extent: an input seen whole along the dim whose
        window every step reads (rewrite.proofs.every_step: under a `pl.when` it may be shorter)."""
        kernel = self.cs.site.kernel
        slot = self.cs.slots.get(block.param)
        reader = Reader(block.param, slot.arg if slot is not None else None, dict(self.cs.site.partial_kwargs))
        return (self._whole_input_dim(block) and kernel is not None
                and all(read_every_step(self.cs.ctx, kernel, self.cs.env, sub, reader=reader) for sub, _dims in block.subscripts))

    def _whole_input_dim(self, block: RefBlock) -> bool:
        """The kernel's view of the input spans the array's whole dim (no block cuts it down)."""
        slot = self.cs.slots.get(block.param)
        seen = self.cs.kernel_shape_dim(block.param, block.dim)
        if slot is not None and slot.kind == "in" and seen is None:  # not spelled at the call (`jnp.ravel(g)`)
            try:
                return self.cs.spec_of(slot).whole  # a whole ref: the kernel's dim is the array's
            except CallSiteError:
                return False
        if slot is None or slot.kind != "in" or seen is None:
            return False
        rank = self.cs.rank(block.param)  # unknown: the kernel's dim is the array's own, if any
        dims = [self.cs.shape_dim(block.param, e) for e in (range(rank) if rank is not None else [block.dim])]
        return any(d is not None and self.poly(d) == self.poly(seen) for d in dims)

    def _fold_row(self, block: RefBlock) -> Optional[tuple]:
        """The one fold of a squeezed row at a folded program id (`k_ref[pid // H]`, `[pid % H]`)."""
        index = block.index
        if not block.squeeze or index.offset or index.symbolic or index.axes or len(index.folds) != 1:
            return None
        return index.folds[0] if index.folds[0][0] == 1 else None

    def _exact_bound(self, block: RefBlock, size_expr: cst.BaseExpression, trip) -> Optional[tuple]:
        """`full >= count * size` as a candidate guard, for blocks `i * size` over one axis, and
        `full >= count` for a row at a folded program id (count: the values `pid // H` takes)."""
        fold = self._fold_row(block)
        if fold is not None:
            count = self._fold_count(fold[1], fold[2], fold[3], trip)
            return ("at_least", self.poly(size_expr), count, code(size_expr), self.symbols.text(count))
        index = block.index
        if index.offset or index.symbolic or index.folds or len(index.axes) != 1 or list(index.axes.values()) != [1]:
            return None
        (axis,) = index.axes
        extent = self.extent(axis, trip)
        count = self.poly(extent) * self.poly(block.size)
        spelled = _paren(extent) if self.poly(block.size) == _ONE else f"{_paren(extent)} * {_paren(block.size)}"
        return ("at_least", self.poly(size_expr), count, code(size_expr), spelled)

    def _fits(self, index: BlockIndexExpr, size: cst.BaseExpression, full: cst.BaseExpression, trip,
              prover: Optional[Prover] = None) -> bool:
        """Blocks of `size` at `index`, over every grid step, lie within [0, full)."""
        prover = prover or self.prover
        low, room = self._fit_polys(index, size, full, trip)
        return prover.nonneg(low) and prover.nonneg(room)

    def _fit_polys(self, index: BlockIndexExpr, size: cst.BaseExpression, full: cst.BaseExpression, trip) -> tuple[Poly, Poly]:
        """(first block's start, room left after the last block): both >= 0 when every block fits."""
        low = high = Poly.const(index.offset)
        for mult, expr in index.symbolic:  # call-site exprs (BlockIndexExpr.translated)
            low = high = high + self.poly(expr).scale(mult)
        for axis, mult in index.axes.items():
            span = (self.poly(self.extent(axis, trip)) - _ONE).scale(mult)
            if mult > 0:
                high = high + span
            else:
                low = low + span
        for mult, axis, op, divisor in index.folds:  # call-site divisors, proved positive by the planner
            span = (self._fold_count(axis, op, divisor, trip) - _ONE).scale(mult)
            if mult > 0:
                high = high + span
            else:
                low = low + span
        return low, self.poly(full) - self.poly(size) * (high + _ONE)

    def _fold_count(self, axis: object, op: str, divisor: cst.BaseExpression, trip) -> Poly:
        """How many values `g // n` (`g % n`) takes as grid index g runs over its axis' extent G:
        `pl.cdiv(G, n)` (0 .. ceil(G / n) - 1), or n (0 .. n - 1) for a remainder."""
        if op == "%":
            return self.poly(divisor)
        extent = self.extent(axis, trip)
        text = f"pl.cdiv({code(extent)}, {code(divisor)})"
        return self.symbols.quotient("ceil", self.poly(extent), self.poly(divisor), text)

    def check_block(self, block: RefBlock, trip: Optional[cst.BaseExpression]) -> None:
        """Every block of `block.param` the grid visits lies inside the kernel's view of the ref."""
        size_expr = self.cs.kernel_shape_dim(block.param, block.dim)
        if size_expr is None:
            raise CallSiteError(
                f"cannot tell the size of dim {block.dim} of `{block.param}` at the pallas_call, "
                "so its blocks cannot be proved to stay inside the array; pass the array by a name the "
                "wrapper binds, or write the output's shape where the pallas_call is built "
                "(`jax.ShapeDtypeStruct((m, n), x.dtype)` with `m, n = x.shape`)"
            )
        partial = (block.param, block.dim) in self.partial_ok and self.cdiv_axis(block, size_expr, trip) is not None
        if not partial and not self._fits(block.index, block.size, size_expr, trip):
            broken = "".join(f"; the check {b}, so it proves nothing there" for b in self.broken)
            axes = [*block.index.axes, *sorted({a for _, a, _, _ in block.index.folds})]
            below = not self.prover.nonneg(self._fit_polys(block.index, block.size, size_expr, trip)[0])
            raise CallSiteError(unproved_blocks(block, size_expr, [self.extent(a, trip) for a in axes], below) + broken)
        for dim, axis in block.squeezed.items():
            self._check_squeezed(block.param, dim, self.extent(axis, trip))

    def cdiv_axis(self, block: RefBlock, extent: Optional[cst.BaseExpression],
                  trip: Optional[cst.BaseExpression] = None) -> Optional[int | str]:
        """The grid axis (an existing one, or "new" with `trip` steps) whose steps are
        `pl.cdiv(extent, size)` blocks `i * size` of the dim: every block starts inside the array
        and only the last may be partial."""
        index = block.index
        if (extent is None or block.squeeze or index.offset != 0 or index.symbolic or index.folds or len(index.axes) != 1
                or block.squeezed.get(block.dim) is not None):
            return None  # a scalar index has no partial block: it is in bounds or not
        (axis, mult), = index.axes.items()
        if mult != 1 or (axis == "new" and trip is None) or (axis != "new" and not (isinstance(axis, int) and axis < len(self.cs.grid))):
            return None
        steps = self.prover.substitute(self.poly(self.extent(axis, trip)))
        text = f"pl.cdiv({code(extent)}, {code(block.size)})"
        cover = self.prover.substitute(self.symbols.quotient("ceil", self.poly(extent), self.poly(block.size), text))
        return axis if steps == cover else None

    def _check_squeezed(self, param: str, dim: int, extent: cst.BaseExpression) -> None:
        """A dim indexed by `pl.program_id(k)` itself: the axis must not outrun the dim."""
        size = self.cs.kernel_shape_dim(param, dim)
        if size is None or not self.prover.nonneg(self.poly(size) - self.poly(extent)):
            raise CallSiteError(
                f"cannot prove grid extent `{code(extent)}` stays inside dim {dim} of `{param}`"
                f"{f' (`{code(size)}`)' if size is not None else ''}, which it indexes"
            )

    def extent(self, axis: object, trip: Optional[cst.BaseExpression]) -> cst.BaseExpression:
        if axis == "new":
            assert trip is not None
            return trip
        assert isinstance(axis, int)
        return self.cs.grid[axis]

    def require_divides(self, size: cst.BaseExpression, outer: cst.BaseExpression, param: str, dim: int) -> None:
        """A new block nested in an existing block must tile it exactly."""
        if not self.prover.divides(self.poly(size), self.poly(outer)):
            raise CallSiteError(
                f"the window `{code(size)}` does not provably divide the existing block `{code(outer)}` of "
                f"`{param}` along dim {dim}, so its sub-blocks cannot be numbered across blocks; "
                f"make the block a multiple of the window or assert `{code(outer)} % {code(size)} == 0`"
            )

    def check_existing_blocks(self, lam: cst.Lambda, index: cst.BaseExpression, block: cst.BaseExpression,
                              full: Optional[cst.BaseExpression], param: str, dim: int) -> None:
        """The existing blocks of `param` along `dim` (`index` of the lambda `lam`'s parameters,
        of size `block`) lie inside the array, so no partial block is split into sub-blocks."""
        grid_index = index_map_entry(self.symbols, lam, index, len(self.cs.grid))
        if grid_index is None:
            raise CallSiteError(f"the index_map of `{param}` along dim {dim} is not a sum of grid indices")
        if full is None or not self._fits(grid_index, block, full, None):
            raise CallSiteError(
                f"cannot prove the existing blocks `{code(block)}` of `{param}` along dim {dim} stay inside "
                f"the array{f' (`{code(full)}`)' if full is not None else ''}: a partial last block cannot be split"
                + (f"; count the grid in whole blocks or assert `{code(full)} % {code(block)} == 0` before the pallas_call"
                   if full is not None else "; write the array's shape where the pallas_call is built")
            )


def _row_axes(block: RefBlock) -> frozenset:
    """The grid axes a squeezed row moves along (its own, and those its folds divide)."""
    return frozenset(a for a in (*block.index.axes, *(f[1] for f in block.index.folds)) if isinstance(a, int))


def _paren(expr: cst.BaseExpression) -> str:
    return code(parenthesized(expr))


def _translated(translator: Translator, expr: cst.BaseExpression, env) -> Optional[cst.BaseExpression]:
    """A kernel check's expression at the call site; None (no fact) where it means something else
    there (a size rebound before the call runs, rewrite.call_timing): a fact is never required."""
    try:
        return translator(expr, env)
    except CallSiteError:
        return None
