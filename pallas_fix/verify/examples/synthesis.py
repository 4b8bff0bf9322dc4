"""Candidate example calls built from what an entry point's code says (nothing is run here).

For each entry point (:mod:`pallas_fix.verify.examples.entry_points`) the facts about its parameters
(:mod:`pallas_fix.verify.examples.call_facts`) become concrete arguments:

* array or static: parameters jit treats as static, annotated ``int`` / ``float`` / ``bool``, or
  used as a block size are static; parameters with a default are left to it; the rest are arrays;
* rank: what shape unpacking, BlockSpec block shapes and indexing say (2 when nothing does);
* sizes: one size ``S`` for every dim, the smallest multiple of every block size the code
  divides by that leaves at least two blocks and is at least 256 (a loop that runs once proves
  little); leading dims of rank >= 3 arrays are small; an operand a kernel only reads whole,
  next to operands it walks in windows, is a row vector (1, S) (a LayerNorm's gamma);
  index tables are short (8) and their values stay inside what they index (``i32[8] in [0, 8)``);
* dtype: a jaxtyping annotation; i32 for integer operands; the module's low-precision float
  when a kernel casts the operand up to f32 (``x_ref[...].astype(jnp.float32)``); else f32.

The variants (row vector or not, low precision or f32, a second size) come best first; the
verification worker (:mod:`pallas_fix.verify.worker.candidate_trial`) keeps the first one the original runs on.
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass
from typing import Optional

from pallas_fix.core.examples import ArgSpec, Example
from pallas_fix.verify.examples.annotations import JAXTYPING_DTYPES
from pallas_fix.verify.examples.ast_reading import literal, param_defaults, positional_params, tail
from pallas_fix.verify.examples.call_facts import ModuleInfo, function_facts
from pallas_fix.verify.examples.entry_points import EntryPoint
from pallas_fix.verify.examples.shape_facts import LOW_PRECISION, ArrayFacts, FunctionFacts

_MIN_SIZE = 256
_MAX_SIZE = 1024
_INDEX_TABLE_SIZE = 8
_LEADING_SIZE = 2
_LOW_PRECISION_NAMES = {"bfloat16": "bf16", "float16": "f16"}
_SCALAR_ANNOTATIONS = {"int": 1, "float": 1.0, "bool": True}


@dataclass(frozen=True)
class _Variant:
    row_vectors: bool
    low_precision: bool
    size_factor: int


_VARIANTS = (_Variant(True, True, 1), _Variant(False, True, 1), _Variant(True, False, 1), _Variant(True, True, 2))


@dataclass
class _Entry:
    """An entry point's parameters, read: which are arrays, what is known of each."""

    ep: EntryPoint
    order: list[str]  # required positional parameters, in call order
    arrays: list[str]  # the required parameters that are arrays
    statics: dict  # required static parameter -> value (None: choose from the size)
    facts: FunctionFacts
    annotations: dict  # parameter -> (dtype, rank) from a jaxtyping annotation
    low_precision: Optional[str]  # the module's one low-precision float, if it names one


def _low_precision_dtype(tree: ast.Module) -> Optional[str]:
    named = {_LOW_PRECISION_NAMES[n.attr] for n in ast.walk(tree)
             if isinstance(n, ast.Attribute) and n.attr in _LOW_PRECISION_NAMES}
    return named.pop() if len(named) == 1 else None


def _annotation(ann: Optional[ast.AST]) -> Optional[tuple[str, Optional[int]]]:
    """``Float[Array, "m k"]`` -> ("f32", 2); ``BFloat16[Array, "..."]`` -> ("bf16", None)."""
    if not isinstance(ann, ast.Subscript) or tail(ann.value) not in JAXTYPING_DTYPES:
        return None
    dims = ann.slice.elts[1] if isinstance(ann.slice, ast.Tuple) and len(ann.slice.elts) == 2 else None
    text = literal(dims)
    rank = None
    if isinstance(text, str) and "..." not in text and "*" not in text:
        rank = len(text.split())
    return JAXTYPING_DTYPES[tail(ann.value)], rank


def read_entry(ep: EntryPoint, module: ModuleInfo, tree: ast.Module) -> Optional[_Entry]:
    """The entry's parameters, read; None when a required parameter cannot be given a value."""
    fn = ep.node
    defaults = param_defaults(fn)
    params = [p for p in positional_params(fn) + fn.args.kwonlyargs]
    env = dict(module.constants)
    for name, default in defaults.items():
        value = literal(default)
        if value is not None:
            env[name] = value
    facts = function_facts(fn, [p.arg for p in params], env, module)
    order, arrays, statics, annotations = [], [], {}, {}
    for p in params:
        if p.arg in defaults:
            continue
        scalar = tail(p.annotation) if p.annotation is not None else ""
        if p.arg in ep.static_names or p.arg in facts.block_like or scalar in _SCALAR_ANNOTATIONS:
            if scalar not in ("", "int", "float", "bool"):
                return None
            statics[p.arg] = _SCALAR_ANNOTATIONS.get(scalar) if scalar in ("float", "bool") else None
        elif p in fn.args.kwonlyargs:
            return None  # a required keyword-only array is rarely what the code expects
        else:
            arrays.append(p.arg)
        if p not in fn.args.kwonlyargs:
            order.append(p.arg)
        found = _annotation(p.annotation)
        if found is not None:
            annotations[p.arg] = found
    if not arrays:
        return None
    return _Entry(ep, order, arrays, statics, facts, annotations, _low_precision_dtype(tree))


def _integer(f: ArrayFacts) -> bool:
    """Used as an integer, or a scalar operand in SMEM (flags, counts, tables) without windows."""
    return f.integer or (f.smem and not f.divisors and LOW_PRECISION not in f.dtypes)


def _is_index_table(f: ArrayFacts) -> bool:
    return _integer(f) and (bool(f.index_uses) or f.smem or not f.divisors)


def _rank(entry: _Entry, name: str) -> int:
    f = entry.facts.arrays[name]
    annotated = entry.annotations.get(name, (None, None))[1]
    if annotated is not None:
        return annotated
    if f.exact_ranks:
        return max(max(f.exact_ranks), f.min_rank)
    if _is_index_table(f):
        return max(f.min_rank, 1)
    return max(f.min_rank, 2)


def _all_divisors(entry: _Entry) -> set[int]:
    return {d for name in entry.arrays for sizes in entry.facts.arrays[name].divisors.values() for d in sizes}


def _base_size(divisors: set[int]) -> int:
    """The smallest multiple of every divisor that is >= 256 and leaves two blocks of each."""
    step = math.lcm(8, *divisors)
    if step > _MAX_SIZE:
        return step
    want = max(_MIN_SIZE, 2 * max(divisors, default=1))
    return step * max(1, -(-want // step))


def _dim_divisor(f: ArrayFacts, dim: int, rank: int) -> int:
    sizes = f.divisors.get(dim, set()) | f.divisors.get(dim - rank, set())
    return math.lcm(1, *sizes)


def _shape(entry: _Entry, name: str, size: int, variant: _Variant, rows_walked: bool) -> tuple[int, ...]:
    f = entry.facts.arrays[name]
    rank = _rank(entry, name)
    if _is_index_table(f):
        return tuple(max(_INDEX_TABLE_SIZE, _dim_divisor(f, d, rank)) for d in range(rank))
    dims = []
    for d in range(rank):
        step = _dim_divisor(f, d, rank)
        if d < rank - 2:
            dims.append(step * max(1, -(-_LEADING_SIZE // step)))
        else:
            dims.append(size if size % step == 0 else step * max(1, size // step))
    if variant.row_vectors and rank == 2 and rows_walked and _row_vector(f):
        dims[0] = 1
    return tuple(dims)


def _row_vector(f: ArrayFacts) -> bool:
    """Only ever read whole, with no block shape of its own: a broadcast operand."""
    return f.whole_reads > 0 and f.window_reads == 0 and not f.blocked and not f.divisors and not _integer(f)


def _dtype(entry: _Entry, name: str, variant: _Variant) -> str:
    f = entry.facts.arrays[name]
    if name in entry.annotations:
        return entry.annotations[name][0]
    if _integer(f):
        return "i32"
    if variant.low_precision and entry.low_precision and LOW_PRECISION in f.dtypes:
        return entry.low_precision
    return "f32"


def _value_range(entry: _Entry, name: str, shapes: dict) -> Optional[tuple[int, int]]:
    """[0, high): every start the table's values give stays inside the windows they index."""
    highs = []
    for use in entry.facts.arrays[name].index_uses:
        shape = shapes.get(use.target)
        if shape is None or not -len(shape) <= use.dim < len(shape):
            continue
        highs.append((shape[use.dim] - use.size) // use.scale + 1)
    if not highs or min(highs) < 1:
        return None
    return 0, min(highs)


def _static_value(entry: _Entry, name: str, size: int):
    chosen = entry.statics[name]
    if chosen is not None:
        return chosen
    if name in entry.facts.block_like:
        return size // 2
    return size


def build_candidate(entry: _Entry, variant: _Variant, origin: str) -> Example:
    size = _base_size(_all_divisors(entry)) * variant.size_factor
    rows_walked = any(f.window_reads for n, f in entry.facts.arrays.items() if n in entry.arrays)
    shapes = {n: _shape(entry, n, size, variant, rows_walked) for n in entry.arrays}
    values = {n: _static_value(entry, n, size) for n in entry.statics}
    for n in entry.arrays:
        dtype = _dtype(entry, n, variant)
        values[n] = ArgSpec(dtype, shapes[n], _value_range(entry, n, shapes) if dtype == "i32" else None)
    args = [values[n] for n in entry.order]
    kwargs = {n: v for n, v in values.items() if n not in entry.order}
    ex = Example(entry=entry.ep.name, args=args, kwargs=kwargs, text="", origin=origin)
    ex.text = ex.canonical()
    return ex


def code_candidates(ep: EntryPoint, module: ModuleInfo, tree: ast.Module, *, path: str) -> list[Example]:
    """Distinct candidate calls of ``ep``, best first (see the module docstring)."""
    entry = read_entry(ep, module, tree)
    if entry is None:
        return []
    origin = f"synthesised from the code of {ep.name}, {path}:{ep.line}"
    found: dict[str, Example] = {}
    for variant in _VARIANTS:
        ex = build_candidate(entry, variant, origin)
        found.setdefault(ex.text, ex)
    return list(found.values())
