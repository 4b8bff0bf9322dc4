"""A dynamic window in a TPU kernel that Mosaic cannot prove aligned: it will not compile on a TPU.

What it detects: in a TPU kernel (pltpu compiler params, scratch or import), a `pl.ds(start,
size)` window on one of a ref's last two dims whose start is an affine function of loop indices
and program ids whose integer coefficients and offset have no common factor of the tile: 8 rows
on the second-to-last dim (32-bit; 16-bit dtypes pack 16, 8-bit 32) or 128 lanes on the last.
`pl.ds(pl.multiple_of(i * 4, 4), 4)` rows, `pl.ds(j * 64, 64)` columns, a start carried through a
loop (`off + stride`). A `pl.multiple_of` hint of a multiple of the tile counts as proof, as it
does for Mosaic. Windows whose start has a symbolic factor (`i * bs`) or whose size is not a
static number above 1, refs accessed through `.at[...]`, and calls that place operands in SMEM,
ANY or HBM are not judged.

Why it matters: interpret mode runs such a window, but compiled on a TPU the kernel fails with
`MosaicError ... E2003: CompileTimeMosaicUnprovenMemoryAccessAlignment: cannot statically prove
that index in dimension 0 is a multiple of 8` (measured on a TPU v5e, jax 0.10.2). The original
kernel does not compile on TPU, whatever pallas-fix does with it; a lift of the loop would give
the ref blocks of the same size, which Mosaic's tiling rule rejects too.

Example:
    def body(i, c):
        o_ref[pl.ds(i * 4, 4), :] = x_ref[pl.ds(pl.multiple_of(i * 4, 4), 4), :] * 2.0  # PF302
        return c

What to do: walk windows of 8 rows (a multiple of 128 columns): `pl.ds(pl.multiple_of(i * 8, 8),
8)`, or larger; narrow row windows of 16-bit data need 16. A window that must stay small can be
read from an aligned window that holds it (`x_ref[pl.ds(pl.multiple_of(i // 2 * 8, 8), 8), :]`
and a static slice of the value).

Fix safety: no automatic fix; reported by the static check for TPU kernels.
"""

from __future__ import annotations

import math
from typing import Optional

import libcst as cst

from pallas_fix.analysis.context import walk
from pallas_fix.analysis.loops.windows import window_of
from pallas_fix.analysis.result import Analysis
from pallas_fix.core import names as N
from pallas_fix.core.model import Backend, Finding, IndexUse
from pallas_fix.rules.rule import claims_no_index, make_rule

CODE = "PF302"
_TILES = {-1: (128, "lanes", "a multiple of 128 columns"), -2: (8, "rows", "8 rows (16 for 16-bit data, 32 for 8-bit)")}
_PLACED = ("SMEM", "ANY", "HBM", "memory_space")


def window_findings(analysis: Analysis) -> list[Finding]:
    """PF302 for every window of a TPU kernel Mosaic cannot prove aligned (module docstring)."""
    if analysis.ctx is None:
        return []
    out = []
    for use in analysis.uses:
        message = _unaligned(analysis, use)
        if message is not None:
            out.append(Finding(code=CODE, message=message, path=analysis.path, span=use.span,
                               provenance=use.provenance.description, origin=use.provenance.origin.value,
                               fixable=False, refusal=f"no automatic fix; see `pallas-fix explain {CODE}`",
                               severity=RULE.severity, kernel=use.kernel_site.kernel_name if use.kernel_site else None))
    return out


def _unaligned(analysis: Analysis, use: IndexUse) -> Optional[str]:
    site = use.kernel_site
    if (use.kind != "ds" or use.via_at or site is None or site.backend is not Backend.TPU or site.kernel is None
            or not _inside(analysis, use.function, site.kernel) or any(p in analysis.ctx.code(site.call) for p in _PLACED)):
        return None
    rank = _rank(site.kernel, use.ref_name)
    if rank is None or use.dim < rank - 2 or len(use.subscript.slice) != rank or _size(use) in (None, 1):
        return None
    tile, unit, want = _TILES[use.dim - rank]
    divisor = _divisor(analysis, use)
    if divisor is None or divisor % tile == 0:
        return None
    start = analysis.ctx.code(use.start)
    only = f" (only of {divisor})" if divisor > 1 else ""
    return (f"`{use.ref_name}` is accessed at a window starting at `{start}`, which Mosaic cannot prove a multiple of"
            f" {tile} {unit}{only}: compiled on a TPU it rejects the kernel (E2003"
            f" CompileTimeMosaicUnprovenMemoryAccessAlignment); interpret mode runs it. Use windows of {want}")


def _size(use: IndexUse) -> Optional[int]:
    """The window's static size; single rows or columns (`pl.ds(i, 1)`) are not judged."""
    return use.env.static_int(use.size) if use.size is not None else None  # type: ignore[attr-defined]


def _inside(analysis: Analysis, fn: cst.FunctionDef, kernel: cst.FunctionDef) -> bool:
    """`fn` is the kernel or a function defined in it (a loop body): refs keep their names there."""
    return fn is kernel or any(a is kernel for a in analysis.ctx.ancestors(fn))


def _divisor(analysis: Analysis, use: IndexUse) -> Optional[int]:
    """What the start is provably a multiple of: a `pl.multiple_of` hint, else the gcd of its
    affine coefficients and offset; None when a factor is symbolic or the start is not affine."""
    start = use.start
    if isinstance(start, cst.Call) and analysis.ctx.imports.is_(start.func, N.MULTIPLE_OF) and len(start.args) == 2:
        hint = use.env.static_int(start.args[1].value)  # type: ignore[attr-defined]
        if hint is not None and hint > 0:
            return hint
    affine = window_of(use).start
    if affine is None or not affine.terms:
        return None
    coeffs = [*affine.terms.values(), *affine.const]
    if any(c.factors for c in coeffs):
        return None
    terms = [c.mult for c in affine.terms.values()] + [sum(c.mult for c in affine.const)]
    return math.gcd(*terms) or None


def _rank(kernel: cst.FunctionDef, ref: str) -> Optional[int]:
    """The ref's rank, when every access in the kernel spells the same number (>= 2) of indices
    and none uses `...`."""
    counts = set()
    for node in walk(kernel):
        if isinstance(node, cst.Subscript) and isinstance(node.value, cst.Name) and node.value.value == ref:
            if any(isinstance(e.slice, cst.Index) and isinstance(e.slice.value, cst.Ellipsis) for e in node.slice):
                return None
            counts.add(len(node.slice))
    return counts.pop() if len(counts) == 1 and min(counts) >= 2 else None


_HEAD = """\
import jax
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


"""

INVALID = (
    _HEAD + """\
def kernel(x_ref, o_ref):
    def body(i, c):
        o_ref[pl.ds(i * 8, 8), :] = x_ref[pl.ds(pl.multiple_of(i * 4, 4), 8), :]  # expect: PF302
        return c

    lax.fori_loop(0, 8, body, 0)


def run(x):
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((64, 128), x.dtype),
                          compiler_params=pltpu.CompilerParams())(x)
""",
    _HEAD + """\
def kernel(x_ref, o_ref):
    def body(j, c):
        o_ref[:, pl.ds(j * 64, 64)] = x_ref[:, pl.ds(j * 64, 64)] + 1.0  # expect: PF302
        return c

    lax.fori_loop(0, 4, body, 0)


def run(x):
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          compiler_params=pltpu.CompilerParams())(x)
""",
)

FIX = (("x_ref[pl.ds(pl.multiple_of(i * 4, 4), 8), :]  # expect: PF302", "x_ref[pl.ds(pl.multiple_of(i * 8, 8), 8), :]"),)

VALID = (
    _HEAD + """\
def kernel(x_ref, o_ref):  # a leading dim of a 3-d ref is not tiled
    def body(i, c):
        o_ref[pl.ds(i * 4, 4), :, :] = x_ref[pl.ds(i * 4, 4), :, :]
        return c

    lax.fori_loop(0, 2, body, 0)


def run(x):
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          compiler_params=pltpu.CompilerParams())(x)
""",
)

RULE = make_rule(__doc__, CODE, "tpu-unaligned-window", claims_no_index, invalid=INVALID, valid=VALID, fix=FIX)
