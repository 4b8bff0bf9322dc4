"""Two-level (strip-mined) kernels read through their inner structure (issue 28): a loop walking
sub-tiles of the block a BlockSpec already moves along the grid is refused as the deliberate
strip-mine it is, before any limit of the lift's reading (where the loop body is defined), and
only when the code shows the walk covers that block and the grid moves it."""

from __future__ import annotations

from pathlib import Path

from pallas_fix.core.config import Config
from pallas_fix.engine import analyze_source

FIXTURES = Path(__file__).parent / "fixtures" / "codemods" / "lift_reduction"
WHEN_BODY = FIXTURES / "refuse_two_level_when_body.py"
STRIP = "a deliberate strip-mine"


def _refusals(src: str, config: Config | None = None) -> list[str]:
    findings = analyze_source(src, "k.py", config).findings
    assert findings and all(not f.fixable for f in findings)
    return [f.refusal or "" for f in findings]


def test_loop_in_a_when_body_over_a_moved_block_is_a_strip_mine():
    refusals = _refusals(WHEN_BODY.read_text(encoding="utf-8"))
    assert all(STRIP in r for r in refusals), refusals
    # The message names the ref, the window, the block and the index the grid moves it by.
    assert "`k_ref` in `BK` sub-tiles" in refusals[0]
    assert "(`BK_MAJOR` at block `nxt`)" in refusals[0]


def test_lift_for_memory_leaves_the_screen_to_the_lift():
    refusals = _refusals(WHEN_BODY.read_text(encoding="utf-8"), Config(lift_for_memory=True))
    assert not any(STRIP in r for r in refusals), refusals


def test_a_block_the_grid_does_not_move_is_no_strip_mine():
    src = WHEN_BODY.read_text(encoding="utf-8").replace("        return (nxt, 0)", "        return (0, 0)")
    assert not any(STRIP in r for r in _refusals(src))


def test_a_loop_over_part_of_the_block_is_no_strip_mine():
    # The loop walks half the block: its windows are not the block's sub-tiles end to end.
    src = WHEN_BODY.read_text(encoding="utf-8").replace("bk_major // BK, body", "bk_major // BK // 2, body")
    assert not any(STRIP in r for r in _refusals(src))


def test_an_extent_bound_twice_is_not_read():
    src = WHEN_BODY.read_text(encoding="utf-8").replace(
        "    kv = pl.program_id(1)\n", "    kv = pl.program_id(1)\n    if skip:\n        bk_major = 64\n")
    assert not any(STRIP in r for r in _refusals(src))
