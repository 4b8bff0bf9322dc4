"""Varlen starts (issue 28): `x_ref[pl.ds(cu_seqlens_ref[s] + t * BT, BT)]`, a sequence start read
from a prefix-sum table plus whole chunks in grid indices, becomes a scalar-prefetch gather of
block `cu_seqlens_ref[s] // BT + t` (R6, rewrite.prefetch.windows). That block is right only when
every table entry is a multiple of BT, a fact about data: the fix is unsafe, its message states
the assumption, and plain --apply writes it only after verification on an example. On an example
whose sequences start mid-chunk verification fails and the file stays as it was. The golden pair
(through both interpreters, with the jaxpr check) is scalar_prefetch/varlen_chunk; the refusals
are scalar_prefetch/refuse_varlen_*."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pallas_fix.core.config import Config
from pallas_fix.engine import analyze_source, fix_source
from pallas_fix.frontends.cli.app import main

FIXTURES = Path(__file__).parent / "fixtures"
ALIGNED = FIXTURES / "codemods" / "scalar_prefetch" / "varlen_chunk_before.py"
MID_CHUNK = FIXTURES / "verify" / "varlen_start_mid_chunk.py"


def _plans(source: str, path: str = "k.py"):
    return [f.plan for f in analyze_source(source, path, Config()).findings if f.code == "PF105"]


def test_the_varlen_gather_is_unsafe_and_states_its_assumption():
    plans = _plans(ALIGNED.read_text(), str(ALIGNED))
    assert plans and all(p is not None and p.safety.value == "unsafe" for p in plans), plans
    for p in plans:
        assert "assumes every `cu_seqlens_ref` entry is a multiple of `BT`" in p.description, p.description
        assert "mid-block would read the wrong rows" in p.description, p.description


def test_unsafe_fixes_are_needed_without_verification():
    src = ALIGNED.read_text()
    assert fix_source(src, str(ALIGNED), unsafe=False).source == src
    assert "cu_seqlens_ref[s] // BT + t, 0" in fix_source(src, str(ALIGNED), unsafe=True).source


@pytest.mark.parametrize(
    "start, block",
    [
        ("bos + (i_t + 1) * BT", "cu_seqlens_ref[s] // BT + t + 1"),
        ("bos + i_t * BT + BT", "cu_seqlens_ref[s] // BT + t + 1"),
        ("bos + 2 * i_t * BT", "cu_seqlens_ref[s] // BT + 2 * t"),
        ("bos", "cu_seqlens_ref[s] // BT"),
    ],
)
def test_the_index_map_reads_the_start_in_blocks_plus_the_grid_terms(start, block):
    src = ALIGNED.read_text().replace("bos + i_t * BT", start)
    out = fix_source(src, "k.py", unsafe=True).source
    assert f"({block}, 0)" in out, out


@pytest.mark.parametrize(
    "start, words",
    [
        ("bos + i_t * BT + 3", "plus an offset that is not whole windows"),  # misaligned even for aligned tables
        ("bos - i_t * BT", "plus an offset that is not whole windows"),  # chunks walked backwards
        ("2 * bos + i_t * BT", "windows of neighbouring entries overlap"),  # the entry scaled: not a row start
    ],
)
def test_other_row_starts_are_refused(start, words):
    src = ALIGNED.read_text().replace("bos + i_t * BT", start)
    assert fix_source(src, "k.py", unsafe=True).source == src
    refusals = [f.refusal for f in analyze_source(src, "k.py", Config()).findings if f.code == "PF105"]
    assert refusals and all(r and words in r for r in refusals), refusals


@pytest.mark.interp
def test_a_table_with_mid_chunk_starts_fails_verification_and_nothing_is_written(capsys, tmp_path):
    path = tmp_path / MID_CHUNK.name
    shutil.copy(MID_CHUNK, path)
    try:
        main(["--apply", str(path)])
    except SystemExit:
        pass
    err = capsys.readouterr().err
    assert "mismatch" in err and "its code is unchanged" in err, err
    assert "assumes every `cu_seqlens_ref` entry is a multiple of `BT`" in err, err
    assert path.read_text() == MID_CHUNK.read_text()
