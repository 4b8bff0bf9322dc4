"""The value model's reads at a position: which binding of a reassigned name a window start sees
(analysis.values.reaching) and loop carries that step with the index (analysis.loops.induction).

Each kernel slices `x_ref` once with a start built from a loop; the test reads the block index
the affine reading gives that window (None: not provably a block, so pallas-fix refuses)."""

from __future__ import annotations

import textwrap

import pytest

from pallas_fix.analysis.loops.windows import window_of
from pallas_fix.engine import analyze_source

HEADER = """
import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl

BS = 8
FLAG = True
"""


def _block(body: str, carry: str = "0"):
    """(multiplier of the loop's iteration number, constant block offset) of the window on
    `x_ref`, or None when the start is not read as a block."""
    src = (
        HEADER
        + "\n\ndef kernel(x_ref, s_ref, o_ref):\n    def body(i, c):\n"
        + textwrap.indent(body, " " * 8)
        + f"\n\n    lax.fori_loop(0, 4, body, {carry})\n\n\n"
        + "def f(x, s):\n    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8, 128), x.dtype))(x, s)\n"
    )
    uses = [u for u in analyze_source(src, "k.py").analysis.uses if u.ref_name == "x_ref"]
    assert len(uses) == 1, [u.ref_name for u in uses]
    block = window_of(uses[0]).block
    if block is None:
        return None
    assert len(block.atoms) <= 1
    return (next(iter(block.atoms.values()), 0), block.offset)


@pytest.mark.parametrize(
    "body, expected",
    [
        # each read sees the binding just before it
        ("b = i\nb = b * BS\no_ref[...] = x_ref[pl.ds(b, BS)]\nreturn c", (1, 0)),
        ("b = i * BS\nb = pl.multiple_of(b, BS)\no_ref[...] = x_ref[pl.ds(b, BS)]\nreturn c", (1, 0)),
        ("r = i\nr += 1\no_ref[...] = x_ref[pl.ds(r * BS, BS)]\nreturn c", (1, 1)),
        ("s = i\ns *= BS\no_ref[...] = x_ref[pl.ds(s, BS)]\nreturn c", (1, 0)),
        # a rebinding after the access is not the one it reads
        ("s = i * BS\no_ref[...] = x_ref[pl.ds(s, BS)]\ns = s + BS\nreturn c", (1, 0)),
        # a static `if` counts as the arm its known test takes
        ("if FLAG:\n    s = (i + 1) * BS\nelse:\n    s = i * BS\no_ref[...] = x_ref[pl.ds(s, BS)]\nreturn c", (1, 1)),
        ("if not FLAG:\n    s = (i + 1) * BS\nelse:\n    s = i * BS\no_ref[...] = x_ref[pl.ds(s, BS)]\nreturn c", (1, 0)),
        ("s = i * BS\nif BS > 4:\n    s = s + BS\no_ref[...] = x_ref[pl.ds(s, BS)]\nreturn c", (1, 1)),
        # the loop index rebound in the body: the read sees the rebinding
        ("i = i + 1\no_ref[...] = x_ref[pl.ds(i * BS, BS)]\nreturn c", (1, 1)),
    ],
)
def test_a_read_sees_the_binding_that_reaches_it(body, expected):
    assert _block(body) == expected


@pytest.mark.parametrize(
    "body",
    [
        # rebound inside a Python loop around the read: each pass sees another value
        "s = i * BS\nfor _ in range(2):\n    o_ref[...] = x_ref[pl.ds(s, BS)]\n    s = s + BS\nreturn c",
        # an `if` on a value nobody knows here
        "s = i * BS\nif s_ref[0] > 0:\n    s = s + BS\no_ref[...] = x_ref[pl.ds(s, BS)]\nreturn c",
        # a walrus beside the read decides by evaluation order
        "s = i * BS\no_ref[...] = x_ref[pl.ds((s := s + BS), BS)]\nreturn c",
    ],
)
def test_an_undecided_binding_is_no_block(body):
    assert _block(body) is None


def test_a_nested_function_sees_a_later_rebinding():
    # `read` runs when it is called, after `s` is rebound: its read is not `i * BS`.
    body = "s = i * BS\ndef read():\n    return x_ref[pl.ds(s, BS)]\ns = s + BS\no_ref[...] = read()\nreturn c"
    assert _block(body) is None


@pytest.mark.parametrize(
    "body, carry, expected",
    [
        ("o_ref[...] = x_ref[pl.ds(c, BS)]\nreturn c + BS", "0", (1, 0)),
        ("o_ref[...] = x_ref[pl.ds(c, BS)]\nreturn BS + c", "2 * BS", (1, 2)),
        ("o_ref[...] = x_ref[pl.ds(c, BS)]\nreturn c + BS", "jnp.int32(0)", (1, 0)),
        # the read after `c += BS` is one step further on
        ("c += BS\no_ref[...] = x_ref[pl.ds(c, BS)]\nreturn c", "0", (1, 1)),
        ("acc, off = c\nacc = acc + x_ref[pl.ds(off, BS)]\nreturn acc, off + BS", "(jnp.zeros((BS,)), 0)", (1, 0)),
    ],
)
def test_a_carry_stepping_with_the_loop_reads_as_its_index(body, carry, expected):
    assert _block(body, carry) == expected


@pytest.mark.parametrize(
    "body, carry",
    [
        ("o_ref[...] = x_ref[pl.ds(c, BS)]\nreturn c + s_ref[0]", "0"),  # a step loaded from memory
        ("o_ref[...] = x_ref[pl.ds(c, BS)]\nreturn 2 * c", "BS"),  # not a fixed step
        ("o_ref[...] = x_ref[pl.ds(c, BS)]\nreturn c + i", "0"),  # a step that changes with the index
        ("o_ref[...] = x_ref[pl.ds(c, BS)]\nreturn c + BS", "s_ref[0]"),  # a traced start
    ],
)
def test_a_carry_that_does_not_step_by_a_static_amount_is_no_block(body, carry):
    assert _block(body, carry) is None
