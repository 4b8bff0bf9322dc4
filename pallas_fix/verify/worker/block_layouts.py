"""A traced pallas_call's blocks, scratch and scalar-prefetch operands, as a
:class:`~pallas_fix.verify.judge.footprint.CallLayout`.

Reads the equation's ``grid_mapping`` (``jax._src.pallas.core.GridMapping``: ``grid``,
``block_mappings``, ``scratch_avals``, ``num_index_operands``) and each ``BlockMapping``
(``block_aval``: the block's shape without squeezed dims, dtype and memory space;
``has_trivial_window()``; ``pipeline_mode``), by duck typing; imports jax lazily (dtype widths).
`block_records` reads the same mappings as Mosaic's block tiling rule sees them
(:mod:`pallas_fix.verify.judge.tiling`): each block's dims with squeezed ones as 1, and its array.
"""

from __future__ import annotations

from typing import Any, Optional

from pallas_fix.verify.judge.footprint import CallLayout, Operand


def _bits(dtype: Any) -> Optional[int]:
    """Bits per element; None for what is not an array element (semaphores, barriers)."""
    try:
        from jax._src import dtypes

        bits = getattr(dtypes, "itemsize_bits", None)
        if bits is not None:
            return int(bits(dtype))
    except Exception:
        pass
    try:
        import numpy as np

        d = np.dtype(dtype)
        return None if d.kind in "OV" else d.itemsize * 8
    except Exception:
        return None


def _memory_space(aval: Any) -> str:
    ms = getattr(aval, "memory_space", None)
    if ms is None:
        return "default"
    return str(getattr(ms, "value", ms)).lower()


def _operand(aval: Any, **kw) -> Optional[Operand]:
    """The aval's buffer (an inner ``ShapedArray`` of a ref), or None when it holds no elements
    that can be counted (semaphores, barriers, dynamic shapes)."""
    inner = getattr(aval, "inner_aval", aval)
    shape = getattr(inner, "shape", None)
    dtype = getattr(inner, "dtype", None)
    if shape is None or dtype is None or not all(isinstance(d, int) for d in shape):
        return None
    bits = _bits(dtype)
    if bits is None:
        return None
    return Operand(tuple(shape), bits, _memory_space(aval), **kw)


def _trivial(bm: Any) -> bool:
    f = getattr(bm, "has_trivial_window", None)
    if f is not None:
        try:
            return bool(f())
        except Exception:
            return False
    return False


def _buffer_count(bm: Any) -> Optional[int]:
    n = getattr(getattr(bm, "pipeline_mode", None), "buffer_count", None)
    return n if isinstance(n, int) else None


def _block(bm: Any) -> Optional[Operand]:
    aval = getattr(bm, "block_aval", None) or getattr(bm, "transformed_block_aval", None)
    if aval is None:
        return None
    return _operand(aval, trivial_window=_trivial(bm), buffer_count=_buffer_count(bm))


def _sequential_steps(grid: tuple, cp: Any) -> Optional[int]:
    """Mosaic GPU: the grid points of the axes that are not "parallel" (the pipelined ones)."""
    sem = tuple(getattr(cp, "dimension_semantics", None) or ())
    steps = 1
    for i, d in enumerate(grid):
        if i < len(sem) and str(sem[i]).lower().endswith("parallel"):
            continue
        if not sem:
            continue  # default: every axis "parallel"
        if not isinstance(d, int):
            return None
        steps *= d
    return steps


def call_layout(eqn: Any, backend: str) -> Optional[CallLayout]:
    """The layout of one ``pallas_call`` equation, or None when its grid mapping is unreadable."""
    gm = eqn.params.get("grid_mapping")
    bms = getattr(gm, "block_mappings", None)
    if gm is None or bms is None:
        return None
    cp = eqn.params.get("compiler_params")
    grid = tuple(d if isinstance(d, int) else None for d in (getattr(gm, "grid", ()) or ()))
    blocks = tuple(b for b in map(_block, bms) if b is not None)
    scratch = tuple(s for s in (_operand(a) for a in getattr(gm, "scratch_avals", ()) or ()) if s is not None)
    n_index = int(getattr(gm, "num_index_operands", 0) or 0)
    kjaxpr = eqn.params.get("jaxpr")
    index_avals = [getattr(v, "aval", None) for v in (getattr(kjaxpr, "invars", ()) or ())[:n_index]]
    index = tuple(i for i in (_operand(a) for a in index_avals if a is not None) if i is not None)
    limit = getattr(cp, "vmem_limit_bytes", None) if backend in ("tpu", "generic") else None
    steps = getattr(cp, "max_concurrent_steps", 1) if backend == "mosaic_gpu" else 1
    return CallLayout(
        backend=backend, grid=grid, blocks=blocks, scratch=scratch, index=index,
        vmem_limit_bytes=limit if isinstance(limit, int) else None,
        max_concurrent_steps=steps if isinstance(steps, int) else 1,
        sequential_steps=_sequential_steps(grid, cp) if backend == "mosaic_gpu" else 1,
    )


def _dim_size(dim: Any) -> Optional[int]:
    """A block dim's size as Mosaic's lowering counts it (jax 0.12 ``pallas/core.py``
    ``_get_block_dim_size``): a squeezed dim is 1; None when it is not a number."""
    if dim is None or type(dim).__name__ in ("Squeezed", "Mapped"):
        return 1
    if isinstance(dim, int):
        return dim
    size = getattr(dim, "block_size", None)
    return size if isinstance(size, int) else None


def block_records(eqn: Any) -> list[dict]:
    """Each block of a ``pallas_call`` equation: ``{"origin", "block", "array", "bits", "space",
    "trivial"}`` (``block`` with squeezed dims as 1); blocks whose sizes are not numbers are left out."""
    gm = eqn.params.get("grid_mapping")
    out = []
    for bm in getattr(gm, "block_mappings", None) or ():
        array = getattr(bm, "array_aval", None) or getattr(bm, "array_shape_dtype", None)
        shape, dtype = getattr(array, "shape", None), getattr(array, "dtype", None)
        sizes = [_dim_size(d) for d in getattr(bm, "block_shape", None) or ()]
        if shape is None or dtype is None or not sizes or None in sizes or len(sizes) != len(shape):
            continue
        block = _block(bm)
        out.append({"origin": str(getattr(bm, "origin", "") or ""), "block": sizes,
                    "array": [d if isinstance(d, int) else None for d in shape], "bits": _bits(dtype),
                    "space": block.memory_space if block is not None else "default",
                    "trivial": _trivial(bm)})
    return out
