"""Example calls: which concrete arguments an entry point is verified with.

Nothing here imports jax or executes user code (annotations and module constants are read with
:mod:`ast`).

Grammar
-------
An example call names an entry point (a module-level callable, dotted names allowed for
attributes: ``ops.matmul``) and its arguments::

    example  := entry "(" [arg ("," arg)* [","]] ")"
    entry    := NAME ("." NAME)*
    arg      := NAME "=" value | value           (positional arguments come first)
    value    := array | literal | "(" tuple ")" | "[" list "]" | NAME
    array    := DTYPE "[" [dim ("," dim)* [","]] "]"      f32[256, 512]; f32[] is a scalar
    dim      := INT | NAME
    literal  := INT | FLOAT | STRING | True | False | None | "-" INT | "-" FLOAT

``DTYPE`` is one of ``f32 bf16 f16 f64 i8 i16 i32 i64 u8 u16 u32 u64 bool`` (the long numpy
names ``float32``, ``bfloat16``, ``int32``, ... are accepted too and canonicalised).
A bare ``NAME`` (as a dim or a value) is resolved against the module-level constants of the file
being verified (``M, K = 256, 512`` then ``matmul(f32[M, K], f32[K, N], block_k=BK)``); an
unknown name is a syntax error pointing at it.

Array arguments (anything containing an ``f32[...]``, including tuples of them) become seeded
random inputs; every other value is a static Python argument passed as is (positionally or by
keyword).

Sources, first non-empty wins (:func:`collect_examples`)
--------------------------------------------------------
1. ``--example`` strings given on the command line;
2. directives anywhere in the file, in comments, several allowed::

       # pallas-fix: example matmul(f32[256, 512], f32[512, 256], block_k=128)

3. ``[tool.pallas-fix.examples]`` in the nearest ``pyproject.toml`` at or above the file: a table
   from a *file glob* or a *module path* to an example string or a list of them::

       [tool.pallas-fix.examples]
       "kernels/matmul.py" = ["matmul(f32[256, 512], f32[512, 256])"]
       "kernels/attn_*.py" = "flash(bf16[1, 4, 256, 64], bf16[1, 4, 256, 64], bf16[1, 4, 256, 64])"
       "mypkg.ops.softmax" = ["softmax(f32[64, 1024])"]

   A key containing ``/``, a glob character (``*?[``) or ending in ``.py`` is a glob matched
   (``fnmatch``: ``*`` also crosses ``/``) against the file's path relative to the directory of
   ``pyproject.toml``; a glob without ``/`` is also tried against the file's base name. Any other
   key is a dotted module path, equal to the file's module name computed from that relative path
   (``src/`` prefix and ``__init__`` dropped). Every matching key contributes, in table order.
4. Inferred, best effort: a top-level function whose every positional parameter without a default
   is annotated with a concrete jaxtyping shape (``x: Float[Array, "256 512"]``; dims may name
   module constants: ``Float[Array, "M K"]``; ``""`` is a scalar) gets an example with those
   shapes. With ``# pallas-fix: entry NAME`` hints only the hinted functions are considered;
   without hints every public top-level function with such annotations is. Dtype classes:
   ``Float``/``Float32``/``Shaped``/``Num``/``Real`` -> f32, ``Float16``, ``BFloat16``,
   ``Float64``, ``Int``/``Int32``, ``Int8``/``Int16``/``Int64``, ``UInt``/``UInt32``, ``UInt8``,
   ``Bool``. Anything else (variadic dims ``*b``, ``...``, unknown names) is not inferred.

No example at all means "not verified"; say so plainly.
"""

from __future__ import annotations

import ast
import fnmatch
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence, Union

from pallas_fix.core.directives import extract_directives

__all__ = [
    "ArgSpec",
    "Example",
    "ExampleSyntaxError",
    "DTYPES",
    "parse_example",
    "format_value",
    "extract_directives",
    "module_constants",
    "examples_from_directives",
    "examples_from_pyproject",
    "infer_examples",
    "collect_examples",
    "example_to_json",
    "example_from_json",
]

# short name -> numpy dtype name
DTYPES: dict[str, str] = {
    "f32": "float32",
    "bf16": "bfloat16",
    "f16": "float16",
    "f64": "float64",
    "i8": "int8",
    "i16": "int16",
    "i32": "int32",
    "i64": "int64",
    "u8": "uint8",
    "u16": "uint16",
    "u32": "uint32",
    "u64": "uint64",
    "bool": "bool",
}
_DTYPE_ALIASES: dict[str, str] = {v: k for k, v in DTYPES.items()}
_DTYPE_ALIASES.update({k: k for k in DTYPES})
_DTYPE_ALIASES["bool_"] = "bool"


@dataclass(frozen=True)
class ArgSpec:
    """An array argument: filled with seeded random values of this dtype and shape."""

    dtype: str  # canonical short name, a key of DTYPES
    shape: tuple[int, ...]

    @property
    def numpy_dtype(self) -> str:
        return DTYPES[self.dtype]

    def __str__(self) -> str:
        return f"{self.dtype}[{', '.join(str(d) for d in self.shape)}]"


Literal = Union[int, float, bool, None, str, tuple, list]


@dataclass
class Example:
    """One example call of an entry point."""

    entry: str
    args: list  # list[ArgSpec | literal]; tuples/lists may nest ArgSpecs
    kwargs: dict  # name -> ArgSpec | literal
    text: str  # the example as written (or as synthesised, for inferred examples)
    origin: Optional[str] = None  # "--example", "path:line", "pyproject.toml ...", "inferred ..."

    def canonical(self) -> str:
        parts = [format_value(a) for a in self.args]
        parts += [f"{k}={format_value(v)}" for k, v in self.kwargs.items()]
        return f"{self.entry}({', '.join(parts)})"

    def has_arrays(self) -> bool:
        return any(_contains_array(a) for a in self.args) or any(
            _contains_array(v) for v in self.kwargs.values()
        )


def _contains_array(v: Any) -> bool:
    if isinstance(v, ArgSpec):
        return True
    if isinstance(v, (tuple, list)):
        return any(_contains_array(x) for x in v)
    return False


def format_value(v: Any) -> str:
    if isinstance(v, ArgSpec):
        return str(v)
    if isinstance(v, tuple):
        inner = ", ".join(format_value(x) for x in v)
        return f"({inner},)" if len(v) == 1 else f"({inner})"
    if isinstance(v, list):
        return "[" + ", ".join(format_value(x) for x in v) + "]"
    return repr(v)


class ExampleSyntaxError(ValueError):
    """An example call that does not parse. ``column`` is 1-based (in ``line_text`` when given)."""

    def __init__(
        self,
        reason: str,
        text: str,
        pos: int,
        *,
        origin: Optional[str] = None,
        line_text: Optional[str] = None,
        line_offset: int = 0,
    ):
        self.reason = reason
        self.text = text
        self.pos = pos  # 0-based offset into text
        self.origin = origin
        self.line_text = line_text if line_text is not None else text
        self.column = line_offset + pos + 1
        where = f"{origin}: " if origin else ""
        shown = self.line_text.rstrip("\n")
        caret = " " * (self.column - 1) + "^"
        super().__init__(
            f"{where}example syntax error at column {self.column}: {reason}\n    {shown}\n    {caret}"
        )


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
            if t.text in _DTYPE_ALIASES and followed_by_bracket:
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

    def array(self) -> Any:
        dt = self.next()
        dtype = _DTYPE_ALIASES[dt.text]
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
        return ("__array__", dtype, dims, dt.pos)


def _resolve(v: Any, constants: dict, err) -> Any:
    if isinstance(v, _Sym):
        if v.name not in constants:
            raise err(
                f"unknown name {v.name!r}: values must be literals or module-level constants", v.pos
            )
        return constants[v.name]
    if isinstance(v, tuple) and len(v) == 4 and v[0] == "__array__":
        _, dtype, dims, pos = v
        shape = []
        for d in dims:
            if isinstance(d, _Sym):
                if d.name not in constants:
                    raise err(
                        f"unknown dimension name {d.name!r}: dims must be integers or module-level integer constants",
                        d.pos,
                    )
                d_val = constants[d.name]
                if isinstance(d_val, bool) or not isinstance(d_val, int) or d_val < 0:
                    raise err(f"dimension {d.name!r} = {d_val!r} is not a non-negative integer", d.pos)
                shape.append(d_val)
            else:
                shape.append(d)
        return ArgSpec(dtype, tuple(shape))
    if isinstance(v, tuple):
        return tuple(_resolve(x, constants, err) for x in v)
    if isinstance(v, list):
        return [_resolve(x, constants, err) for x in v]
    return v


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

    def err(reason: str, pos: int) -> ExampleSyntaxError:
        return ExampleSyntaxError(reason, stripped, pos, **err_kwargs)

    constants = constants or {}
    args = [_resolve(a, constants, err) for a in args]
    kwargs = {k: _resolve(v, constants, err) for k, v in kwargs.items()}
    return Example(entry=entry, args=args, kwargs=kwargs, text=stripped, origin=origin)


# --------------------------------------------------------------------------- JSON transport


def _value_to_json(v: Any) -> Any:
    if isinstance(v, ArgSpec):
        return {"array": v.dtype, "shape": list(v.shape)}
    if isinstance(v, tuple):
        return {"tuple": [_value_to_json(x) for x in v]}
    if isinstance(v, list):
        return {"list": [_value_to_json(x) for x in v]}
    if isinstance(v, float) and (v != v or v in (float("inf"), float("-inf"))):
        return {"float": repr(v)}
    return v


def _value_from_json(v: Any) -> Any:
    if isinstance(v, dict):
        if "array" in v:
            return ArgSpec(v["array"], tuple(v["shape"]))
        if "tuple" in v:
            return tuple(_value_from_json(x) for x in v["tuple"])
        if "list" in v:
            return [_value_from_json(x) for x in v["list"]]
        if "float" in v:
            return float(v["float"])
    return v


def example_to_json(ex: Example) -> dict:
    return {
        "entry": ex.entry,
        "args": [_value_to_json(a) for a in ex.args],
        "kwargs": {k: _value_to_json(v) for k, v in ex.kwargs.items()},
        "text": ex.text,
        "origin": ex.origin,
    }


def example_from_json(d: dict) -> Example:
    return Example(
        entry=d["entry"],
        args=[_value_from_json(a) for a in d["args"]],
        kwargs={k: _value_from_json(v) for k, v in d["kwargs"].items()},
        text=d["text"],
        origin=d.get("origin"),
    )


# --------------------------------------------------------------------------- module constants

_BINOPS = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.FloorDiv: lambda a, b: a // b,
    ast.Mod: lambda a, b: a % b,
    ast.Pow: lambda a, b: a**b,
    ast.Div: lambda a, b: a / b,
}


class _NotConst(Exception):
    pass


def _const_eval(node: ast.AST, env: dict) -> Any:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str, bool, type(None))):
        return node.value
    if isinstance(node, ast.Name) and node.id in env:
        return env[node.id]
    if isinstance(node, ast.Tuple):
        return tuple(_const_eval(e, env) for e in node.elts)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _const_eval(node.operand, env)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        a, b = _const_eval(node.left, env), _const_eval(node.right, env)
        if all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (a, b)):
            if isinstance(node.op, ast.Pow) and abs(b) > 64:
                raise _NotConst
            try:
                return _BINOPS[type(node.op)](a, b)
            except ArithmeticError:
                raise _NotConst from None
    raise _NotConst


def module_constants(source: str | ast.Module) -> dict[str, Any]:
    """Top-level constants: ``M = 256``, ``M, K = 256, 512``, ``K = 2 * M``, ``BS: int = 32``.

    Later assignments win; a name rebound to a non-constant is dropped.
    """
    tree = ast.parse(source) if isinstance(source, str) else source
    env: dict[str, Any] = {}

    def bind(target: ast.AST, value: Any, known: bool) -> None:
        if isinstance(target, ast.Name):
            if known:
                env[target.id] = value
            else:
                env.pop(target.id, None)
        elif isinstance(target, (ast.Tuple, ast.List)):
            ok = known and isinstance(value, tuple) and len(value) == len(target.elts)
            for n, t in enumerate(target.elts):
                bind(t, value[n] if ok else None, ok)

    for stmt in tree.body:
        if isinstance(stmt, ast.Assign):
            try:
                v, known = _const_eval(stmt.value, env), True
            except _NotConst:
                v, known = None, False
            for t in stmt.targets:
                bind(t, v, known)
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            try:
                v, known = _const_eval(stmt.value, env), True
            except _NotConst:
                v, known = None, False
            bind(stmt.target, v, known)
    return env


def examples_from_directives(
    source: str, *, path: str = "<kernel>", constants: Optional[dict] = None
) -> list[Example]:
    """Parse the example directives of a file (raises ExampleSyntaxError on the first bad one)."""
    if constants is None:
        constants = _safe_constants(source)
    out = []
    for d in extract_directives(source):
        if d.kind != "example":
            continue
        origin = f"{path}:{d.line}"
        out.append(
            parse_example(
                d.text,
                constants=constants,
                origin=origin,
                line_text=d.line_text.rstrip("\n"),
                line_offset=d.column,
            )
        )
    return out


def entry_hints(source: str) -> list[str]:
    """Names given by ``# pallas-fix: entry NAME`` (several names may be comma separated)."""
    names: list[str] = []
    for d in extract_directives(source):
        if d.kind == "entry":
            names += [n.strip() for n in d.text.split(",") if n.strip()]
    return names


def _safe_constants(source: str) -> dict:
    try:
        return module_constants(source)
    except SyntaxError:
        return {}


# --------------------------------------------------------------------------- pyproject


def find_pyproject(path: str | os.PathLike) -> Optional[Path]:
    p = Path(path).resolve()
    for d in [p] + list(p.parents) if p.is_dir() else list(p.parents):
        cand = d / "pyproject.toml"
        if cand.is_file():
            return cand
    return None


def _module_names(rel: str) -> set[str]:
    parts = rel[:-3].split("/") if rel.endswith(".py") else rel.split("/")
    if parts and parts[-1] == "__init__":
        parts = parts[:-1]
    names = {".".join(parts)}
    if parts and parts[0] == "src":
        names.add(".".join(parts[1:]))
    return names


def _is_glob_key(key: str) -> bool:
    return "/" in key or key.endswith(".py") or any(c in key for c in "*?[")


def examples_from_pyproject(
    path: str | os.PathLike,
    *,
    pyproject: str | os.PathLike | None = None,
    constants: Optional[dict] = None,
) -> list[Example]:
    """Examples for ``path`` from ``[tool.pallas-fix.examples]`` (see the module docstring)."""
    import tomllib

    pp = Path(pyproject) if pyproject is not None else find_pyproject(path)
    if pp is None or not pp.is_file():
        return []
    with open(pp, "rb") as f:
        data = tomllib.load(f)
    table = data.get("tool", {}).get("pallas-fix", {}).get("examples", {})
    if not isinstance(table, dict):
        raise ValueError(f"{pp}: [tool.pallas-fix.examples] must be a table of key = [examples]")
    try:
        rel = Path(path).resolve().relative_to(pp.parent.resolve()).as_posix()
    except ValueError:
        rel = Path(path).as_posix()
    base = rel.rsplit("/", 1)[-1]
    modnames = _module_names(rel)
    out: list[Example] = []
    for key, value in table.items():
        if _is_glob_key(key):
            hit = fnmatch.fnmatchcase(rel, key) or ("/" not in key and fnmatch.fnmatchcase(base, key))
        else:
            hit = key in modnames
        if not hit:
            continue
        texts = [value] if isinstance(value, str) else value
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            raise ValueError(f"{pp}: [tool.pallas-fix.examples] {key!r} must be a string or a list of strings")
        for t in texts:
            out.append(parse_example(t, constants=constants, origin=f"{pp.name} [tool.pallas-fix.examples] {key!r}"))
    return out


# --------------------------------------------------------------------------- inference

_JAXTYPING_DTYPES = {
    "Float": "f32", "Float32": "f32", "Shaped": "f32", "Num": "f32", "Real": "f32", "Inexact": "f32",
    "Float16": "f16", "BFloat16": "bf16", "Float64": "f64",
    "Int": "i32", "Integer": "i32", "Int32": "i32", "Int8": "i8", "Int16": "i16", "Int64": "i64",
    "UInt": "u32", "UInt32": "u32", "UInt8": "u8", "UInt16": "u16", "UInt64": "u64",
    "Bool": "bool",
}


def _annotation_spec(ann: ast.AST, constants: dict) -> Optional[ArgSpec]:
    if not isinstance(ann, ast.Subscript):
        return None
    base = ann.value
    name = base.attr if isinstance(base, ast.Attribute) else base.id if isinstance(base, ast.Name) else None
    if name not in _JAXTYPING_DTYPES:
        return None
    sl = ann.slice
    if not (isinstance(sl, ast.Tuple) and len(sl.elts) == 2):
        return None
    dims_node = sl.elts[1]
    if not (isinstance(dims_node, ast.Constant) and isinstance(dims_node.value, str)):
        return None
    shape = []
    for tok in dims_node.value.split():
        if re.fullmatch(r"\d+", tok):
            shape.append(int(tok))
        elif tok in constants and isinstance(constants[tok], int) and not isinstance(constants[tok], bool):
            shape.append(constants[tok])
        else:
            return None
    return ArgSpec(_JAXTYPING_DTYPES[name], tuple(shape))


def infer_examples(source: str, *, path: str = "<kernel>", constants: Optional[dict] = None) -> list[Example]:
    """Best-effort examples from concrete jaxtyping annotations (see the module docstring)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    if constants is None:
        constants = module_constants(tree)
    hints = entry_hints(source)
    out = []
    for stmt in tree.body:
        if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if hints:
            if stmt.name not in hints:
                continue
        elif stmt.name.startswith("_"):
            continue
        a = stmt.args
        positional = a.posonlyargs + a.args
        n_required = len(positional) - len(a.defaults)
        required = positional[:n_required]
        kw_required = [k for k, d in zip(a.kwonlyargs, a.kw_defaults) if d is None]
        if kw_required or not required:
            continue
        specs = []
        for arg in required:
            spec = _annotation_spec(arg.annotation, constants) if arg.annotation is not None else None
            if spec is None:
                break
            specs.append(spec)
        else:
            ex = Example(entry=stmt.name, args=specs, kwargs={}, text="", origin=f"inferred from annotations, {path}:{stmt.lineno}")
            ex.text = ex.canonical()
            out.append(ex)
    return out


# --------------------------------------------------------------------------- all sources


def collect_examples(
    path: str | os.PathLike,
    source: Optional[str] = None,
    *,
    cli_examples: Sequence[str] = (),
    pyproject: str | os.PathLike | None | bool = None,
) -> list[Example]:
    """Examples for one file, from the first non-empty source in priority order.

    ``pyproject``: a path, ``None`` to search upwards from ``path``, ``False`` to skip.
    Raises :class:`ExampleSyntaxError` for a malformed example in the winning source.
    """
    if source is None:
        source = Path(path).read_text(encoding="utf-8")
    constants = _safe_constants(source)
    if cli_examples:
        return [parse_example(t, constants=constants, origin="--example") for t in cli_examples]
    found = examples_from_directives(source, path=str(path), constants=constants)
    if found:
        return found
    if pyproject is not False:
        found = examples_from_pyproject(path, pyproject=pyproject or None, constants=constants)
        if found:
            return found
    return infer_examples(source, path=str(path), constants=constants)
