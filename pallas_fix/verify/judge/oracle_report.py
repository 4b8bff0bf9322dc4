"""What the jaxpr oracle reports: one :class:`DynamicAccess` per traced index, and the
:class:`OracleReport` that maps them back to source lines (the lines the linter must flag).

Plain data; nothing here imports jax.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field


@dataclass(frozen=True)
class DynamicAccess:
    """One traced (non-static) index of one ref access equation.

    ``dim`` is the position in the indexer it belongs to: the dimension of the
    ref (or of the ``.at[...]`` view, when ``transform`` > 0) being indexed.
    ``file``/``line``/``column``/``end_line`` come from the innermost user
    frame of the equation (see ``stack`` for all user frames, innermost first).
    ``index_line`` is the user line of the equation that computed the traced
    start/index (``None`` when it is a binder such as a loop index, or a
    kernel argument): for a DMA built on one line (``.at[pl.ds(i * bs, bs)]``)
    and started on another (``.start()``) it points at the slice's line.
    """

    primitive: str
    kind: str  # "slice" | "int_array" | "scalar"
    dim: int
    dynamic_start: bool
    dynamic_size: bool
    file: str | None
    line: int | None
    kernel: str | None
    call_index: int = -1
    operand: str = "ref"  # "ref" for get/swap/..., "src"/"dst" for copies
    transform: int = 0  # which NDIndexer in the ref's transform chain
    column: int | None = None
    end_line: int | None = None
    index_line: int | None = None
    start_aval: str | None = None  # e.g. "int32[]"; "int32[1]" is a GPU hazard
    stack: tuple[tuple[str, int], ...] = field(default=(), compare=False, repr=False)


def _same_file(a: str | None, b: str | None) -> bool:
    """Compare two paths robustly: realpath if both exist, else basename."""
    if a is None or b is None:
        return False
    if a == b:
        return True
    ra, rb = os.path.realpath(a), os.path.realpath(b)
    if ra == rb:
        return True
    if os.path.basename(ra) != os.path.basename(rb):
        return False
    # Same basename, different real paths: different files only if both exist.
    return not (os.path.exists(ra) and os.path.exists(rb))


@dataclass
class OracleReport:
    accesses: list[DynamicAccess]
    pallas_calls: int  # kernel equations found (pallas_call + core_map)
    kernels: list[str | None] = field(default_factory=list)  # name per call_index

    def dynamic_slices(self) -> list[DynamicAccess]:
        """Accesses with a dynamic slice start/size or an integer-array index."""
        return [a for a in self.accesses if a.kind in ("slice", "int_array")]

    def scalars(self) -> list[DynamicAccess]:
        return [a for a in self.accesses if a.kind == "scalar"]

    def lines(self, file: str | None = None, *, through_calls: bool = False) -> set[int]:
        """Source lines of ``dynamic_slices()``.

        With ``file``, only accesses whose innermost user frame is in that file
        (compared by realpath, falling back to basename when a path does not
        exist, e.g. ``<string>``).  With ``through_calls=True``, an access made
        in a helper in another file is attributed to the innermost frame that
        *is* in ``file`` (the line calling the helper).
        """
        out: set[int] = set()
        for a in self.dynamic_slices():
            if file is None:
                if a.line is not None:
                    out.add(a.line)
                continue
            if _same_file(a.file, file):
                if a.line is not None:
                    out.add(a.line)
            elif through_calls:
                for f, ln in a.stack:
                    if _same_file(f, file):
                        out.add(ln)
                        break
        return out
