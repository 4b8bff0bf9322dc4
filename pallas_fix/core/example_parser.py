"""The example-call parser: text -> :class:`~pallas_fix.core.example_values.Example`.

Nothing here imports jax or executes user code.

Grammar
-------
An example call names an entry point (a module-level callable, dotted names allowed for
attributes: ``ops.matmul``) and its arguments::

    example  := entry "(" [arg ("," arg)* [","]] ")"
    entry    := NAME ("." NAME)*
    arg      := NAME "=" value | value           (positional arguments come first)
    value    := array | literal | "(" tuple ")" | "[" list "]" | NAME
    array    := DTYPE "[" [dim ("," dim)* [","]] "]" [range]   f32[256, 512]; f32[] is a scalar
    dim      := INT | NAME
    range    := "in" "[" bound "," bound ")"                     i32[8] in [0, 4)
    bound    := ["-"] (INT | FLOAT | NAME)
    literal  := INT | FLOAT | STRING | True | False | None | "-" INT | "-" FLOAT

``DTYPE`` is one of ``f32 bf16 f16 f64 i8 i16 i32 i64 u8 u16 u32 u64 bool`` (the long numpy
names ``float32``, ``bfloat16``, ``int32``, ... are accepted too and canonicalised).
A bare ``NAME`` (as a dim or a value) is resolved against the module-level constants of the file
being verified (``M, K = 256, 512`` then ``matmul(f32[M, K], f32[K, N], block_k=BK)``); an
unknown name is a syntax error pointing at it.

Array arguments (anything containing an ``f32[...]``, including tuples of them) become seeded
random inputs; every other value is a static Python argument passed as is (positionally or by
keyword).

A value range draws an array's values from the half-open interval ``[low, high)``: integers
``low <= v < high`` for an integer dtype (``i32[8] in [0, 4)``: an index table into 4 blocks;
the bounds must be integers that the dtype holds), uniform floats for a float dtype
(``f32[64] in [0.5, 2.0)``); ``bool`` takes no range. Without one, floats are N(0, 1), signed
integers lie in [-4, 4] and unsigned ones in [0, 4].
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Any, Optional, Union

from pallas_fix.core.example_values import DTYPE_ALIASES, DTYPES, INT_BOUNDS, ArgSpec, Example, ExampleSyntaxError


# --------------------------------------------------------------------------- tokenizer / parser

_TOKEN_RE = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<float>(?:\d[\d_]*\.[\d_]*|\.\d[\d_]*)(?:[eE][+-]?\d+)?|\d[\d_]*[eE][+-]?\d+)
  | (?P<int>0[xX][0-9a-fA-F_]+|0[bB][01_]+|0[oO][0-7_]+|\d[\d_]*)
  | (?P<name>[A-Za-z_][A-Za-z_0-9]*)
  | (?P<string>'(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*")
  | (?P<punct>[()\[\],=.\-+])
    """,
    re.VERBOSE,
)


@dataclass
class _Tok:
    kind: str  # int float name string punct eof
    text: str
    pos: int


@dataclass
class _Sym:
    """A bare name waiting to be resolved against module constants."""

    name: str
    pos: int


@dataclass
class _ArrayNode:
    """``f32[M, 8] in [0, N)`` as parsed: dims and bounds may still be :class:`_Sym` names."""

    dtype: str
    dims: list
    pos: int
    value_range: Optional[tuple] = None  # (low, high, position of "in")


class _Parser:
    def __init__(self, text: str, err_kwargs: dict):
        self.text = text
        self.err_kwargs = err_kwargs
        self.toks = self._tokenize(text)
        self.i = 0

    def error(self, reason: str, pos: Optional[int] = None) -> ExampleSyntaxError:
        if pos is None:
            pos = self.peek().pos
        return ExampleSyntaxError(reason, self.text, pos, **self.err_kwargs)

    def _tokenize(self, text: str) -> list[_Tok]:
        toks: list[_Tok] = []
        pos = 0
        while pos < len(text):
            m = _TOKEN_RE.match(text, pos)
            if not m:
                ch = text[pos]
                if ch in "'\"":
                    raise self.error("unterminated string", pos)
                raise self.error(f"unexpected character {ch!r}", pos)
            kind = m.lastgroup
            if kind != "ws":
                toks.append(_Tok(kind, m.group(), pos))
            pos = m.end()
        toks.append(_Tok("eof", "", len(text)))
        return toks

    def peek(self, k: int = 0) -> _Tok:
        return self.toks[min(self.i + k, len(self.toks) - 1)]

    def next(self) -> _Tok:
        t = self.toks[self.i]
        if t.kind != "eof":
            self.i += 1
        return t

    def at(self, text: str) -> bool:
        t = self.peek()
        return t.kind == "punct" and t.text == text

    def expect(self, text: str, what: str) -> _Tok:
        if not self.at(text):
            raise self.error(f"expected {what}, found {self._describe(self.peek())}")
        return self.next()

    @staticmethod
    def _describe(t: _Tok) -> str:
        return "end of input" if t.kind == "eof" else repr(t.text)

    # example := entry "(" args ")"
    def parse(self) -> tuple[str, list, dict]:
        t = self.peek()
        if t.kind != "name":
            raise self.error(
                f"expected the entry point name, found {self._describe(t)}"
                + (" (an example looks like matmul(f32[256, 512], f32[512, 256]))" if t.kind == "eof" else "")
            )
        entry = self.next().text
        while self.at("."):
            self.next()
            t = self.peek()
            if t.kind != "name":
                raise self.error(f"expected a name after '.', found {self._describe(t)}")
            entry += "." + self.next().text
        self.expect("(", "'(' after the entry point name")
        args: list = []
        kwargs: dict = {}
        while not self.at(")"):
            t = self.peek()
            if t.kind == "eof":
                raise self.error("expected ')' to close the argument list, found end of input")
            if t.kind == "name" and self.peek(1).kind == "punct" and self.peek(1).text == "=":
                name = self.next().text
                self.next()
                if name in kwargs:
                    raise self.error(f"keyword argument {name!r} given twice", t.pos)
                kwargs[name] = self.value()
            else:
                if kwargs:
                    raise self.error("positional argument after keyword arguments", t.pos)
                args.append(self.value())
            if self.at(","):
                self.next()
            elif not self.at(")"):
                raise self.error(f"expected ',' or ')', found {self._describe(self.peek())}")
        self.next()  # ')'
        if self.peek().kind != "eof":
            raise self.error(f"unexpected {self._describe(self.peek())} after the closing ')'")
        return entry, args, kwargs

    def value(self) -> Any:
        t = self.peek()
        if t.kind == "punct" and t.text in "-+":
            self.next()
            n = self.peek()
            if n.kind not in ("int", "float"):
                raise self.error(f"expected a number after {t.text!r}, found {self._describe(n)}")
            v = self.number(self.next())
            return -v if t.text == "-" else v
        if t.kind in ("int", "float"):
            return self.number(self.next())
        if t.kind == "string":
            self.next()
            return ast.literal_eval(t.text)
        if t.kind == "name":
            if t.text in ("True", "False", "None"):
                self.next()
                return {"True": True, "False": False, "None": None}[t.text]
            nxt = self.peek(1)
            followed_by_bracket = nxt.kind == "punct" and nxt.text == "["
            if t.text in DTYPE_ALIASES and followed_by_bracket:
                return self.array()
            if t.text in DTYPES:
                raise self.error(
                    f"expected '[' after dtype {t.text!r} (write {t.text}[] for a scalar)", nxt.pos
                )
            if followed_by_bracket:
                raise self.error(
                    f"unknown dtype {t.text!r}; expected one of {' '.join(DTYPES)}", t.pos
                )
            self.next()
            return _Sym(t.text, t.pos)
        if self.at("("):
            items, single = self.sequence("(", ")")
            return items[0] if single else tuple(items)
        if self.at("["):
            return self.sequence("[", "]")[0]
        raise self.error(f"expected a value, found {self._describe(t)}")

    def sequence(self, open_: str, close: str) -> tuple[list, bool]:
        """Items up to the closing bracket; the flag says "one item, no comma" (a parenthesised value)."""
        start = self.next()
        items: list = []
        saw_comma = False
        while not self.at(close):
            if self.peek().kind == "eof":
                raise self.error(f"expected {close!r} to close the {open_!r} at column {start.pos + 1}")
            items.append(self.value())
            if self.at(","):
                self.next()
                saw_comma = True
            elif not self.at(close):
                raise self.error(f"expected ',' or {close!r}, found {self._describe(self.peek())}")
        self.next()
        return items, len(items) == 1 and not saw_comma

    def number(self, t: _Tok) -> Union[int, float]:
        try:
            return int(t.text, 0) if t.kind == "int" else float(t.text)
        except ValueError:
            raise self.error(f"invalid number {t.text!r}", t.pos) from None

    def array(self) -> _ArrayNode:
        dt = self.next()
        dtype = DTYPE_ALIASES[dt.text]
        self.next()  # '['
        dims: list = []
        while not self.at("]"):
            t = self.peek()
            if t.kind == "int":
                self.next()
                dims.append(int(t.text, 0))
            elif t.kind == "punct" and t.text == "-":
                raise self.error("array dimensions must be non-negative", t.pos)
            elif t.kind == "name":
                self.next()
                dims.append(_Sym(t.text, t.pos))
            elif t.kind == "eof":
                raise self.error(f"expected ']' to close the shape of {dt.text!r}, found end of input")
            else:
                raise self.error(f"expected an integer dimension, found {self._describe(t)}")
            if self.at(","):
                self.next()
            elif not self.at("]"):
                raise self.error(
                    f"expected ',' or ']' in the shape of {dt.text!r}, found {self._describe(self.peek())}"
                )
        self.next()
        node = _ArrayNode(dtype, dims, dt.pos)
        if self.peek().kind == "name" and self.peek().text == "in":
            node.value_range = self.value_range()
        return node

    # range := "in" "[" bound "," bound ")"
    def value_range(self) -> tuple:
        where = self.next().pos
        self.expect("[", "'[' after 'in' (a value range looks like in [0, 4))")
        low = self.bound()
        self.expect(",", "',' between the bounds of the value range")
        high = self.bound()
        self.expect(")", "')' to close the value range (the upper bound is excluded: in [0, 4))")
        return low, high, where

    def bound(self) -> Any:
        t = self.peek()
        if t.kind == "name":
            self.next()
            return _Sym(t.text, t.pos)
        if t.kind in ("int", "float") or (t.kind == "punct" and t.text in "-+"):
            return self.value()
        raise self.error(f"expected a number for the value range, found {self._describe(t)}")


def _resolve(v: Any, constants: dict, err) -> Any:
    if isinstance(v, _Sym):
        if v.name not in constants:
            raise err(
                f"unknown name {v.name!r}: values must be literals or module-level constants", v.pos
            )
        return constants[v.name]
    if isinstance(v, _ArrayNode):
        shape = tuple(_resolve_dim(d, constants, err) for d in v.dims)
        return ArgSpec(v.dtype, shape, _resolve_range(v, constants, err))
    if isinstance(v, tuple):
        return tuple(_resolve(x, constants, err) for x in v)
    if isinstance(v, list):
        return [_resolve(x, constants, err) for x in v]
    return v


def _resolve_dim(d: Any, constants: dict, err) -> int:
    if not isinstance(d, _Sym):
        return d
    if d.name not in constants:
        raise err(
            f"unknown dimension name {d.name!r}: dims must be integers or module-level integer constants",
            d.pos,
        )
    d_val = constants[d.name]
    if isinstance(d_val, bool) or not isinstance(d_val, int) or d_val < 0:
        raise err(f"dimension {d.name!r} = {d_val!r} is not a non-negative integer", d.pos)
    return d_val


def _resolve_range(node: _ArrayNode, constants: dict, err) -> Optional[tuple]:
    """The array's value range with names resolved, checked against its dtype."""
    if node.value_range is None:
        return None
    low, high, pos = node.value_range
    low, high = (_resolve(b, constants, err) for b in (low, high))
    if node.dtype == "bool":
        raise err("a bool array takes no value range", pos)
    if any(isinstance(b, bool) or not isinstance(b, (int, float)) for b in (low, high)):
        raise err(f"the bounds of a value range must be numbers, not {low!r} and {high!r}", pos)
    if not low < high:
        raise err(f"the value range [{low!r}, {high!r}) is empty (the upper bound is excluded)", pos)
    if node.dtype in INT_BOUNDS:
        held_low, held_high = INT_BOUNDS[node.dtype]
        if not (isinstance(low, int) and isinstance(high, int)):
            raise err(f"{node.dtype} takes integer bounds for its value range, not [{low!r}, {high!r})", pos)
        if low < held_low or high > held_high:
            raise err(f"the value range [{low}, {high}) does not fit {node.dtype} "
                      f"(it holds [{held_low}, {held_high}))", pos)
    return low, high


def parse_example(
    text: str,
    *,
    constants: Optional[dict] = None,
    origin: Optional[str] = None,
    line_text: Optional[str] = None,
    line_offset: int = 0,
) -> Example:
    """Parse one example call. Raises :class:`ExampleSyntaxError` (with column and caret).

    ``constants`` resolves bare names (see the module docstring). ``line_text``/``line_offset``
    place the example inside a longer source line for error messages (directives).
    """
    stripped = text.strip()
    err_kwargs = dict(origin=origin, line_text=line_text if line_text is not None else stripped,
                      line_offset=line_offset)
    p = _Parser(stripped, err_kwargs)
    entry, args, kwargs = p.parse()
    constants = constants or {}
    args = [_resolve(a, constants, p.error) for a in args]
    kwargs = {k: _resolve(v, constants, p.error) for k, v in kwargs.items()}
    return Example(entry=entry, args=args, kwargs=kwargs, text=stripped, origin=origin)
