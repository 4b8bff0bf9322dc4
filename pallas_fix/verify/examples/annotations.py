"""Examples inferred from concrete jaxtyping annotations (the last, best-effort example source).

A top-level function whose every positional parameter without a default is annotated with a
concrete shape (``x: Float[Array, "256 512"]``; dims may name module constants:
``Float[Array, "M K"]``; ``""`` is a scalar) gets an example with those shapes. With
``# pallas-fix: entry NAME`` hints only the hinted functions are considered; without hints every
public top-level function with such annotations is. Anything else (variadic dims ``*b``, ``...``,
unknown names, required keyword-only parameters) is not inferred. Read with :mod:`ast` only.
"""

from __future__ import annotations

import ast
import re
from typing import Iterator, Optional

from pallas_fix.core.directives import extract_directives
from pallas_fix.core.examples import ArgSpec, Example
from pallas_fix.verify.examples.module_constants import module_constants

# jaxtyping dtype class -> the grammar's dtype
JAXTYPING_DTYPES = {
    "Float": "f32", "Float32": "f32", "Shaped": "f32", "Num": "f32", "Real": "f32", "Inexact": "f32",
    "Float16": "f16", "BFloat16": "bf16", "Float64": "f64",
    "Int": "i32", "Integer": "i32", "Int32": "i32", "Int8": "i8", "Int16": "i16", "Int64": "i64",
    "UInt": "u32", "UInt32": "u32", "UInt8": "u8", "UInt16": "u16", "UInt64": "u64",
    "Bool": "bool",
}

_Function = (ast.FunctionDef, ast.AsyncFunctionDef)


def entry_hints(source: str) -> list[str]:
    """Names given by ``# pallas-fix: entry NAME`` (several names may be comma separated)."""
    names: list[str] = []
    for d in extract_directives(source):
        if d.kind == "entry":
            names += [n.strip() for n in d.text.split(",") if n.strip()]
    return names


def _annotation_spec(ann: Optional[ast.AST], constants: dict) -> Optional[ArgSpec]:
    """``Float[Array, "M 512"]`` -> ``f32[256, 512]``; None for anything less concrete."""
    if not isinstance(ann, ast.Subscript):
        return None
    base = ann.value
    name = base.attr if isinstance(base, ast.Attribute) else base.id if isinstance(base, ast.Name) else None
    if name not in JAXTYPING_DTYPES:
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
    return ArgSpec(JAXTYPING_DTYPES[name], tuple(shape))


def _candidates(tree: ast.Module, hints: list[str]) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for stmt in tree.body:
        if isinstance(stmt, _Function) and (stmt.name in hints if hints else not stmt.name.startswith("_")):
            yield stmt


def _required_specs(fn: ast.FunctionDef | ast.AsyncFunctionDef, constants: dict) -> Optional[list[ArgSpec]]:
    """One spec per required positional parameter, or None when one of them has no concrete
    annotation, there are none, or a keyword-only parameter is required."""
    a = fn.args
    positional = a.posonlyargs + a.args
    required = positional[: len(positional) - len(a.defaults)]
    kw_required = [k for k, d in zip(a.kwonlyargs, a.kw_defaults) if d is None]
    if kw_required or not required:
        return None
    specs = [_annotation_spec(arg.annotation, constants) for arg in required]
    return None if None in specs else specs


def infer_examples(source: str, *, path: str = "<kernel>", constants: Optional[dict] = None) -> list[Example]:
    """Best-effort examples from concrete jaxtyping annotations (see the module docstring)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    if constants is None:
        constants = module_constants(tree)
    out = []
    for fn in _candidates(tree, entry_hints(source)):
        specs = _required_specs(fn, constants)
        if specs is None:
            continue
        ex = Example(entry=fn.name, args=specs, kwargs={}, text="",
                     origin=f"inferred from annotations, {path}:{fn.lineno}")
        ex.text = ex.canonical()
        out.append(ex)
    return out
