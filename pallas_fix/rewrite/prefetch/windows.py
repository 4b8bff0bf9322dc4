"""What R6 (scalar prefetch) reads off a kernel: a window whose start is a table entry in blocks.

`x_ref[pl.ds(idx_ref[i] * bs, bs), :]` reads block `idx_ref[i]` of `x_ref`. When `idx_ref` is an
operand the kernel only reads as scalars and `i` is a grid index, the table can travel as a
scalar-prefetch operand and the block index can move into `x_ref`'s index_map
(`lambda i, idx_ref: (idx_ref[i], 0)`), as JAX's paged-attention kernels pick their pages.

The entry may be read through a one-element slice (`idx_ref[pl.ds(i, 1)].reshape(())`, `[0]`;
rewrite.prefetch.spellings): the read then says so (`TableRead.spelled`) and R6 spells it as the
scalar read before the rest. `gather_of` finds that window (the same one at every access of the gathered ref) and
`check_table` that the table may become a scalar-prefetch operand. A table index that reads a
loop index (`idx_ref[k]` inside `fori_loop`) is reported as such (`Gather.loop`): the loop must
become a grid axis first. A table of row starts (`pl.ds(cu_ref[s] + t * bs, bs)`, a varlen
sequence start plus whole windows in grid indices) is a `Gather` with `rows_axes`: block
`cu_ref[s] // bs + t`, right only for entries that are multiples of `bs`
(rewrite.prefetch.index_text states that). Through a chunk map (`cu_ref[ci_ref[t, 0]] +
ci_ref[t, 1] * bs`, one program per packed chunk) the table index is itself a table entry read at
grid indices and the whole windows are counted by another (`Gather.rows_reads`): block
`cu_ref[ci_ref[t, 0]] // bs + ci_ref[t, 1]`, every table a scalar-prefetch operand (the reads
themselves: rewrite.prefetch.table_reads). Everything else is a `Refuse` saying what the user
could change.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import libcst as cst

from pallas_fix.analysis.loops.affine import Affine, Coeff, block_index, decompose, provably_not_block
from pallas_fix.analysis.context import walk
from pallas_fix.analysis.effects.model import kernel_writes, write_words
from pallas_fix.core.model import IndexUse, LoopInfo, Origin
from pallas_fix.analysis.loops.windows import hooks_for
from pallas_fix.core.plans import Refuse
from pallas_fix.rewrite.blocks.plan import BlockIndexExpr
from pallas_fix.rewrite.prefetch.guarded import check_unguarded
from pallas_fix.rewrite.prefetch.table_reads import Loads, TableRead
from pallas_fix.rewrite.kernel.ref_access import mention_kind, ref_base, shape_refusal
from pallas_fix.rewrite.text.syntax import code, paren_text


@dataclass
class Gather:
    """Every access of `ref` reads the block `mult * table[...] + offset` of `size` along `dim`."""

    ref: str
    dim: int
    size: cst.BaseExpression  # as written in the kernel
    size_env: object
    read: TableRead
    mult: int
    offset: int
    subscripts: list[cst.Subscript] = field(default_factory=list)
    # The table holds row starts, not block numbers (`pl.ds(cu_ref[s] + t * bs, bs)`, a varlen
    # sequence start): the block is `table[...] // size` plus these grid axes (position ->
    # multiplier). Right only when every entry is a multiple of the size; see `rows_condition`.
    rows_axes: Optional[dict[int, int]] = None
    # Whole windows counted by table entries, added to a row start (`cu_ref[ci_ref[t, 0]] +
    # ci_ref[t, 1] * bs`: the chunk within its sequence read from the chunk map): (read, multiplier).
    rows_reads: list[tuple[TableRead, int]] = field(default_factory=list)
    # Other dims read at one row picked by grid indices (`q_ref[i_bh, pl.ds(bos + i_t * BT, BT), :]`):
    # squeezed out of the block (None), the index_map returning the row (dim -> index).
    squeezed: dict[int, BlockIndexExpr] = field(default_factory=dict)

    def key(self) -> tuple:
        rows = tuple(sorted(self.rows_axes.items())) if self.rows_axes is not None else None
        counted = tuple((r.key(), m) for r, m in self.rows_reads)
        squeezed = tuple((d, e.key()) for d, e in sorted(self.squeezed.items()))
        return (self.dim, code(self.size), self.read.key(), self.mult, self.offset, rows, counted, squeezed)

    @property
    def table(self) -> str:
        return self.read.table

    def reads(self) -> list[TableRead]:
        """Every table read the block index makes."""
        return self.read.reads() + [r for read, _ in self.rows_reads for r in read.reads()]

    @property
    def tables(self) -> list[str]:
        """Every table the block index reads, each once, in the order the kernel meets them."""
        return list(dict.fromkeys(r.table for r in self.reads()))

    @property
    def loop(self) -> Optional[LoopInfo]:
        return self.read.loop


def _use_gather(analysis, site, use: IndexUse, ngrid: int) -> Gather:
    """The table block one data-dependent window reads."""
    ref = use.ref_name
    if use.kind == "scalar":
        raise Refuse(
            f"`{ref}` is indexed by the data-dependent scalar `{code(use.start)}`, not a `pl.ds` window; pallas-fix "
            "gathers windows only (a squeezed block dim whose index_map reads a scalar-prefetch table, "
            "`pl.BlockSpec((None, ...), lambda i, t: (t[i], ...))`, is the form to write by hand)"
        )
    if use.kind != "ds" or use.start is None or use.size is None:
        raise Refuse(f"the window on `{ref}` is not a `pl.ds(start, size)` slice with a static size")
    if use.size_provenance is not None and use.size_provenance.origin is not Origin.STATIC:
        raise Refuse(f"the window on `{ref}` has a traced size `{code(use.size)}`; a block needs a static size")
    if use.stride is not None and use.env.static_int(use.stride) not in (None, 1):
        raise Refuse(f"the window on `{ref}` has a stride; blocks are contiguous")
    loads = Loads(analysis, site, use.env, ngrid)
    start = decompose(use.start, loads.hooks)
    size_aff = decompose(use.size, loads.base)
    size = size_aff.as_coeff() if size_aff is not None else None
    bad = next((p for k, p in loads.problems.items() if start is not None and k in start.terms), None)
    if bad:
        raise Refuse(bad)
    if start is None or size is None or not size.mult:
        raise Refuse(_per_variant(use, loads) or
                     f"the start `{code(use.start)}` of `{ref}` is not a table entry times the window size")
    blk = block_index(start, size)
    if blk is None:
        rows = _row_start(start, size, ref, use, ngrid, loads.reads)
        if rows is not None:
            key, axes, offset, counted = rows
            return Gather(ref, use.dim, use.size, use.env, loads.reads[key], 1, offset, rows_axes=axes,
                          rows_reads=counted)
        stride = next((c for k, c in start.terms.items() if k.startswith("load:") and c.mult), None)
        wider = size.divide(stride) if stride is not None else None
        if wider is not None and wider > 1:
            raise Refuse(
                f"the window `{code(use.size)}` of `{ref}` is {wider} times the stride its start moves by per table "
                "entry, so the windows of neighbouring entries overlap and no block numbering covers them; store "
                f"block numbers in units of the window (start at `table[...] * {paren_text(code(use.size))}`)"
            )
        if provably_not_block(start, size) or stride is not None:
            raise Refuse(
                f"the start `{code(use.start)}` of `{ref}` is not a whole number of windows of `{code(use.size)}` "
                "(overlapping or misaligned windows); scalar prefetch gathers whole blocks, so store block numbers "
                f"in the table and start at `table[...] * {paren_text(code(use.size))}`"
            )
        raise Refuse(f"cannot prove the start `{code(use.start)}` of `{ref}` is a multiple of `{code(use.size)}`")
    loads_in = [k for k in blk.atoms if k.startswith("load:")]
    others = [k for k in blk.atoms if not k.startswith("load:")]
    if len(loads_in) != 1:
        raise Refuse(f"the start `{code(use.start)}` of `{ref}` reads {len(loads_in)} table entries; scalar prefetch picks a block by one")
    if others:
        raise Refuse(
            f"the start `{code(use.start)}` of `{ref}` also moves with `{code(blk.atom_exprs[others[0]])}`; "
            "only a table entry (times the window) can pick the block"
        )
    return Gather(ref, use.dim, use.size, use.env, loads.reads[loads_in[0]], blk.atoms[loads_in[0]], blk.offset)


def _per_variant(use: IndexUse, loads: Loads) -> Optional[str]:
    """Why a start bound once in each arm of `if FLAG:` (FLAG fixed when the kernel is built, as
    varlen kernels switch `start_t = bos + i_t * BT` against `start_t = i_t * BT`) is not gathered,
    naming the arms; None when the start is not such a name."""
    if not isinstance(use.start, cst.Name):
        return None
    env, ctx = use.env, use.env.ctx
    owner = env.owner(use.start.value)
    binds = owner.bindings().get(use.start.value, []) if owner is not None else []
    arms: list[tuple[cst.If, cst.BaseExpression]] = []
    for how, value in binds:
        test = _enclosing_if(ctx, value) if how == "assign" and isinstance(value, cst.BaseExpression) else None
        if test is None:
            return None
        arms.append((test, value))
    tests = {id(t) for t, _ in arms}
    if len(arms) < 2 or len(tests) != 1 or env.value(arms[0][0].test).dynamic:
        return None
    flag = code(arms[0][0].test)
    said = " and ".join(f"`{code(v)}`" for _, v in arms)
    return (
        f"the start `{code(use.start)}` of `{use.ref_name}` is {said}, one per arm of `if {flag}:` (line "
        f"{ctx.span(arms[0][0]).line}), a flag fixed when the kernel is built: the block differs per variant, an "
        "index_map cannot read the flag, and pallas-fix does not write specs chosen by it at the call; give each "
        "variant its own kernel and pallas_call (the wrapper choosing by the same flag), whose window pallas-fix "
        "can then gather or block on its own"
    )


def _enclosing_if(ctx, node: cst.CSTNode) -> Optional[cst.If]:
    """The `if` statement whose arm (body or else) holds `node`, the nearest one."""
    while node is not None and not isinstance(node, (cst.FunctionDef, cst.Lambda)):
        parent = ctx.parent(node)
        if isinstance(parent, cst.If) and node is not parent.test:
            return parent
        if isinstance(parent, cst.Else):
            grand = ctx.parent(parent)
            return grand if isinstance(grand, cst.If) else None
        node = parent
    return None


def _row_start(start: Affine, size, ref: str, use: IndexUse, ngrid: int,
               reads: dict[str, TableRead]) -> Optional[tuple[str, dict[int, int], int, list]]:
    """(the load, grid axes, offset, counting reads) of a start `table[...] + i * size + c * size`:
    a row start read from a table (a varlen sequence start) plus whole windows in grid indices or
    in table entries read at grid indices (the chunk within its sequence, from a chunk map); None
    where the start does not read one table entry as rows. Any other row start is a `Refuse`
    naming what to change."""
    loads = [k for k, c in start.terms.items() if k.startswith("load:") and c.mult]
    row = [k for k in loads if start.terms[k] == Coeff(1)]
    if len(row) != 1:
        return None
    loads = row
    rest = block_index(Affine({k: c for k, c in start.terms.items() if k != loads[0]}, start.const, start.atoms), size)
    if rest is None or any(m < 0 for m in rest.atoms.values()):
        raise Refuse(
            f"the start `{code(use.start)}` of `{ref}` is a row read from a table plus an offset that is not whole "
            f"windows of `{code(use.size)}` moving forward with the grid; pallas-fix gathers a row start plus "
            f"`i * {paren_text(code(use.size))}` (i a grid index) as block `table[...] // {paren_text(code(use.size))} + i`"
        )
    axes: dict[int, int] = {}
    counted: list[tuple[TableRead, int]] = []
    for key, mult in rest.atoms.items():
        if key.startswith("pid:") and int(key[4:]) < ngrid:
            axes[int(key[4:])] = mult
            continue
        if key.startswith("load:") and reads[key].loop is None:
            counted.append((reads[key], mult))
            continue
        raise Refuse(
            f"the start `{code(use.start)}` of `{ref}` is a row read from a table plus windows that move with "
            f"`{code(rest.atom_exprs[key])}`, which no grid axis provides; scalar prefetch can gather it as block "
            f"`table[...] // {paren_text(code(use.size))}` plus grid indices, so make the chunk index a grid axis "
            "(`pl.program_id`)"
        )
    return loads[0], axes, rest.offset, counted


def gather_of(analysis, site, ref: str, uses: list[IndexUse], ngrid: int) -> Gather:
    """The one table block every access of `ref` in the kernel reads (its other dims whole)."""
    ctx = analysis.ctx
    by_sub: dict[int, list[IndexUse]] = {}
    for u in uses:
        by_sub.setdefault(id(u.subscript), []).append(u)
    found: Optional[Gather] = None
    allowed: set[int] = set()
    for node in walk(site.kernel):
        if not isinstance(node, cst.Subscript):
            continue
        base = ref_base(node)
        if base is None or base.value != ref or not _is_kernel_param(analysis, site, node, ref):
            continue
        sub_uses = by_sub.get(id(node), [])
        line = ctx.span(node).line
        if len(sub_uses) != 1:
            raise Refuse(
                f"`{ref}` is also accessed without the data-dependent window (line {line}); after the rewrite "
                "the kernel sees only the gathered block"
                if not sub_uses
                else f"`{ref}` has data-dependent windows in more than one dimension (line {line})"
            )
        gather = _use_gather(analysis, site, sub_uses[0], ngrid)
        for n, el in enumerate(node.slice):
            if n == gather.dim or _whole(el):
                continue
            row = _grid_row(sub_uses[0].env, el, ngrid) if n < len(node.slice) - 2 else None
            if row is None:
                raise Refuse(
                    f"`{ref}` is indexed along dim {n} as well (`{code(el)}`, line {line}); pallas-fix gathers blocks "
                    "that span the ref's other dims, or take one row of a leading dim at grid indices (`i_bh`)"
                )
            gather.squeezed[n] = row
        entry = gather.key()
        if found is None:
            found = gather
            found_entry = entry
        elif entry != found_entry:
            raise Refuse(f"`{ref}` is read at different table blocks in one grid step (line {line})")
        found.subscripts.append(node)
        allowed.add(id(base))
    if found is None:
        raise Refuse(f"no data-dependent window on `{ref}` in the kernel")
    check_unguarded(ctx, site.kernel, ref, found.subscripts)
    _check_other_mentions(analysis, site, ref, allowed, found.dim, bool(found.squeezed))
    return found


def _grid_row(env, el: cst.SubscriptElement, ngrid: int) -> Optional[BlockIndexExpr]:
    """The row a scalar index of a leading dim reads, when it is an integer sum of grid indices
    (`i_bh`, `pl.program_id(2)`, `0`): that dim can be squeezed out of the block and the
    index_map return the row. Not for the last two dims, which TPU blocks cannot squeeze."""
    if not isinstance(el.slice, cst.Index) or env.ds_parts(el.slice.value) is not None:
        return None
    aff = decompose(el.slice.value, hooks_for(env))
    if aff is None or any(c.factors for c in aff.const):
        return None
    axes: dict[object, int] = {}
    for key, coeff in aff.terms.items():
        if not coeff.mult:
            continue
        if coeff.factors or not key.startswith("pid:") or int(key[4:]) >= ngrid:
            return None
        axes[int(key[4:])] = coeff.mult
    return BlockIndexExpr(axes, sum(c.mult for c in aff.const))


def check_not_written(analysis, site, ref: str) -> None:
    """The gathered input is only read: its block is a fresh copy in every grid step."""
    ctx = analysis.ctx
    for write in kernel_writes(analysis, site):
        if write.ref == ref:
            raise Refuse(
                f"the kernel writes the input `{ref}` through {write_words(ctx, write)} (line {ctx.span(write.entry).line}); "
                "a gathered block is a fresh copy in every grid step, so later steps would not see the write"
            )


def _is_kernel_param(analysis, site, node: cst.CSTNode, name: str) -> bool:
    """`name` at `node` is the kernel's own parameter (no nested function rebinds it)."""
    fn = analysis.ctx.enclosing_function(node)
    env = analysis.detection.envs.get(fn) or analysis.detection.envs.get(site.kernel)
    owner = env.owner(name) if env is not None else None
    return owner is not None and owner.scope is site.kernel and name in owner.params


def _whole(el: cst.SubscriptElement) -> bool:
    s = el.slice
    if isinstance(s, cst.Index):
        return isinstance(s.value, cst.Ellipsis)
    return isinstance(s, cst.Slice) and s.lower is None and s.upper is None and s.step is None


def _check_other_mentions(analysis, site, ref: str, allowed: set[int], dim: int, squeezes: bool = False) -> None:
    """Besides its windows the kernel may read only `.dtype`, `.ndim` and the other dims' sizes
    (only `.dtype` when dims are squeezed out: the block's rank and dim numbers change)."""
    ctx, env = analysis.ctx, analysis.detection.envs.get(site.kernel)
    for node in walk(site.kernel):
        if not isinstance(node, cst.Name) or node.value != ref or id(node) in allowed:
            continue
        if not _is_kernel_param(analysis, site, node, ref):
            continue
        kind, d = mention_kind(ctx, node, env)
        if squeezes and (kind == "shape" or (kind == "meta" and _reads_ndim(ctx, node))):
            raise Refuse(
                f"the kernel reads the shape of `{ref}` (line {ctx.span(node).line}), whose block squeezes out the "
                "dims it indexes by grid indices, so its rank and dim numbers change; read the sizes from the "
                "kernel's parameters or the other refs"
            )
        if kind in ("param", "meta") or (kind == "shape" and d is not None and d != dim):
            continue
        if kind == "shape":
            raise shape_refusal(ref)
        raise Refuse(f"`{ref}` is used outside its data-dependent window (line {ctx.span(node).line})")


def _reads_ndim(ctx, node: cst.Name) -> bool:
    parent = ctx.parent(node)
    return isinstance(parent, cst.Attribute) and parent.value is node and parent.attr.value == "ndim"


def check_table(analysis, site, table: str) -> None:
    """The kernel only reads `table` one scalar at a time and never writes it: scalar-prefetch
    operands live in SMEM and are read-only."""
    ctx = analysis.ctx
    env = analysis.detection.envs.get(site.kernel)
    for write in kernel_writes(analysis, site):
        if write.ref != table:
            continue
        line = ctx.span(write.entry).line
        verb = "may write" if write.opaque else "writes"
        raise Refuse(
            f"the kernel {verb} the table `{table}` through {write_words(ctx, write)} (line {line}); a scalar-prefetch "
            "table is read-only, so compute the table before the pallas_call"
        )
    for node in walk(site.kernel):
        if not isinstance(node, cst.Name) or node.value != table or not _is_kernel_param(analysis, site, node, table):
            continue
        kind, _ = mention_kind(ctx, node, env)
        if kind in ("param", "meta", "shape"):
            continue
        parent = ctx.parent(node)
        local = analysis.detection.envs.get(ctx.enclosing_function(node)) or env
        if isinstance(parent, cst.Subscript) and parent.value is node and _scalar_read(local, parent):
            continue
        raise Refuse(
            f"the kernel uses the table `{table}` other than by reading one entry at a time (`{ctx.code(parent)}`, "
            f"line {ctx.span(node).line}); scalar-prefetch operands live in SMEM and are read as scalars"
        )


def _scalar_read(env, sub: cst.Subscript) -> bool:
    for el in sub.slice:
        s = el.slice
        if not isinstance(s, cst.Index) or isinstance(s.value, cst.Ellipsis) or env.ds_parts(s.value) is not None:
            return False
        if env.value(s.value).vtype in ("array", "array1"):
            return False
    return True
