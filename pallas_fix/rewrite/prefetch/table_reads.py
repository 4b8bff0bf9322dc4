"""The table reads R6 sees in a window's start: `table[e0, e1]` with each index an integer sum of
grid indices or of one loop's index, or (one level deep) an entry of another table read so (the
varlen chunk map, `cu_seqlens_ref[chunk_indices_ref[t, 0]]`). `Loads` decomposes a start with
each distinct read as an atom (`load:<n>`) and says why a read cannot be one."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Optional

import libcst as cst

from pallas_fix.analysis.loops.affine import Affine, Coeff, decompose
from pallas_fix.analysis.loops.windows import hooks_for
from pallas_fix.core.model import LoopInfo, Origin
from pallas_fix.rewrite.blocks.plan import BlockIndexExpr
from pallas_fix.rewrite.prefetch.spellings import SpelledRead, one_element_read
from pallas_fix.rewrite.text.syntax import code


@dataclass
class TableRead:
    """`table[e0, e1, ...]`, each index an integer sum of grid axes (int) or of the loop ("loop")."""

    table: str
    # An index may itself be an entry of another table read at grid indices (`cu_ref[ci_ref[t, 0]]`,
    # the varlen chunk map): an index_map reads scalar-prefetch refs as the kernel does, so
    # it reads the same composed lookup. One level deep.
    index: list["BlockIndexExpr | TableRead"]
    loop: Optional[LoopInfo] = None
    # The entry read through a one-element slice (`t[pl.ds(i, 1)].reshape(())`, ...): spelled
    # as the scalar `t[i]` before the rest is planned (rewrite.prefetch.spellings).
    spelled: list[SpelledRead] = field(default_factory=list)

    def key(self) -> tuple:
        return (self.table, tuple(e.key() for e in self.index))

    def reads(self) -> list["TableRead"]:
        """This read and the ones its indices make, innermost first."""
        return [r for e in self.index if isinstance(e, TableRead) for r in e.reads()] + [self]




class Loads:
    """Decomposes starts with table loads as atoms: `load:<n>` names the n-th distinct load."""

    def __init__(self, analysis, site, env, ngrid: int) -> None:
        self.analysis, self.site, self.env, self.ngrid = analysis, site, env, ngrid
        self.ctx = analysis.ctx
        self.reads: dict[str, TableRead] = {}
        self.problems: dict[str, str] = {}
        base = hooks_for(env)
        self.base = base
        self.hooks = dataclasses.replace(base, atom_key=self._atom_key)

    def _atom_key(self, expr: cst.BaseExpression) -> Optional[str]:
        key = self.base.atom_key(expr)
        if key is not None:
            return key
        spelled = one_element_read(self.env, expr)
        if spelled is not None:
            read, problem = self._read(spelled.table, list(spelled.index), expr)
        elif isinstance(expr, cst.Subscript) and isinstance(expr.value, cst.Name) and self.env.value(expr.value).is_ref:
            read, problem = self._read(expr.value.value, self._scalar_index(expr), expr)
        else:
            return None
        if read is None:
            key = f"bad:{len(self.problems)}"
            self.problems[key] = problem or ""
            return key
        for k, seen in self.reads.items():
            if seen.key() == read.key():
                seen.spelled += [spelled] if spelled is not None else []
                return k
        key = f"load:{len(self.reads)}"
        read.spelled = [spelled] if spelled is not None else []
        self.reads[key] = read
        return key

    def _scalar_index(self, sub: cst.Subscript) -> Optional[list[cst.BaseExpression]]:
        """The index expressions of a scalar read `t[e0, e1]`; None when one is a slice."""
        out = []
        for el in sub.slice:
            if not isinstance(el.slice, cst.Index) or self.env.ds_parts(el.slice.value) is not None:
                return None
            out.append(el.slice.value)
        return out

    def _read(self, table: str, indices: Optional[list[cst.BaseExpression]],
              sub: cst.BaseExpression) -> tuple[Optional[TableRead], Optional[str]]:
        owner = self.env.owner(table)
        if owner is None or owner.scope is not self.site.kernel or table not in owner.params:
            return None, f"`{code(sub)}` does not read one of the kernel's own ref parameters"
        if indices is None:
            return None, f"`{code(sub)}` is not a scalar read of `{table}`"
        index: list[BlockIndexExpr] = []
        loop: Optional[LoopInfo] = None
        for value in indices:
            aff = decompose(value, self.base)
            if aff is None and self.env.value(value).origin is Origin.REF_LOAD:
                nested, problem = self._nested(value, table)
                if nested is not None:
                    index.append(nested)
                    continue
                return None, problem or (
                    f"the table index `{code(value)}` of `{table}` is itself read from data ({self.env.value(value).words}), "
                    "and pallas-fix composes a lookup only where the index is itself one table entry read at grid "
                    "indices (`cu_seqlens_ref[chunk_indices_ref[i_t, 0]]`); compose the lookups before the pallas_call "
                    "into one table with an entry per grid step and read that at a grid index"
                )
            if aff is None:
                return None, f"the table index `{code(value)}` is not a sum of grid or loop indices"
            axes: dict[object, int] = {}
            for key, coeff in aff.terms.items():
                if not coeff.mult:
                    continue
                if coeff.factors:
                    return None, f"the table index `{code(value)}` scales an index by `{' * '.join(coeff.factors)}`"
                if key.startswith("pid:") and int(key[4:]) < self.ngrid:
                    axes[int(key[4:])] = coeff.mult
                elif key.startswith("loop:"):
                    found = _loop_of(self.env, aff.atoms[key])
                    if found is None or (loop is not None and found is not loop):
                        return None, f"the table index `{code(sub)}` reads more than one loop index"
                    loop = found
                    axes["loop"] = coeff.mult
                else:
                    return None, f"the table index `{code(value)}` reads `{code(aff.atoms[key])}`, which no grid axis provides"
            offset = int_const(aff)
            if offset is None:
                return None, f"the table index `{code(value)}` has an offset pallas-fix cannot compute"
            index.append(BlockIndexExpr(axes, offset))
        return TableRead(table, index, loop), None


    def _nested(self, value: cst.BaseExpression, table: str) -> tuple[Optional[TableRead], Optional[str]]:
        """The table read a table index is (`i_n` bound to `ci_ref[t, 0]`), when that read is itself
        at grid indices; else a reason (or None for the general words)."""
        aff = decompose(value, self.hooks)
        keys = [k for k, c in aff.terms.items() if c.mult] if aff is not None else []
        if aff is None or len(keys) != 1 or not keys[0].startswith("load:") or aff.terms[keys[0]] != Coeff(1):
            return None, None
        if int_const(aff) != 0:
            return None, None
        inner = self.reads[keys[0]]
        if inner.loop is not None:
            return None, (
                f"the table index `{code(value)}` of `{table}` is read from `{inner.table}` at the index of a loop "
                "in the kernel, and an index_map reads tables at grid indices only; make that loop a grid axis "
                "(`pl.program_id`) so the composed lookup can be read in the index_map"
            )
        if any(isinstance(e, TableRead) for e in inner.index):
            return None, (
                f"the table index `{code(value)}` of `{table}` is read from `{inner.table}` at an index itself read "
                "from a table; pallas-fix composes one lookup through a table read at grid indices (as a chunk map "
                "gives `cu_seqlens_ref[chunk_indices_ref[i_t, 0]]`); compose the deeper lookups before the "
                "pallas_call into a table read at grid indices (the chunk map in the grid's order, say)"
            )
        return inner, None


def _loop_of(env, expr: cst.BaseExpression) -> Optional[LoopInfo]:
    if not isinstance(expr, cst.Name):
        return None
    owner = env.owner(expr.value)
    val = owner.params.get(expr.value) if owner is not None else None
    return val.loop if val is not None and val.origin is Origin.LOOP else None


def int_const(aff: Affine) -> Optional[int]:
    total = 0
    for c in aff.const:
        if c.factors:
            return None
        total += c.mult
    return total
