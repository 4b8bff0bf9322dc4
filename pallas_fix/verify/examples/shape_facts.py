"""What one function's code says about the arrays it handles: ranks, divisibility, index uses.

Example synthesis (:mod:`pallas_fix.verify.examples.synthesis`) reads a kernel's refs and an
entry point's parameters with the same rules, all on :mod:`ast`:

* ranks: ``m, k = x.shape`` states rank 2; ``x.shape[1]`` and ``x_ref[i, :]`` give lower bounds;
* divisibility the code relies on: ``x.shape[0] // bs``, ``n % bs``, ``pl.cdiv(m, bm)`` and
  dynamic windows ``x_ref[pl.ds(i * bs, bs), :]`` ask for a dim that is a multiple of ``bs``;
* integer operands: a value loaded from an array and used as a window start or an index into
  another (``page = table_ref[b, p]; kv_ref[pl.ds(page * PAGE, PAGE)]``) makes the first an index
  table whose values must stay inside the second; a loaded loop bound or ``.astype(jnp.int32)``
  mark an integer operand too;
* precision: ``x_ref[...].astype(jnp.float32)`` hints that ``x`` is stored in lower precision.

Names resolve through the function's own ``name = value`` bindings and ``env`` (module
constants, static defaults, values a ``functools.partial`` binds).
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass, field
from typing import Optional

from pallas_fix.verify.examples.ast_reading import argument, calls, dotted, simple_bindings, tail

_DS = ("ds", "dslice")
_PASS_THROUGH = ("multiple_of", "int32", "int64", "int16", "int8", "uint32", "int", "minimum", "maximum", "clip")
_ELEMENTWISE = ("clip", "abs", "asarray", "minimum", "maximum", "where", "round", "floor")
_INT_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
LOW_PRECISION = "low"  # dtype evidence: stored in bf16 / f16, computed in f32


@dataclass(frozen=True)
class DimRef:
    array: str
    dim: int  # negative counts from the end


@dataclass(frozen=True)
class IndexUse:
    """Values loaded from an array, times ``scale``, start a ``size`` window along ``dim`` of
    ``target``: they must lie in ``[0, (target.shape[dim] - size) // scale + 1)``."""

    target: str
    dim: int
    scale: int
    size: int


@dataclass
class ArrayFacts:
    exact_ranks: set = field(default_factory=set)
    min_rank: int = 0
    divisors: dict = field(default_factory=dict)  # dim -> {sizes it must be a multiple of}
    dtypes: list = field(default_factory=list)  # evidence in the order found
    integer: bool = False
    index_uses: list = field(default_factory=list)
    whole_reads: int = 0  # x_ref[...]
    window_reads: int = 0  # x_ref[pl.ds(...)], x_ref[i]
    blocked: bool = False  # a BlockSpec gives it blocks smaller than the array
    smem: bool = False  # its BlockSpec puts it in SMEM (scalars: flags, counts, tables)

    def divide(self, dim: int, size: int) -> None:
        if size > 1:
            self.divisors.setdefault(dim, set()).add(size)

    def merge(self, other: "ArrayFacts", rename: dict[str, str]) -> None:
        """Add ``other``'s facts; its index-use targets are renamed (dropped when unknown)."""
        self.exact_ranks |= other.exact_ranks
        self.min_rank = max(self.min_rank, other.min_rank)
        for dim, sizes in other.divisors.items():
            self.divisors.setdefault(dim, set()).update(sizes)
        self.dtypes += other.dtypes
        self.integer = self.integer or other.integer
        self.index_uses += [IndexUse(rename[u.target], u.dim, u.scale, u.size)
                            for u in other.index_uses if u.target in rename]
        self.whole_reads += other.whole_reads
        self.window_reads += other.window_reads
        self.blocked = self.blocked or other.blocked
        self.smem = self.smem or other.smem


@dataclass
class FunctionFacts:
    arrays: dict  # tracked name -> ArrayFacts
    block_like: set = field(default_factory=set)  # unresolved names used as block sizes

    def merge(self, other: "FunctionFacts", rename: dict[str, str]) -> None:
        for inner, outer in rename.items():
            if inner in other.arrays and outer in self.arrays:
                self.arrays[outer].merge(other.arrays[inner], rename)
        self.block_like |= other.block_like


class FunctionReader:
    """Reads one function: which expressions alias a tracked array, name a dim, are integers."""

    def __init__(self, fn: ast.AST, tracked: set[str], env: dict):
        self.fn = fn
        self.tracked = set(tracked)
        self.env = env
        self.bindings = simple_bindings(fn)
        self.unpacked: dict[str, DimRef] = {}
        self.facts = FunctionFacts({name: ArrayFacts() for name in tracked})
        self._visiting: set[str] = set()
        self._read_shape_unpacking()

    # ------------------------------------------------------------------ names

    def _bound(self, name: str, read):
        """``read`` of ``name``'s binding; None for a name being read already (``x = f(x)``)."""
        if name in self._visiting or name not in self.bindings:
            return None
        self._visiting.add(name)
        try:
            return read(self.bindings[name])
        finally:
            self._visiting.discard(name)

    def array_of(self, node: ast.AST) -> Optional[str]:
        """The tracked array ``node`` is, elementwise (a cast, a clip, an arithmetic with scalars)."""
        if isinstance(node, ast.Name):
            if node.id in self.bindings and node.id not in self._visiting:
                return self._bound(node.id, self.array_of)
            return node.id if node.id in self.tracked else None
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Attribute) and node.func.attr == "astype":
                return self.array_of(node.func.value)
            if tail(node.func) in _ELEMENTWISE and node.args:
                found = {self.array_of(a) for a in node.args} - {None}
                return found.pop() if len(found) == 1 else None
        if isinstance(node, ast.BinOp):
            found = {self.array_of(node.left), self.array_of(node.right)} - {None}
            return found.pop() if len(found) == 1 else None
        if isinstance(node, ast.UnaryOp):
            return self.array_of(node.operand)
        return None

    def int_of(self, node: ast.AST) -> Optional[int]:
        if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.Name):
            value = self.env.get(node.id)
            if isinstance(value, int) and not isinstance(value, bool):
                return value
            return self._bound(node.id, self.int_of)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            v = self.int_of(node.operand)
            return -v if v is not None else None
        if isinstance(node, ast.BinOp):
            a, b = self.int_of(node.left), self.int_of(node.right)
            if a is None or b is None:
                return None
            return _int_binop(node.op, a, b)
        if calls(node, "cdiv") and len(node.args) == 2:
            a, b = (self.int_of(x) for x in node.args)
            return -(-a // b) if a is not None and b else None
        return None

    def dim_of(self, node: ast.AST) -> Optional[DimRef]:
        if isinstance(node, ast.Name):
            if node.id in self.unpacked:
                return self.unpacked[node.id]
            return self._bound(node.id, self.dim_of)
        if (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute)
                and node.value.attr == "shape"):
            array = self.array_of(node.value.value)
            d = _constant_int(node.slice)
            if array is not None and d is not None:
                return DimRef(array, d)
        return None

    def scaled_load(self, node: ast.AST) -> Optional[tuple[str, int]]:
        """(array, scale) when ``node`` is a value loaded from a tracked array times a constant."""
        if isinstance(node, ast.Subscript):
            array = self.array_of(node.value)
            return (array, 1) if array is not None else self.scaled_load(node.value)
        if isinstance(node, ast.Name):
            return self._bound(node.id, self.scaled_load)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            for load_side, other in ((node.left, node.right), (node.right, node.left)):
                load, c = self.scaled_load(load_side), self.int_of(other)
                if load is not None and c is not None and c > 0:
                    return load[0], load[1] * c
            return None
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Attribute) and node.func.attr == "astype":
                return self.scaled_load(node.func.value)
            if tail(node.func) in _PASS_THROUGH:
                return next((load for load in map(self.scaled_load, node.args) if load is not None), None)
        return None

    def stride(self, node: ast.AST) -> Optional[int]:
        """The constant a dynamic start is a multiple of (``i * bs``, ``pl.multiple_of(s, bs)``,
        sums of such), or None when it does not say."""
        if isinstance(node, ast.Name):
            return self._bound(node.id, self.stride)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            for factor, other in ((node.right, node.left), (node.left, node.right)):
                c = self.int_of(factor)
                if c:
                    return c * (self.stride(other) or 1)
            return None
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
            parts = [self.int_of(node.left) or self.stride(node.left), self.int_of(node.right) or self.stride(node.right)]
            return math.gcd(*parts) if all(parts) else None
        if calls(node, "multiple_of") and len(node.args) == 2:
            return self.int_of(node.args[1])
        return None

    def _read_shape_unpacking(self) -> None:
        """``m, k = x.shape`` (and ``*_, n = x.shape``): names for dims, and the exact rank."""
        for node in ast.walk(self.fn):
            if not (isinstance(node, ast.Assign) and len(node.targets) == 1
                    and isinstance(node.targets[0], (ast.Tuple, ast.List))
                    and isinstance(node.value, ast.Attribute) and node.value.attr == "shape"):
                continue
            array = self.array_of(node.value.value)
            if array is None:
                continue
            targets = node.targets[0].elts
            star = next((k for k, t in enumerate(targets) if isinstance(t, ast.Starred)), None)
            if star is None:
                self.facts.arrays[array].exact_ranks.add(len(targets))
            for k, t in enumerate(targets):
                if isinstance(t, ast.Name):
                    dim = k if star is None or k < star else k - len(targets)
                    self.unpacked[t.id] = DimRef(array, dim)

    # ------------------------------------------------------------------ rules

    def read(self) -> FunctionFacts:
        for node in ast.walk(self.fn):
            if isinstance(node, ast.Subscript):
                self._subscript(node)
            elif isinstance(node, ast.BinOp) and isinstance(node.op, (ast.FloorDiv, ast.Mod)):
                self._divides(node.left, node.right)
            elif isinstance(node, ast.Call):
                self._call(node)
        return self.facts

    def _divides(self, dim_node: ast.AST, size_node: ast.AST) -> None:
        dim = self.dim_of(dim_node)
        if dim is None:
            return
        size = self.int_of(size_node)
        if size is not None:
            self.facts.arrays[dim.array].divide(dim.dim, size)
        elif isinstance(size_node, ast.Name):
            self.facts.block_like.add(size_node.id)

    def _call(self, node: ast.Call) -> None:
        if calls(node, "cdiv") and len(node.args) == 2:
            self._divides(node.args[0], node.args[1])
        elif calls(node, "fori_loop", "loop"):
            self._integer_value(argument(node, 1, "upper"))
        elif isinstance(node.func, ast.Attribute) and node.func.attr == "astype" and node.args:
            self._cast(node.func.value, dotted(node.args[0]).rsplit(".", 1)[-1])

    def _cast(self, value: ast.AST, dtype: str) -> None:
        if dtype in _INT_DTYPES:
            array = self.array_of(value)
            if array is not None:
                self.facts.arrays[array].integer = True
        elif dtype == "float32" and isinstance(value, ast.Subscript):
            array = self.array_of(value.value)
            if array is not None:
                self.facts.arrays[array].dtypes.append(LOW_PRECISION)

    def _integer_value(self, node: Optional[ast.AST]) -> None:
        load = self.scaled_load(node) if node is not None else None
        if load is not None:
            self.facts.arrays[load[0]].integer = True

    def _subscript(self, node: ast.Subscript) -> None:
        if isinstance(node.value, ast.Attribute) and node.value.attr == "shape":
            array, d = self.array_of(node.value.value), _constant_int(node.slice)
            if array is not None and d is not None:
                self._at_least(array, d + 1 if d >= 0 else -d)
            return
        base = node.value.value if isinstance(node.value, ast.Attribute) and node.value.attr == "at" else node.value
        array = self.array_of(base) if isinstance(base, ast.Name) else None
        if array is None:
            return
        items = list(node.slice.elts) if isinstance(node.slice, ast.Tuple) else [node.slice]
        ellipsis = next((k for k, e in enumerate(items) if _is_ellipsis(e)), None)
        self._at_least(array, len(items) - (ellipsis is not None))
        facts = self.facts.arrays[array]
        if all(_is_ellipsis(e) or _is_full_slice(e) for e in items):
            facts.whole_reads += 1
            return
        facts.window_reads += 1
        for k, item in enumerate(items):
            if ellipsis is not None and k > ellipsis:
                self._index(array, k - len(items), item)
            elif ellipsis is None or k < ellipsis:
                self._index(array, k, item)

    def _index(self, array: str, dim: int, item: ast.AST) -> None:
        window = self._window(item)
        if window is not None:
            start, size_node = window
            size = self.int_of(size_node) if size_node is not None else None
            if size is not None and start is not None and self.int_of(start) is None:
                self.facts.arrays[array].divide(dim, self.stride(start) or size)
            elif size is None and isinstance(size_node, ast.Name):
                self.facts.block_like.add(size_node.id)
            load = self.scaled_load(start) if start is not None else None
            if load is not None and size is not None:
                self._index_use(load, IndexUse(array, dim, load[1], size))
        elif not isinstance(item, ast.Slice):
            load = self.scaled_load(item)
            if load is not None:
                self._index_use(load, IndexUse(array, dim, load[1], 1))

    def _index_use(self, load: tuple[str, int], use: IndexUse) -> None:
        facts = self.facts.arrays[load[0]]
        facts.integer = True
        facts.index_uses.append(use)

    def _window(self, item: ast.AST) -> Optional[tuple[Optional[ast.AST], Optional[ast.AST]]]:
        """(start, size) of a ``pl.ds`` window, followed through a name it is bound to."""
        if isinstance(item, ast.Name):
            bound = self.bindings.get(item.id)
            return self._window(bound) if calls(bound, *_DS) else None
        if calls(item, *_DS):
            return argument(item, 0, "start"), argument(item, 1, "size")
        return None

    def _at_least(self, array: str, rank: int) -> None:
        facts = self.facts.arrays[array]
        facts.min_rank = max(facts.min_rank, rank)


def _constant_int(node: ast.AST) -> Optional[int]:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        v = _constant_int(node.operand)
        return -v if v is not None else None
    return None


def _is_ellipsis(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value is Ellipsis


def _is_full_slice(node: ast.AST) -> bool:
    return isinstance(node, ast.Slice) and node.lower is None and node.upper is None and node.step is None


def _int_binop(op: ast.operator, a: int, b: int) -> Optional[int]:
    if isinstance(op, ast.Add):
        return a + b
    if isinstance(op, ast.Sub):
        return a - b
    if isinstance(op, ast.Mult):
        return a * b
    if isinstance(op, ast.FloorDiv) and b:
        return a // b
    if isinstance(op, ast.Mod) and b:
        return a % b
    return None
