"""The values of an example call: array specs, the parsed call, its syntax error, its JSON form.

The parser (:mod:`pallas_fix.core.example_parser`) builds these; the verification worker turns
each :class:`ArgSpec` into a seeded random array. Nothing here imports jax.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional

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
# every spelling the grammar accepts -> the canonical short name
DTYPE_ALIASES: dict[str, str] = {v: k for k, v in DTYPES.items()}
DTYPE_ALIASES.update({k: k for k in DTYPES})
DTYPE_ALIASES["bool_"] = "bool"


# the values each integer dtype can hold, [low, high)
INT_BOUNDS: dict[str, tuple[int, int]] = {
    f"{kind}{bits}": ((0, 2**bits) if kind == "u" else (-(2 ** (bits - 1)), 2 ** (bits - 1)))
    for kind in ("i", "u")
    for bits in (8, 16, 32, 64)
}


@dataclass(frozen=True)
class ArgSpec:
    """An array argument: filled with seeded random values of this dtype and shape, drawn from
    ``value_range`` when it is given: integers ``low <= v < high`` for integer dtypes (index
    tables, lengths, offsets), uniform in ``[low, high)`` for float dtypes."""

    dtype: str  # canonical short name, a key of DTYPES
    shape: tuple[int, ...]
    value_range: Optional[tuple[Any, Any]] = None  # (low, high), high excluded

    @property
    def numpy_dtype(self) -> str:
        return DTYPES[self.dtype]

    def __str__(self) -> str:
        text = f"{self.dtype}[{', '.join(str(d) for d in self.shape)}]"
        if self.value_range is None:
            return text
        low, high = self.value_range
        return f"{text} in [{low!r}, {high!r})"


@dataclass
class Example:
    """One example call of an entry point."""

    entry: str
    args: list  # list[ArgSpec | literal]; tuples/lists may nest ArgSpecs
    kwargs: dict  # name -> ArgSpec | literal
    text: str  # the example as written (or as synthesised, for inferred examples)
    # where it came from: "--example", "path:line", "pyproject.toml ...", "inferred ...",
    # "synthesised ..." (pallas_fix.verify.examples.synthesis)
    origin: Optional[str] = None

    def canonical(self) -> str:
        parts = [format_value(a) for a in self.args]
        parts += [f"{k}={format_value(v)}" for k, v in self.kwargs.items()]
        return f"{self.entry}({', '.join(parts)})"


def origin_phrase(origin: Optional[str]) -> str:
    """Where an example came from, as words after its text: "synthesised from the __main__
    block, k.py:40" reads as it is; "k.py:6" (a directive) becomes "from k.py:6"."""
    if not origin:
        return ""
    return origin if origin.startswith(("synthesised", "inferred", "recorded")) else f"from {origin}"


def leaves(v: Any) -> Iterator[Any]:
    """The non-sequence values of an argument (tuples and lists may nest)."""
    if isinstance(v, (tuple, list)):
        for x in v:
            yield from leaves(x)
    else:
        yield v


def contains_array(v: Any) -> bool:
    return any(isinstance(x, ArgSpec) for x in leaves(v))


def map_arrays(v: Any, fn: Callable[[ArgSpec], Any]) -> Any:
    """``v`` with every ArgSpec replaced by ``fn(spec)``, keeping tuples and lists as they are."""
    if isinstance(v, ArgSpec):
        return fn(v)
    if isinstance(v, tuple):
        return tuple(map_arrays(x, fn) for x in v)
    if isinstance(v, list):
        return [map_arrays(x, fn) for x in v]
    return v


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


# --------------------------------------------------------------------------- JSON transport
# How the runner hands examples to the worker process.


def _value_to_json(v: Any) -> Any:
    if isinstance(v, ArgSpec):
        array = {"array": v.dtype, "shape": list(v.shape)}
        if v.value_range is not None:
            array["range"] = list(v.value_range)
        return array
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
            bounds = v.get("range")
            return ArgSpec(v["array"], tuple(v["shape"]), tuple(bounds) if bounds is not None else None)
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
