"""What a block plan says about each ref: "read in blocks of S along dim d at block index I",
and the grid axis a plan may add. The codemods build these; rewrite.blocks.edits turns them into edits."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Optional

import libcst as cst

from pallas_fix.rewrite.text.syntax import code, paren_text, variable_names


@dataclass
class BlockIndexExpr:
    """sum(mult * axis) + offset, axes named by grid position (or "new" for the added axis)."""

    axes: dict[object, int]  # grid axis position (int) or "new" -> integer multiplier
    offset: int = 0
    # A symbolic part of the offset, `+ mult * expr` per term (`x.shape[0] // bs - 1 - i`); the
    # exprs are kernel-side until `translated` writes them at the call site.
    symbolic: tuple[tuple[int, cst.BaseExpression], ...] = ()
    # `+ mult * (axis // divisor)` or `+ mult * (axis % divisor)` per term: a program id that folds
    # two indices into one (`b = pid // H; h = pid % H`), the index_map computing the same parts.
    # The divisor is kernel-side until `translated` writes it at the call site.
    folds: tuple[tuple[int, int, str, cst.BaseExpression], ...] = ()  # (mult, axis, "//" or "%", divisor)

    def grid_axes(self) -> set[int]:
        """The existing grid axes the index reads, whole or folded."""
        return {a for a in self.axes if isinstance(a, int)} | {axis for _, axis, _, _ in self.folds}

    def read_names(self) -> set[str]:
        """The variable names the symbolic terms and divisors read (call-side once `translated`):
        an index_map's parameter of the same name would hide them."""
        exprs = [e for _, e in self.symbolic] + [d for _, _, _, d in self.folds]
        return set().union(*(variable_names(e) for e in exprs))

    def render(self, names: dict[object, str]) -> str:
        if self.symbolic:
            return self._render_symbolic(names)
        parts = []
        for mult, axis, op, divisor in self.folds:
            parts.append(_term(mult, f"{names[axis]} {op} {_divisor(divisor)}"))
        for axis, mult in self.axes.items():
            name = names[axis]
            parts.append(name if mult == 1 else f"{mult} * {name}")
        if self.offset or not parts:
            parts.append(str(self.offset))
        text = " + ".join(parts)
        return text.replace("+ -", "- ")

    def _render_symbolic(self, names: dict[object, str]) -> str:
        """The offset first, as people write a reversed block (`nb - 1 - i`)."""
        parts = [_term(mult, _operand(expr)) for mult, expr in self.symbolic]
        if self.offset:
            parts.append(str(self.offset))
        parts.extend(_term(mult, names[axis]) for axis, mult in self.axes.items())
        return " + ".join(parts).replace("+ -", "- ")

    def translated(self, translate: Callable[[cst.BaseExpression], Optional[cst.BaseExpression]]) -> Optional["BlockIndexExpr"]:
        """The same index with its symbolic offset and divisors written by `translate`; None if a
        term cannot be."""
        terms, folds = [], []
        for mult, expr in self.symbolic:
            text = translate(expr)
            if text is None:
                return None
            terms.append((mult, text))
        for mult, axis, op, divisor in self.folds:
            text = translate(divisor)
            if text is None:
                return None
            folds.append((mult, axis, op, text))
        return BlockIndexExpr(dict(self.axes), self.offset, tuple(terms), tuple(folds))

    def key(self) -> tuple:
        symbolic = tuple(sorted((cst.Module([]).code_for_node(e), m) for m, e in self.symbolic))
        folds = tuple(sorted((m, a, op, cst.Module([]).code_for_node(d)) for m, a, op, d in self.folds))
        return ((tuple(sorted((str(k), v) for k, v in self.axes.items())), self.offset)
                + ((symbolic,) if symbolic else ()) + ((folds,) if folds else ()))


def _operand(expr: cst.BaseExpression) -> str:
    """`expr` as an operand of `+` / `*`: parenthesized unless it binds tighter than both."""
    text = cst.Module([]).code_for_node(expr)
    tight = isinstance(expr, (cst.Name, cst.Attribute, cst.Subscript, cst.Call, cst.Integer))
    tight = tight or (isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, (cst.FloorDivide, cst.Multiply)))
    return text if tight else f"({text})"


def _divisor(expr: cst.BaseExpression) -> str:
    """`expr` as the right operand of `//` / `%`: parenthesized unless it is a single operand."""
    bare = expr.with_changes(lpar=[], rpar=[]) if getattr(expr, "lpar", None) else expr
    text = cst.Module([]).code_for_node(bare)
    tight = isinstance(bare, (cst.Name, cst.Attribute, cst.Subscript, cst.Call, cst.Integer))
    return text if tight else f"({text})"


def _term(mult: int, text: str) -> str:
    if mult == 1:
        return text
    if " " in text:  # `-(x.shape[0] // bs)`: a bare `-x.shape[0] // bs` would floor `-x.shape[0]`
        text = f"({text})"
    return f"-{text}" if mult == -1 else f"{mult} * {text}"


@dataclass
class RefBlock:
    param: str
    dim: int
    size: cst.BaseExpression  # call-site expression of the block size
    index: BlockIndexExpr
    subscripts: list[tuple[cst.Subscript, set[int]]] = field(default_factory=list)
    # Kernel dims indexed by exactly `pl.program_id(axis)`: squeezed out of the block (None).
    squeezed: dict[int, int] = field(default_factory=dict)
    # The block dim `dim` itself is squeezed (None, size 1): a scalar index (rewrite.kernel.scalar_lift).
    squeeze: bool = False
    # An output left in HBM that the kernel writes by DMA: its new spec drops the memory space,
    # the DMAs now copy into the VMEM block (rewrite.inblock.dma_outputs).
    to_vmem: bool = False
    # A strip-mined lift (NewAxis.windows): the spec moves this many of the loop's windows of
    # `size` per step, a name the wrapper binds; `size` stays one window, for the proofs.
    windows: Optional[str] = None
    # A reversed strip's block index as the spec writes it (`n // windows - 1 - k`,
    # reduction.strip.reversed_index); the bounds proofs read `index`, one window's, and a strip
    # is inside the array where each of its windows is.
    strip_index: Optional[BlockIndexExpr] = None

    def written_size(self) -> str:
        """The block size the spec writes: one window, or `windows` of them."""
        return code(self.size) if self.windows is None else f"{self.windows} * {paren_text(code(self.size))}"


@dataclass
class NewAxis:
    trip: cst.BaseExpression  # call-site trip count
    name: str  # preferred index_map parameter name
    semantics: str  # "parallel" | "arbitrary" | "sequential"
    # Where the kernel skips the steps from a bound on (causal attention's `pl.when(k < upper)`):
    # the block index of those steps, as text over NEW_INDEX and the grid placeholders
    # (rewrite.text.translate.grid_placeholder), which the index_map's writer names.
    skipped_index: Optional[str] = None
    # A loop walking sub-tiles of a block the grid already moves is a deliberate strip-mine
    # (compute tiles smaller than the blocks copied): kept unless asked (--lift-for-memory).
    undo_strip_mines: bool = False
    # A strip-mined lift (rewrite.reduction.strip): each step walks `windows.name` of the loop's
    # windows, a count the wrapper binds before the call; `trip` stays the loop's trip count
    # (the bounds proofs read it), the grid gets `trip // windows.name`.
    windows: Optional["Windows"] = None

    def grid_trip(self) -> str:
        """The new grid axis's size as written: the trip count, or its strip-mined blocks."""
        trip = code(self.trip)
        return trip if self.windows is None else f"{paren_text(trip)} // {self.windows.name}"


@dataclass(frozen=True)
class Windows:
    """How a strip-mined lift's wrapper counts the windows per step: `name = helper(trip,
    (window shape, dtype), ...)` over the strip-mined operands (rewrite.blocks.edits)."""

    name: str
    helper: str
    # False where the module already defines the helper, word for word (a second strip-mined
    # call in the file): the lift calls that one rather than adding a copy.
    added: bool = True


NEW_INDEX = "__new__"  # the new axis's index in NewAxis.skipped_index


def skipped_reads(new_axis: Optional["NewAxis"]) -> set[str]:
    """The wrapper's names NewAxis.skipped_index reads (its grid placeholders and NEW_INDEX aside):
    like a block index's, they must not be hidden by an index_map parameter."""
    if new_axis is None or new_axis.skipped_index is None:
        return set()
    names = variable_names(cst.parse_expression(new_axis.skipped_index))
    return {n for n in names if n != NEW_INDEX and not re.fullmatch(r"__grid\d+__", n)}


def name_grid_indices(text: str, grid: list[str]) -> str:
    """`text` with NEW_INDEX and each grid placeholder replaced by the index_map's parameter."""
    text = re.sub(r"\b__grid(\d+)__\b", lambda m: grid[int(m.group(1))], text)
    return re.sub(rf"\b{NEW_INDEX}\b", grid[-1], text)
