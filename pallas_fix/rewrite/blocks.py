"""What a block plan says about each ref: "read in blocks of S along dim d at block index I",
and the grid axis a plan may add. The codemods build these; rewrite.blockplan turns them into edits."""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst


@dataclass
class BlockIndexExpr:
    """sum(mult * axis) + offset, axes named by grid position (or "new" for the added axis)."""

    axes: dict[object, int]  # grid axis position (int) or "new" -> integer multiplier
    offset: int = 0

    def render(self, names: dict[object, str]) -> str:
        parts = []
        for axis, mult in self.axes.items():
            name = names[axis]
            parts.append(name if mult == 1 else f"{mult} * {name}")
        if self.offset or not parts:
            parts.append(str(self.offset))
        text = " + ".join(parts)
        return text.replace("+ -", "- ")

    def key(self) -> tuple:
        return (tuple(sorted((str(k), v) for k, v in self.axes.items())), self.offset)


@dataclass
class RefBlock:
    param: str
    dim: int
    size: cst.BaseExpression  # call-site expression of the block size
    index: BlockIndexExpr
    subscripts: list[tuple[cst.Subscript, set[int]]] = field(default_factory=list)
    # Kernel dims indexed by exactly `pl.program_id(axis)`: squeezed out of the block (None).
    squeezed: dict[int, int] = field(default_factory=dict)
    # The block dim `dim` itself is squeezed (None, size 1): a scalar index (rewrite.scalar_lift).
    squeeze: bool = False


@dataclass
class NewAxis:
    trip: cst.BaseExpression  # call-site trip count
    name: str  # preferred index_map parameter name
    semantics: str  # "parallel" | "arbitrary" | "sequential"
