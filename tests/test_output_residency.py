"""An output spec's written index_map keeps a block resident across a grid axis unless the index
moves on every step of it (rewrite.blocks.blockspecs): `i // 2` gives two steps one block, and a
loop axis added inside them would revisit it (tests/fixtures/codemods/lift_loop/
refuse_output_block_shared_by_folded_steps.py is the kernel)."""

import libcst as cst
import pytest

from pallas_fix.rewrite.blocks.blockspecs import _moves_along


@pytest.mark.parametrize(
    "index, moves",
    [
        ("(i, 0)", True),
        ("(i * 2 + 1, j)", True),
        ("(n - i, 0)", True),
        ("(i // n, i % n, 0)", True),  # a folded grid split back: every step its own block
        ("(i // 2, 0)", False),
        ("(i % 2, 0)", False),
        ("(i // n, i % m)", False),
        ("(ids_ref[i], 0)", False),
        ("(i * 0, j)", False),
        ("(j, 0)", False),
    ],
)
def test_an_index_moves_along_an_axis_only_when_every_step_gets_its_own_block(index, moves) -> None:
    exprs = [e.value for e in cst.parse_expression(index).elements]
    assert _moves_along(exprs, "i") is moves
