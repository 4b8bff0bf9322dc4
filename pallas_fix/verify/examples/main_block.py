"""Examples from a module's ``if __name__ == "__main__":`` block: the calls its author runs.

The block is read with :mod:`ast`, statement by statement (assignments, augmented ones, loops'
first iteration, ``with`` / ``if`` / ``try`` bodies), following what each name holds: numbers
and tuples of them, module constants, PRNG keys and generators, and arrays
(:class:`~pallas_fix.verify.arrays.values.ArrayValue`) from random draws
(:mod:`~pallas_fix.verify.arrays.random_draws`), ``jnp.ones`` / ``zeros`` / ``full`` / ``empty`` and
their ``_like`` forms, ``arange``, ``eye``, ``linspace``, ``array([[...]])`` literals; then
through arithmetic with scalars and other arrays (broadcasting, jax.numpy's type promotion),
comparisons, ``@`` / ``dot``, element-wise functions (``jnp.exp``, ``maximum``, ``where``,
``clip``, ...), ``.astype``, ``.reshape``, ``.T`` / ``transpose`` / ``swapaxes``, indexing and
slicing, ``concatenate`` / ``stack``, ``broadcast_to``, ``expand_dims``, reductions and
``x.at[...].set(...)``. A module function without parameters the block calls (``main()``) is
read where it is called. Every call of an entry point in the block (also one nested in an
``assert``) whose arguments are all known becomes an example, in the order they appear; a call
with an argument it cannot follow is remembered (:class:`Unread`) so that messages can say
which. Nothing is imported or run: running the block would run whatever else the script does
(load data, benchmark, write files) just to learn shapes that these expressions give.
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional

from pallas_fix.core.example_values import Example
from pallas_fix.verify.arrays import values as av
from pallas_fix.verify.arrays.calls import KEY as _KEY
from pallas_fix.verify.arrays.calls import UNKNOWN as _UNKNOWN
from pallas_fix.verify.arrays.calls import ArrayCalls, known
from pallas_fix.verify.arrays.values import ArrayValue, is_number
from pallas_fix.verify.examples.ast_reading import tail
from pallas_fix.verify.examples.entry_points import takes_arguments
from pallas_fix.verify.examples.module_constants import module_constants

_OPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div", ast.FloorDiv: "floordiv",
        ast.Mod: "mod", ast.Pow: "pow"}


def main_blocks(tree: ast.Module) -> Iterator[ast.If]:
    for stmt in tree.body:
        if isinstance(stmt, ast.If) and _is_main_test(stmt.test):
            yield stmt


def _is_main_test(test: ast.AST) -> bool:
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = [test.left, test.comparators[0]]
    names = [s.id for s in sides if isinstance(s, ast.Name)]
    texts = [s.value for s in sides if isinstance(s, ast.Constant)]
    return names == ["__name__"] and texts == ["__main__"]


@dataclass(frozen=True)
class Unread:
    """A call of an entry point in the block that gave no example: the first argument not followed."""

    entry: str
    line: int
    argument: str  # its source text
    bound_at: Optional[int]  # the line that bound it, when it is a name

    def describe(self, path: str) -> str:
        where = f" (bound on line {self.bound_at})" if self.bound_at else ""
        return (f"the __main__ block's call of {self.entry} ({path}:{self.line}) passes `{self.argument}`{where}, "
                "which pallas-fix does not follow to a shape")


@dataclass(frozen=True)
class ModuleFacts:
    """What the block's reader needs to know of the module around it."""

    constants: dict
    numpy_names: frozenset  # names numpy is imported as: their `random` draws with `size=`
    python_random: frozenset  # names Python's own `random` is imported as: it draws no arrays
    procedures: dict  # module-level functions without parameters (a script's `main()`), by name


def module_facts(tree: ast.Module) -> ModuleFacts:
    aliases: dict[str, set[str]] = {"numpy": {"np", "numpy"}, "random": set()}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name in aliases:
                    aliases[a.name].add(a.asname or a.name)
    procedures = {s.name: s for s in tree.body if isinstance(s, ast.FunctionDef) and not takes_arguments(s)}
    return ModuleFacts(module_constants(tree), frozenset(aliases["numpy"]), frozenset(aliases["random"]), procedures)


class MainReader(ArrayCalls):
    """Walks the block's statements with what each name holds."""

    def __init__(self, module: ModuleFacts, entries: set[str], path: str):
        self.env: dict[str, Any] = dict(module.constants)
        self.bound_at: dict[str, int] = {}
        self.entries = entries
        self.path = path
        self.numpy_names = module.numpy_names
        self.python_random = module.python_random
        self.procedures = module.procedures
        self.entered: set[str] = set()  # procedures read already (each once: no recursion)
        self.found: list[Example] = []
        self.unread: list[Unread] = []

    # ------------------------------------------------------------------ statements

    def run(self, body: list[ast.stmt]) -> None:
        for stmt in body:
            self._record_calls(stmt)
            if isinstance(stmt, ast.Assign):
                value = self.value(stmt.value)
                for target in stmt.targets:
                    self._bind(target, value, stmt.value)
            elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
                self._bind(stmt.target, self.value(stmt.value), stmt.value)
            elif isinstance(stmt, ast.AugAssign):
                self._bind(stmt.target, self._binary(stmt.op, self.value(stmt.target), self.value(stmt.value)), None)
            elif isinstance(stmt, ast.For):
                self._bind(stmt.target, self._first_item(stmt.iter), None)
                self.run(stmt.body)
            elif isinstance(stmt, (ast.With, ast.If, ast.While, ast.Try)):
                self.run(stmt.body)

    def _first_item(self, node: ast.AST) -> Any:
        items = self.value(node)
        if items is _KEY:  # iterating over split keys
            return _KEY
        if isinstance(node, ast.Call) and tail(node.func) == "range" and node.args:
            bounds = [self.value(a) for a in node.args]
            return bounds[0] if len(bounds) > 1 and isinstance(bounds[0], int) else 0
        return items[0] if isinstance(items, (tuple, list)) and items else _UNKNOWN

    def _bind(self, target: ast.AST, value: Any, node: Optional[ast.AST]) -> None:
        if isinstance(target, ast.Name):
            self.env[target.id] = value
            self.bound_at[target.id] = target.lineno
        elif isinstance(target, (ast.Tuple, ast.List)):
            items = self._unpacked(value, node, len(target.elts))
            for t, v in zip(target.elts, items):
                self._bind(t, v, None)

    def _unpacked(self, value: Any, node: Optional[ast.AST], n: int) -> list:
        if isinstance(value, (tuple, list)) and len(value) == n:
            return list(value)
        if value is _KEY:
            return [_KEY] * n
        if isinstance(node, (ast.GeneratorExp, ast.ListComp)) and len(node.generators) == 1:
            gen = node.generators[0]
            saved = dict(self.env)
            self._bind(gen.target, self._first_item(gen.iter), None)
            item = self.value(node.elt)
            self.env = saved
            return [item] * n
        return [_UNKNOWN] * n

    def _record_calls(self, stmt: ast.stmt) -> None:
        nodes = [stmt] if not isinstance(stmt, (ast.For, ast.With, ast.If, ast.While, ast.Try)) else [
            getattr(stmt, "iter", None) or getattr(stmt, "test", None)]
        for root in nodes:
            if root is None:
                continue
            for node in ast.walk(root):
                if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
                    continue
                if node.func.id in self.entries:
                    ex = self._example(node)
                    if ex is not None:
                        self.found.append(ex)
                elif node.func.id in self.procedures and node.func.id not in self.entered:
                    self._enter(self.procedures[node.func.id])

    def _enter(self, fn: ast.FunctionDef) -> None:
        """``main()``: its body runs where it is called, on the module's names; what it binds
        stays its own."""
        self.entered.add(fn.name)
        saved, saved_lines = dict(self.env), dict(self.bound_at)
        self.run(fn.body)
        self.env, self.bound_at = saved, saved_lines

    def _example(self, call: ast.Call) -> Optional[Example]:
        if any(isinstance(a, ast.Starred) for a in call.args) or any(kw.arg is None for kw in call.keywords):
            return None
        args = [self._argument(a) for a in call.args]
        kwargs = {kw.arg: self._argument(kw.value) for kw in call.keywords}
        nodes = list(call.args) + [kw.value for kw in call.keywords]
        unknown = [n for n, v in zip(nodes, args + list(kwargs.values())) if v is _UNKNOWN]
        if unknown:
            name = unknown[0].id if isinstance(unknown[0], ast.Name) else None
            self.unread.append(Unread(call.func.id, call.lineno, ast.unparse(unknown[0]), self.bound_at.get(name)))
            return None
        ex = Example(entry=call.func.id, args=args, kwargs=kwargs, text="",
                     origin=f"synthesised from the __main__ block, {self.path}:{call.lineno}")
        ex.text = ex.canonical()
        return ex

    def _argument(self, node: ast.AST) -> Any:
        value = self.value(node)
        if isinstance(value, ArrayValue):
            return value.spec()
        if isinstance(value, tuple) and all(isinstance(v, ArrayValue) for v in value):
            return tuple(v.spec() for v in value)
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        return _UNKNOWN

    # ------------------------------------------------------------------ expressions

    def value(self, node: Optional[ast.AST]) -> Any:
        if node is None:
            return _UNKNOWN
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            return self.env.get(node.id, _UNKNOWN)
        if isinstance(node, (ast.Tuple, ast.List)):
            return tuple(self.value(e) for e in node.elts)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            v = self.value(node.operand)
            if isinstance(node.op, ast.UAdd):
                return v if is_number(v) or isinstance(v, ArrayValue) else _UNKNOWN
            return -v if is_number(v) else av.negate(v) if isinstance(v, ArrayValue) else _UNKNOWN
        if isinstance(node, ast.BinOp):
            return self._binary(node.op, self.value(node.left), self.value(node.right))
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            return known(av.binary("cmp", self.value(node.left), self.value(node.comparators[0])))
        if isinstance(node, ast.Attribute):
            return self._attribute(node)
        if isinstance(node, ast.Subscript):
            return self._subscript(node)
        if isinstance(node, ast.Call):
            return self._call(node)
        return _UNKNOWN

    def _binary(self, op: ast.operator, a: Any, b: Any) -> Any:
        if isinstance(op, ast.MatMult):
            both = isinstance(a, ArrayValue) and isinstance(b, ArrayValue)
            return known(av.matmul(a, b)) if both else _UNKNOWN
        if is_number(a) and is_number(b):
            return _arithmetic(op, a, b)
        return known(av.binary(_OPS[type(op)], a, b)) if type(op) in _OPS else _UNKNOWN

    def _attribute(self, node: ast.Attribute) -> Any:
        inner = self.value(node.value)
        if isinstance(inner, ArrayValue) and node.attr in ("T", "mT") and (node.attr == "T" or len(inner.shape) >= 2):
            axes = None if node.attr == "T" else [*range(len(inner.shape) - 2), -1, -2]
            return known(av.transpose(inner, axes))
        if isinstance(inner, ArrayValue) and node.attr == "shape":
            return tuple(inner.shape)
        if isinstance(inner, ArrayValue) and node.attr in ("ndim", "size"):
            return len(inner.shape) if node.attr == "ndim" else math.prod(inner.shape)
        return _UNKNOWN

    def _subscript(self, node: ast.Subscript) -> Any:
        owner = self.value(node.value)
        items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        read = [self._index_item(it) for it in items]
        if isinstance(owner, ArrayValue):
            return known(av.index(owner, read)) if all(r is not _UNKNOWN for r in read) else _UNKNOWN
        if isinstance(owner, tuple) and len(read) == 1 and isinstance(read[0], (int, slice)):
            try:
                return owner[read[0]]
            except (IndexError, TypeError):
                return _UNKNOWN
        return _UNKNOWN

    def _index_item(self, node: ast.AST) -> Any:
        if isinstance(node, ast.Slice):
            parts = [self.value(p) if p is not None else None for p in (node.lower, node.upper, node.step)]
            ok = all(p is None or (isinstance(p, int) and not isinstance(p, bool)) for p in parts)
            return slice(*parts) if ok else _UNKNOWN
        v = self.value(node)
        return v if v is None or v is Ellipsis or (isinstance(v, int) and not isinstance(v, bool)) else _UNKNOWN

    # ------------------------------------------------------------------ calls

def _arithmetic(op: ast.operator, a: Any, b: Any) -> Any:
    ops = {ast.Add: a + b, ast.Sub: a - b, ast.Mult: a * b}
    if type(op) in ops:
        return ops[type(op)]
    if isinstance(op, ast.FloorDiv) and b:
        return a // b
    if isinstance(op, ast.Div) and b:
        return a / b
    if isinstance(op, ast.Mod) and b:
        return a % b
    return _UNKNOWN


@dataclass
class MainReading:
    examples: list[Example] = field(default_factory=list)
    unread: list[Unread] = field(default_factory=list)


def read_main(tree: ast.Module, entries: set[str], *, path: str) -> MainReading:
    """The examples the ``__main__`` block's calls of ``entries`` give, in order, without repeats,
    and the calls that gave none because an argument was not followed."""
    found: dict[str, Example] = {}
    out = MainReading()
    module = module_facts(tree)
    for block in main_blocks(tree):
        reader = MainReader(module, entries, path)
        reader.run(block.body)
        for ex in reader.found:
            found.setdefault(ex.text, ex)
        out.unread += reader.unread
    out.examples = list(found.values())
    return out


def main_examples(tree: ast.Module, entries: set[str], *, path: str) -> list[Example]:
    """:func:`read_main`'s examples."""
    return read_main(tree, entries, path=path).examples
