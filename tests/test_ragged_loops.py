"""Loops whose last window may run past the end (`pl.loop(0, n, step=BS)`, a `pl.cdiv` trip
count) lift as an unsafe fix (rewrite.proofs.ragged_blocks): exact when BS divides n, and written only
once verification on an example passes. On a ragged example a kernel that mixes the rows of a
block (a mean over the block) fails that verification, and the file is left as it was."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pallas_fix.core.config import Config
from pallas_fix.engine import analyze_source
from pallas_fix.frontends.cli.app import main

FIXTURES = Path(__file__).parent / "fixtures"
BLOCK_MEAN = FIXTURES / "verify" / "ragged_loop_block_mean.py"
STEPPED = FIXTURES / "codemods" / "lift_loop" / "stepped_loop_unsafe_before.py"
POSITION = FIXTURES / "codemods" / "lift_loop" / "refuse_stepped_loop_reads_position.py"


def _findings(path: Path):
    return analyze_source(path.read_text(), str(path), Config()).findings


@pytest.mark.parametrize("path", [BLOCK_MEAN, STEPPED], ids=lambda p: p.stem)
def test_a_ragged_trip_count_is_an_unsafe_fix_that_states_its_condition(path: Path):
    findings = [f for f in _findings(path) if f.code == "PF101"]
    assert findings and all(f.refusal is None for f in findings), [f.refusal for f in findings]
    plans = [f.plan for f in findings]
    assert all(p is not None and p.safety.value == "unsafe" for p in plans), plans
    assert all("ends in a partial block" in p.description and "divides" in p.description for p in plans)


def test_a_ragged_loop_whose_index_is_read_outside_its_windows_is_refused():
    refusals = [f.refusal for f in _findings(POSITION) if f.code == "PF101"]
    assert refusals and all(r and "reads its position" in r for r in refusals), refusals


@pytest.mark.interp
def test_verification_on_the_ragged_example_keeps_a_block_mean_kernel_unchanged(capsys, tmp_path):
    path = tmp_path / BLOCK_MEAN.name
    shutil.copy(BLOCK_MEAN, path)
    try:
        main(["--apply", str(path)])
    except SystemExit:
        pass
    err = capsys.readouterr().err
    assert "mismatch" in err and "its code is unchanged" in err, err
    assert path.read_text() == BLOCK_MEAN.read_text()
