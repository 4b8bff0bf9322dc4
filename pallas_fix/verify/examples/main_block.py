"""Examples from a module's ``if __name__ == "__main__":`` block: the calls its author runs.

The block is read with :mod:`ast`, statement by statement, following what each name holds:
arrays from ``jax.random.normal(key, (m, k), dtype=...)``, ``uniform``, ``randint`` (its bounds
become a value range), ``bernoulli``, ``jnp.ones`` / ``zeros`` / ``full`` / ``empty`` (and their
``numpy`` twins), ``jnp.arange(n)``, ``jnp.array([[...]], dtype)`` literals, then ``.astype``,
``.reshape``, ``.T``; numbers and tuples of them; PRNG keys. Every call of an entry point in the
block (also one nested in an ``assert``) whose arguments are all known becomes an example, in the
order they appear. Nothing is imported or run.
"""

from __future__ import annotations

import ast
import math
from typing import Any, Iterator, Optional

from pallas_fix.core.example_values import DTYPE_ALIASES, INT_BOUNDS, ArgSpec, Example
from pallas_fix.verify.examples.ast_reading import argument, dotted, keyword, tail
from pallas_fix.verify.examples.module_constants import module_constants

_KEY = object()  # a PRNG key: known to exist, never an argument
_UNKNOWN = object()
_CONSTRUCTORS = ("ones", "zeros", "empty", "full")
_LIKE = ("ones_like", "zeros_like", "empty_like", "full_like")
_NUMPY_RANDOM = ("randn", "rand", "standard_normal", "random")


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


def _dtype(node: Optional[ast.AST]) -> Optional[str]:
    if node is None:
        return None
    name = node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else tail(node)
    return DTYPE_ALIASES.get(name)


class _Array:
    def __init__(self, dtype: str, shape: tuple, value_range: Optional[tuple] = None):
        self.dtype, self.shape, self.value_range = dtype, shape, value_range

    def spec(self) -> ArgSpec:
        return ArgSpec(self.dtype, tuple(self.shape), self.value_range)


class MainReader:
    """Walks the block's statements with what each name holds."""

    def __init__(self, constants: dict, entries: set[str], path: str):
        self.env: dict[str, Any] = dict(constants)
        self.entries = entries
        self.path = path
        self.found: list[Example] = []

    # ------------------------------------------------------------------ statements

    def run(self, body: list[ast.stmt]) -> None:
        for stmt in body:
            self._record_calls(stmt)
            if isinstance(stmt, ast.Assign):
                value = self.value(stmt.value)
                for target in stmt.targets:
                    self._bind(target, value, stmt.value)
            elif isinstance(stmt, ast.For):
                self._bind(stmt.target, self._first_item(stmt.iter), None)
                self.run(stmt.body)
            elif isinstance(stmt, (ast.With, ast.If, ast.While)):
                self.run(stmt.body)
            elif isinstance(stmt, ast.Try):
                self.run(stmt.body)

    def _first_item(self, node: ast.AST) -> Any:
        items = self.value(node)
        if items is _KEY:  # iterating over split keys
            return _KEY
        return items[0] if isinstance(items, (tuple, list)) and items else _UNKNOWN

    def _bind(self, target: ast.AST, value: Any, node: Optional[ast.AST]) -> None:
        if isinstance(target, ast.Name):
            self.env[target.id] = value
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
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in self.entries:
                    ex = self._example(node)
                    if ex is not None:
                        self.found.append(ex)

    def _example(self, call: ast.Call) -> Optional[Example]:
        if any(isinstance(a, ast.Starred) for a in call.args) or any(kw.arg is None for kw in call.keywords):
            return None
        args = [self._argument(a) for a in call.args]
        kwargs = {kw.arg: self._argument(kw.value) for kw in call.keywords}
        if any(v is _UNKNOWN for v in args + list(kwargs.values())):
            return None
        ex = Example(entry=call.func.id, args=args, kwargs=kwargs, text="",
                     origin=f"synthesised from the __main__ block, {self.path}:{call.lineno}")
        ex.text = ex.canonical()
        return ex

    def _argument(self, node: ast.AST) -> Any:
        value = self.value(node)
        if isinstance(value, _Array):
            return value.spec()
        if isinstance(value, tuple) and all(isinstance(v, _Array) for v in value):
            return tuple(v.spec() for v in value)
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        return _UNKNOWN

    # ------------------------------------------------------------------ expressions

    def value(self, node: ast.AST) -> Any:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            return self.env.get(node.id, _UNKNOWN)
        if isinstance(node, (ast.Tuple, ast.List)):
            return tuple(self.value(e) for e in node.elts)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            v = self.value(node.operand)
            return -v if _is_number(v) else _UNKNOWN
        if isinstance(node, ast.BinOp):
            return _arithmetic(node.op, self.value(node.left), self.value(node.right))
        if isinstance(node, ast.Attribute):
            inner = self.value(node.value)
            if isinstance(inner, _Array) and node.attr == "T":
                return _Array(inner.dtype, tuple(reversed(inner.shape)))
            if isinstance(inner, _Array) and node.attr == "shape":
                return tuple(inner.shape)
            return _UNKNOWN
        if isinstance(node, ast.Call):
            return self._call(node)
        return _UNKNOWN

    def _shape(self, node: Optional[ast.AST]) -> Optional[tuple]:
        v = self.value(node) if node is not None else ()
        if isinstance(v, int) and not isinstance(v, bool):
            v = (v,)
        if isinstance(v, tuple) and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in v):
            return v
        return None

    def _call(self, node: ast.Call) -> Any:
        name = tail(node.func)
        if isinstance(node.func, ast.Attribute):
            method = self._method(node, self.value(node.func.value))
            if method is not _UNKNOWN:
                return method
        if name in ("PRNGKey", "key", "split", "fold_in"):
            return _KEY
        if "random" in dotted(node.func):
            return self._random(node, name)
        if name in _CONSTRUCTORS:
            shape = self._shape(argument(node, 0, "shape"))
            dt = _dtype(argument(node, 2 if name == "full" else 1, "dtype")) or "f32"
            return _Array(dt, shape) if shape is not None else _UNKNOWN
        if name in _LIKE and node.args:
            like = self.value(node.args[0])
            return _Array(_dtype(keyword(node, "dtype")) or like.dtype, like.shape) if isinstance(like, _Array) else _UNKNOWN
        if name == "arange":
            return self._arange(node)
        if name in ("array", "asarray") and node.args:
            return self._literal_array(node)
        return _UNKNOWN

    def _method(self, node: ast.Call, owner: Any) -> Any:
        attr = node.func.attr
        if owner is _UNKNOWN and _is_at_update(node.func.value):  # x.at[i].set(v): x's shape
            owner = self.value(node.func.value.value.value)
        if not isinstance(owner, _Array):
            return _UNKNOWN
        if _is_at_update(node.func.value):
            return owner
        if attr == "astype" and node.args:
            dt = _dtype(node.args[0])
            return _Array(dt, owner.shape, owner.value_range if dt in INT_BOUNDS else None) if dt else _UNKNOWN
        if attr == "reshape" and node.args:
            new = self.value(node.args[0]) if len(node.args) == 1 else tuple(self.value(a) for a in node.args)
            reshaped = _reshape(owner.shape, new)
            return _Array(owner.dtype, reshaped, owner.value_range) if reshaped is not None else _UNKNOWN
        return _UNKNOWN

    def _random(self, node: ast.Call, name: str) -> Any:
        if name in ("normal", "truncated_normal") and node.args and self.value(node.args[0]) is _KEY:
            shape = self._shape(argument(node, 1, "shape"))
            return _Array(_dtype(argument(node, 2, "dtype")) or "f32", shape) if shape is not None else _UNKNOWN
        if name == "uniform" and node.args and self.value(node.args[0]) is _KEY:
            shape = self._shape(argument(node, 1, "shape"))
            low, high = (self.value(argument(node, k, n) or ast.Constant(d)) for k, n, d in ((3, "minval", 0.0), (4, "maxval", 1.0)))
            bounds = (float(low), float(high)) if _is_number(low) and _is_number(high) and low < high else None
            return _Array(_dtype(argument(node, 2, "dtype")) or "f32", shape, bounds) if shape is not None else _UNKNOWN
        if name == "randint" and node.args and self.value(node.args[0]) is _KEY:
            shape = self._shape(argument(node, 1, "shape"))
            low, high = self.value(argument(node, 2, "minval")), self.value(argument(node, 3, "maxval"))
            dt = _dtype(argument(node, 4, "dtype")) or "i32"
            ok = isinstance(low, int) and isinstance(high, int) and low < high and dt in INT_BOUNDS
            return _Array(dt, shape, (low, high) if ok else None) if shape is not None else _UNKNOWN
        if name == "bernoulli" and node.args and self.value(node.args[0]) is _KEY:
            shape = self._shape(argument(node, 2, "shape"))
            return _Array("bool", shape) if shape is not None else _UNKNOWN
        if name in _NUMPY_RANDOM:
            shape = self._shape(ast.Tuple(elts=node.args)) if name in ("randn", "rand") else self._shape(argument(node, 0, "size"))
            return _Array("f32", shape) if shape is not None else _UNKNOWN
        return _UNKNOWN

    def _arange(self, node: ast.Call) -> Any:
        bounds = [self.value(a) for a in node.args]
        if not bounds or not all(isinstance(b, int) and not isinstance(b, bool) for b in bounds):
            return _UNKNOWN
        start, stop, step = (0, bounds[0], 1) if len(bounds) == 1 else (bounds + [1])[:3]
        length = max(0, -(-(stop - start) // step)) if step else 0
        dt = _dtype(keyword(node, "dtype")) or "i32"
        in_range = (min(start, stop), max(start, stop)) if dt in INT_BOUNDS and length else None
        return _Array(dt, (length,), in_range)

    def _literal_array(self, node: ast.Call) -> Any:
        data = self.value(node.args[0])
        shape = _nested_shape(data)
        if shape is None:
            return _UNKNOWN
        leaves = list(_flat(data))
        dt = _dtype(argument(node, 1, "dtype"))
        if dt is None:
            dt = "bool" if all(isinstance(x, bool) for x in leaves) else "i32" if all(isinstance(x, int) for x in leaves) else "f32"
        # the literal's spread, when it has one: [5, 0, 7, 5] indexes blocks 0..7
        ints = dt in INT_BOUNDS and len(set(leaves)) > 1 and all(isinstance(x, int) for x in leaves)
        return _Array(dt, shape, (min(leaves), max(leaves) + 1) if ints else None)


def _is_at_update(node: ast.AST) -> bool:
    """``x.at[...]``, the head of a functional update."""
    return isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "at"


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _arithmetic(op: ast.operator, a: Any, b: Any) -> Any:
    if not (_is_number(a) and _is_number(b)):
        return _UNKNOWN
    ops = {ast.Add: a + b, ast.Sub: a - b, ast.Mult: a * b}
    if type(op) in ops:
        return ops[type(op)]
    if isinstance(op, ast.FloorDiv) and b:
        return a // b
    if isinstance(op, ast.Div) and b:
        return a / b
    return _UNKNOWN


def _reshape(shape: tuple, new: Any) -> Optional[tuple]:
    if isinstance(new, int):
        new = (new,)
    if not isinstance(new, tuple) or not all(isinstance(d, int) for d in new):
        return None
    total = math.prod(shape)
    known = math.prod(d for d in new if d != -1)
    if list(new).count(-1) == 1 and known and total % known == 0:
        new = tuple(total // known if d == -1 else d for d in new)
    return new if math.prod(new) == total and all(d >= 0 for d in new) else None


def _nested_shape(data: Any) -> Optional[tuple]:
    if _is_number(data) or isinstance(data, bool):
        return ()
    if not isinstance(data, tuple) or not data:
        return None
    inner = [_nested_shape(x) for x in data]
    if any(s is None for s in inner) or len(set(inner)) != 1:
        return None
    return (len(data),) + inner[0]


def _flat(data: Any) -> Iterator[Any]:
    if isinstance(data, tuple):
        for x in data:
            yield from _flat(x)
    else:
        yield data


def main_examples(tree: ast.Module, entries: set[str], *, path: str) -> list[Example]:
    """The examples the ``__main__`` block's calls of ``entries`` give, in order, without repeats."""
    found: dict[str, Example] = {}
    for block in main_blocks(tree):
        reader = MainReader(module_constants(tree), entries, path)
        reader.run(block.body)
        for ex in reader.found:
            found.setdefault(ex.text, ex)
    return list(found.values())
