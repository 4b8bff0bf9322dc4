"""Dtype-aware comparison of output leaves (numpy only; no jax).

Rules
-----
* Integers and bools: bitwise equal.
* Floats: NaN positions must match; infinities must match exactly (position and sign); every
  finite element must satisfy ``|got - ref| <= atol * max(1, rms(ref)) + rtol * |ref|`` with
  ``(rtol, atol)`` by dtype (:data:`TOLERANCES`: f32/f64 tight, bf16/f16 looser). The bound is per
  element: a wrong value next to large ones is not hidden by them (the old bound,
  ``atol * max(1, max|ref|)``, let a bf16 error of 0.078 pass at elements of size ~1 because one
  element of the leaf was 4). ``atol`` is scaled by the leaf's root-mean-square magnitude, not
  by its largest one: summation-order noise is absolute in the scale of the summands, so an
  element that cancels to ~0 in an output of typical size 1000 carries ~1000-sized rounding.
* ``abs_err`` is ``max |got - ref|`` over finite elements; ``rel_err`` is ``abs_err / max|ref|``
  (relative to the leaf's largest reference magnitude, not per element).
* Shape or dtype differences are mismatches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

# dtype name -> (rtol, atol)
TOLERANCES: dict[str, tuple[float, float]] = {
    "float64": (1e-10, 1e-10),
    "float32": (1e-5, 1e-5),
    "float16": (1e-2, 1e-2),
    "bfloat16": (2e-2, 2e-2),
    "complex64": (1e-5, 1e-5),
    "complex128": (1e-10, 1e-10),
}
_LOW_PRECISION = (1e-1, 1e-1)  # float8 variants and anything unknown and inexact


def tolerance_for(dtype: np.dtype) -> Optional[tuple[float, float]]:
    """(rtol, atol) for an inexact dtype, None for exact (int / bool) dtypes."""
    dt = np.dtype(dtype)
    name = dt.name
    if name in TOLERANCES:
        return TOLERANCES[name]
    if dt.kind in "biu":
        return None
    if "float8" in name or "float4" in name or "float6" in name:
        return _LOW_PRECISION
    if dt.kind in "fc":
        return TOLERANCES.get(name, _LOW_PRECISION)
    return None  # object / str / unknown: compare exactly


@dataclass
class LeafResult:
    path: str
    ok: bool
    abs_err: Optional[float] = None
    rel_err: Optional[float] = None
    reason: Optional[str] = None  # why it failed, human words


def _num(x) -> str:
    """A plain number for messages (no ``np.float32(...)`` wrapper)."""
    try:
        v = x.item() if hasattr(x, "item") else x
    except Exception:  # pragma: no cover
        v = x
    if isinstance(v, float):
        return f"{v:.7g}"
    return repr(v)


def _first_index(mask: np.ndarray) -> tuple:
    idx = np.argwhere(mask)
    return tuple(int(i) for i in idx[0]) if len(idx) else ()


def compare_leaf(ref, got, path: str = "") -> LeafResult:
    ref = np.asarray(ref)
    got = np.asarray(got)
    where = path or "output"
    if ref.shape != got.shape:
        return LeafResult(path, False, reason=f"{where}: shape {got.shape} != reference shape {ref.shape}")
    if ref.dtype != got.dtype:
        return LeafResult(path, False, reason=f"{where}: dtype {got.dtype} != reference dtype {ref.dtype}")
    tol = tolerance_for(ref.dtype)
    if tol is None:
        return _compare_exact(ref, got, path, where)
    return _compare_inexact(ref, got, path, where, tol)


def _compare_exact(ref: np.ndarray, got: np.ndarray, path: str, where: str) -> LeafResult:
    bad = ref != got
    if ref.dtype.kind in "biu":
        diff = np.abs(ref.astype(np.float64) - got.astype(np.float64))
    else:
        diff = bad.astype(np.float64)
    abs_err = float(diff.max()) if diff.size else 0.0
    scale = float(np.abs(ref.astype(np.float64)).max()) if ref.size and ref.dtype.kind in "biu" else 1.0
    rel_err = abs_err / scale if scale else (0.0 if abs_err == 0 else float("inf"))
    if bad.any():
        return LeafResult(
            path, False, abs_err, rel_err,
            f"{where}: {int(bad.sum())} of {bad.size} elements differ (exact comparison for {ref.dtype}),"
            f" first at index {_first_index(bad)}: {_num(got[_first_index(bad)])} != {_num(ref[_first_index(bad)])}",
        )
    return LeafResult(path, True, abs_err, rel_err)


def _nan_mismatch(path: str, where: str, r, g, rnan, gnan, rinf, ginf) -> LeafResult:
    extra = gnan & ~rnan
    missing = rnan & ~gnan
    parts = []
    if extra.any():
        parts.append(f"{int(extra.sum())} NaN(s) where the reference has none (first at index {_first_index(extra)})")
    if missing.any():
        parts.append(f"{int(missing.sum())} finite value(s) where the reference has NaN (first at index {_first_index(missing)})")
    finite = ~(rnan | gnan | rinf | ginf)
    abs_err = float(np.abs(r[finite] - g[finite]).max()) if finite.any() else None
    return LeafResult(path, False, abs_err, None,
                      f"{where}: NaN positions differ: " + "; ".join(parts) + f" of {r.size} elements")


def _compare_inexact(ref: np.ndarray, got: np.ndarray, path: str, where: str, tol: tuple[float, float]) -> LeafResult:
    rtol, atol = tol
    wide = np.complex128 if np.iscomplexobj(ref) else np.float64
    r = ref.astype(wide)
    g = got.astype(wide)
    rnan, gnan = np.isnan(r), np.isnan(g)
    rinf, ginf = np.isinf(r), np.isinf(g)
    if (rnan != gnan).any():
        return _nan_mismatch(path, where, r, g, rnan, gnan, rinf, ginf)
    inf_bad = (rinf | ginf) & ~(rnan | gnan) & (r != g)
    if inf_bad.any():
        i = _first_index(inf_bad)
        return LeafResult(path, False, None, None,
                          f"{where}: infinities differ at {int(inf_bad.sum())} element(s), first at index {i}:"
                          f" {_num(got[i])} != reference {_num(ref[i])}")
    finite = ~(rnan | rinf)
    if not finite.any():
        return LeafResult(path, True, 0.0, 0.0)
    rf, gf = r[finite], g[finite]
    diff = np.abs(gf - rf)
    scale = float(np.abs(rf).max())
    abs_err = float(diff.max())
    rel_err = abs_err / scale if scale > 0 else (0.0 if abs_err == 0 else float("inf"))
    atol_here = atol * max(1.0, _rms(rf))
    bad = diff > atol_here + rtol * np.abs(rf)
    if bad.any():
        full_bad = np.zeros(r.shape, bool)
        full_bad[finite] = bad
        i = _first_index(full_bad)
        return LeafResult(
            path, False, abs_err, rel_err,
            f"{where}: {int(bad.sum())} of {r.size} elements outside tolerance |err| <= {atol_here:.3g}"
            f" + {rtol:g} x |ref| (atol={atol:g} x rms|ref|, rtol={rtol:g} for {ref.dtype});"
            f" max abs err {abs_err:.3g}, max rel err {rel_err:.3g};"
            f" first at index {i}: {_num(got[i])} vs reference {_num(ref[i])}",
        )
    return LeafResult(path, True, abs_err, rel_err)


def _rms(values: np.ndarray) -> float:
    """Root-mean-square magnitude (complex values by modulus)."""
    return float(np.sqrt(np.mean(np.abs(values) ** 2)))


def compare_leaves(ref: list[tuple[str, object]], got: list[tuple[str, object]]) -> list[LeafResult]:
    """Compare flattened output pytrees given as ``[(path, array), ...]``."""
    ref_paths = [p for p, _ in ref]
    got_paths = [p for p, _ in got]
    if ref_paths != got_paths:
        return [LeafResult("", False, reason=f"output structure differs: {got_paths} != reference {ref_paths}")]
    return [compare_leaf(a, b, p) for (p, a), (_, b) in zip(ref, got)]


def error_bounds(compared: list[LeafResult]) -> tuple[Optional[float], Optional[float]]:
    """(max abs error, max rel error) over every comparison; both None when a failed comparison
    has no error to measure (shape or dtype differences)."""
    if any(r.abs_err is None and not r.ok for r in compared):
        return None, None
    max_abs = max((r.abs_err for r in compared if r.abs_err is not None), default=0.0)
    max_rel = max((r.rel_err for r in compared if r.rel_err is not None), default=0.0)
    return max_abs, max_rel
