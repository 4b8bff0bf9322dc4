"""Which masks and conditions test the program id a squeezed row moves along
(rewrite.proofs.row_masks): only those may skip a row past its array's end, so only they keep a
row-count check from being written (rewrite.proofs.bounds)."""

from __future__ import annotations

import libcst as cst
import pytest

from pallas_fix.analysis.context import ModuleContext, walk
from pallas_fix.rewrite.proofs.row_masks import row_guarded_access

_KERNEL = """\
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pltriton


def kernel(q_ref, k_ref, o_ref):
    qg, bh = pl.program_id(0), pl.program_id(1)
    b = bh // 4
    MASK_LINE
    o_ref[...] = pltriton.load(k_ref.at[b, pl.ds(qg * 16, 16)], mask=m, other=0.0)
"""


def _line(mask: str, axes=frozenset({1})):
    ctx = ModuleContext(_KERNEL.replace("MASK_LINE", mask))
    kernel = next(n for n in walk(ctx.module) if isinstance(n, cst.FunctionDef))
    return row_guarded_access(ctx, kernel, axes)


@pytest.mark.parametrize("mask, tests_row", [
    ("m = qg * 16 + jnp.arange(16) < 100", False),   # the other axis's block: the window's own dims
    ("m = jnp.arange(16) < 100", False),
    ("m = (qg * 16 + jnp.arange(16) < 100) & (b < 2)", True),   # the row, through `b = bh // 4`
    ("m = jnp.arange(16) < pl.program_id(1)", True),
    ("m = jnp.arange(16) < pl.program_id(i)", True),   # an axis not written as a literal: any
])
def test_only_a_test_of_the_rows_axis_counts(mask: str, tests_row: bool) -> None:
    assert (_line(mask) is not None) == tests_row


def test_a_tuple_assignment_taints_each_name_by_its_own_part() -> None:
    """`qg, bh = pl.program_id(0), pl.program_id(1)`: qg holds axis 0 only."""
    assert _line("m = qg * 16 + jnp.arange(16) < 100", axes=frozenset({0})) is not None
    assert _line("m = qg * 16 + jnp.arange(16) < 100", axes=frozenset({1})) is None
