"""Synthesised candidates in verification: the cache by file content, what verification does with
cached choices, and (``interp``) the worker keeping the first candidate the original runs on and
verifying with it. Every test points ``PALLAS_FIX_CACHE_DIR`` at a temp dir."""

from __future__ import annotations

from pathlib import Path

import pytest

from pallas_fix.core.examples import parse_example
from pallas_fix.verify.examples import cache as example_cache
from pallas_fix.verify.examples import synthesised as synth
from pallas_fix.verify.examples.candidates import ExampleCandidates, NoCandidateRan, settled_from_cache, store_choices
from pallas_fix.verify.examples.sources import collect_examples
from pallas_fix.verify.runner import Verdict, format_verdict, verify_sources

FIX = Path(__file__).parent / "fixtures" / "synthesis"


def _line_of(path: Path, text: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if line.startswith(text))


@pytest.fixture(autouse=True)
def _cache_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("PALLAS_FIX_CACHE_DIR", str(tmp_path / "cache"))


# =========================================================================== cache and sources


def _settle(groups, index):
    """What the worker reports after trying: candidate ``index`` kept (None: none ran)."""
    choices = [{"index": index, "outcomes": [{"example": g.candidates[0].text, "outcome": "error", "message": "no"}]}
               for g in groups]
    store_choices(groups, choices)


def test_synthesis_hands_candidates_to_verification_then_reads_the_cache(tmp_path):
    source = (FIX / "main_block_matmul.py").read_text()
    first = synth.synthesised_examples("a/m.py", source)
    assert [type(g) for g in first] == [ExampleCandidates] and first[0].entry == "matmul"
    assert first[0].candidates[0].text == "matmul(f32[64, 256], f32[256, 128], bk=128)"  # the __main__ call
    assert not list((tmp_path / "cache").glob("**/*.json"))  # nothing tried yet, nothing cached
    _settle(first, 1)
    again = synth.synthesised_examples("b/m.py", source)
    assert [e.text for e in again] == [first[0].candidates[1].text]
    line = _line_of(FIX / "main_block_matmul.py", "def matmul(")
    assert again[0].origin == f"synthesised from the code of matmul, b/m.py:{line}"
    assert [type(g) for g in synth.synthesised_examples("m.py", source + "\n# edited\n")] == [ExampleCandidates]


def test_the_cache_key_follows_content_and_jax_version(monkeypatch):
    key = example_cache.cache_key("x = 1\n")
    assert example_cache.cache_key("x = 2\n") != key
    monkeypatch.setattr(example_cache, "jax_version", lambda: "0.0.0")
    assert example_cache.cache_key("x = 1\n") != key


def test_candidates_not_all_tried_are_not_cached():
    source = (FIX / "two_wrappers_rownorm.py").read_text()
    groups = synth.synthesised_examples("w.py", source)
    assert len(groups) == 3
    store_choices(groups, [{"index": 0, "outcomes": []}, None, {"index": 0, "outcomes": []}])  # the worker stopped
    store_choices(groups[:2], [{"index": 0, "outcomes": []}] * 2)  # a job with two of the file's three entries
    assert all(isinstance(g, ExampleCandidates) for g in synth.synthesised_examples("w.py", source))
    store_choices(groups, [{"index": 0, "outcomes": []}, {"index": None, "outcomes": []}, {"index": 1, "outcomes": []}])
    cached = synth.synthesised_examples("w.py", source)
    assert [type(e) for e in cached] == [type(groups[0].candidates[0]), NoCandidateRan, type(groups[0].candidates[0])]
    assert [cached[0].text, cached[2].text] == [groups[0].candidates[0].text, groups[2].candidates[1].text]


def test_settled_candidates_become_their_example_or_say_none_ran():
    source = (FIX / "two_wrappers_rownorm.py").read_text()
    groups = synth.synthesised_examples("w.py", source)
    assert settled_from_cache(groups) == groups
    _settle(groups[:1] + groups[2:], 0)  # does not cache: the middle entry was not tried
    _settle(groups, None)
    settled = settled_from_cache(groups)
    assert [type(e) for e in settled] == [NoCandidateRan] * 3
    assert settled[0].message.startswith("not verified: the original ran on none of the 1 example call(s) "
                                         "synthesised for scale_rows_small (first: scale_rows_small(")


def test_an_entry_the_cache_says_none_ran_is_unverified_without_a_worker(monkeypatch):
    source = (FIX / "main_block_matmul.py").read_text()
    groups = synth.synthesised_examples("m.py", source)
    _settle(groups, None)
    monkeypatch.setattr("pallas_fix.verify.runner._run_job", lambda *a, **k: pytest.fail("started a worker"))
    [v] = verify_sources(source, source, groups, path="m.py")
    assert v.status == "unverified" and v.message.startswith("not verified: the original ran on none of the")


def _none_ran_record(group, path: str) -> dict:
    """The worker's verdict for a group none of whose candidates ran, as it writes it."""
    outcomes = [{"example": c.text, "outcome": "error", "message": f"TypeError: cannot reshape (at {path}:37)"}
                for c in group.candidates]
    return {"type": "verdict", "index": 0, "entry": group.entry, "status": "unverified", "message": "worker's own words",
            "details": {"example": "", "candidate": {"index": None, "outcomes": outcomes}, "origin": None}}


def test_a_run_that_finds_no_example_says_the_same_fresh_cached_and_from_another_directory(monkeypatch):
    # Issue 25: the first run said "the original ran on none of ...", a later (cached) run and a
    # directory run "no example call (add ...)". Each now says what the first run said, naming its
    # own path, and why the __main__ call gave nothing.
    from pallas_fix.verify import runner, worker_process

    source = (FIX / "main_block_unread_layernorm.py").read_text()
    [group] = synth.synthesised_examples("ln.py", source)
    assert "passes `x` (bound on line" in group.note
    monkeypatch.setattr(worker_process, "_run_worker", lambda *a, **k: (False, 0))
    monkeypatch.setattr(worker_process, "_read_records", lambda out: [_none_ran_record(group, "ln.py")])
    [fresh] = verify_sources(source, source, [group], path="ln.py")
    assert fresh.status == "unverified" and fresh.message.startswith(
        "not verified: the original ran on none of the 2 example call(s) synthesised for layernorm (first: ")
    assert "the __main__ block's call of layernorm (ln.py:" in fresh.message
    assert "`pallas-fix record -- python ln.py`" in fresh.message and "(at ln.py:37)" in fresh.message
    monkeypatch.setattr(runner, "_run_job", lambda *a, **k: pytest.fail("started a worker"))
    [cached] = synth.synthesised_examples("ln.py", source)  # what --apply and a second verify get
    assert isinstance(cached, NoCandidateRan) and cached.message == fresh.message
    [again] = verify_sources(source, source, [cached], path="ln.py")
    assert again.message == fresh.message
    [moved] = synth.synthesised_examples("dir/ln.py", source)
    assert moved.message == fresh.message.replace("ln.py", "dir/ln.py")


def test_without_any_example_verify_suggests_the_files_own_entry():
    # Not `matmul(f32[256, 512], f32[512, 256])` whatever the file: its entry, with shapes from its
    # __main__ block (here followed through `* 3 + 1`).
    source = (Path(__file__).parent / "fixtures" / "synthesis" / "main_block_layernorm.py").read_text()
    [v] = verify_sources(source, source, [], path="ln.py")
    assert v.status == "unverified"
    assert "add `# pallas-fix: example layernorm(f32[1024, 512], f32[512], f32[512])`" in v.message, v.message
    assert "matmul" not in v.message


def test_collect_examples_synthesises_last_and_only_when_asked(tmp_path):
    path = tmp_path / "m.py"
    path.write_text((FIX / "main_block_matmul.py").read_text())
    assert collect_examples(path, pyproject=False) == []
    found = collect_examples(path, pyproject=False, synthesise=True)
    assert [type(e) for e in found] == [ExampleCandidates]
    assert found[0].origin.startswith("synthesised from the __main__ block, ")
    path.write_text("# pallas-fix: example matmul(f32[64, 128], f32[128, 64])\n" + path.read_text())
    assert [e.origin for e in collect_examples(path, pyproject=False, synthesise=True)] == [f"{path}:1"]


def test_the_verdict_line_says_where_the_example_came_from():
    v = Verdict(entry="matmul", status="verified", interpreters=["interpret"], dynamic_slices_before=2,
                dynamic_slices_after=0, max_abs_err=0.0, example="matmul(f32[128, 256], f32[256, 128])",
                origin="synthesised from the __main__ block, k.py:40")
    assert format_verdict(v) == ("verified matmul: 2 dynamic slices -> 0, max abs err 0.0 (interpret)"
                                 " — on matmul(f32[128, 256], f32[256, 128]), synthesised from the __main__ block, k.py:40")
    v.origin = "k.py:3"
    assert format_verdict(v).endswith("— on matmul(f32[128, 256], f32[256, 128]), from k.py:3")


# =========================================================================== trying them (worker)


@pytest.mark.interp
def test_the_worker_keeps_the_first_candidate_the_original_runs_on_and_verifies_with_it(tmp_path):
    source = (FIX / "main_block_matmul.py").read_text()
    candidates = tuple(parse_example(t, origin=f"synthesised from test {i}") for i, t in enumerate((
        "matmul(f32[256], f32[256, 128])",  # `m, k = a_ref.shape` fails on a vector
        "matmul(f32[64, 256], f32[256, 128], bk=128)",
        "matmul(f32[128, 128], f32[128, 128])",  # never tried: the entry is settled
    )))
    group = ExampleCandidates("matmul", candidates, example_cache.cache_key(source), "m.py", 1)
    [v] = verify_sources(source, source, [group], path="m.py", seeds=(0, 1), tpu_interpret=False)
    assert v.status == "verified", v.message
    assert (v.example, v.origin) == (candidates[1].text, "synthesised from test 1")
    assert [o["outcome"] for o in v.details["candidate"]["outcomes"]] == ["error", "ok"]
    assert v.details["timings"]["reference"] < v.details["timings"]["candidates"]  # seed 0 was not run again
    assert [e.text for e in settled_from_cache([group])] == [candidates[1].text]  # cached


@pytest.mark.interp
def test_candidates_of_an_original_that_does_not_import_are_unverified_and_not_cached():
    source = (FIX / "main_block_matmul.py").read_text() + "\nraise RuntimeError('no import')\n"
    groups = synth.synthesised_examples("m.py", source)
    [v] = verify_sources(source, source, groups, path="m.py", seeds=(0,))
    assert v.status == "unverified" and "importing the original source failed" in v.message, v.message
    assert settled_from_cache(groups) == groups  # tried again next time


@pytest.mark.interp
def test_synthesis_finds_an_example_the_original_runs_on_for_every_entry():
    for name, path in (("two_wrappers_rownorm.py", "w.py"), ("code_only_gather.py", "g.py")):
        source = (FIX / name).read_text()
        verify_sources(source, source, synth.synthesised_examples(path, source), path=path, seeds=(0,),
                       tpu_interpret=False, backend_seeds=1)
    found = synth.synthesised_examples("w.py", (FIX / "two_wrappers_rownorm.py").read_text())
    assert [e.entry for e in found] == ["scale_rows_small", "scale_rows_large", "scale_rows_bf16"]
    gathered = synth.synthesised_examples("g.py", (FIX / "code_only_gather.py").read_text())
    assert [e.text for e in gathered] == ["gather_blocks(f32[256, 256], i32[8] in [0, 8))"]


@pytest.mark.interp
def test_the_worker_draws_ranged_values_inside_the_range():
    from pallas_fix.verify.worker.calls import Call

    ex = parse_example("f(i32[64] in [2, 5), f32[16] in [-0.5, 0.5))")
    for seed in range(3):
        table, floats = Call(ex).inputs(seed)
        assert table.dtype.name == "int32" and table.min() >= 2 and table.max() <= 4 and len(set(table.tolist())) == 3
        assert floats.min() >= -0.5 and floats.max() < 0.5


@pytest.mark.interp
def test_verify_without_an_example_comment_says_the_example_was_synthesised(tmp_path, capsys):
    from pallas_fix.frontends.cli.app import main

    path = tmp_path / "m.py"
    path.write_text((FIX / "main_block_matmul.py").read_text())
    with pytest.raises(SystemExit) as info:
        main(["verify", "--unsafe-fixes", str(path)])
    out = capsys.readouterr().out
    assert info.value.code in (0, None), out
    assert "— on matmul(f32[64, 256], f32[256, 128], bk=128), synthesised from the __main__ block" in out
