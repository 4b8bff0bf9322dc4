"""Every codemod's golden pairs and refusals, one parametrised test per kind of check.

Fixtures: tests/fixtures/codemods/<codemod module>/ (lift_loop/, program_id_blocks/,
lift_reduction/, traced_constant/, scalar_start/, contiguous_window/, static_unroll/, grid_to_loop/, scalar_prefetch/), found by
globbing: every `<name>_before.py` with its `<name>_after.py`, and every `refuse_*.py`
(conventions in tests/pair_harness.py). How a folder is run (`--target gpu-interpret`, unsafe
fixes, the codemod alone, refusal style, which jaxpr check, ...) is its row in
`pair_harness.FAMILIES`. Every pair is checked the same ways: it exercises its codemod; the
rewrite is the golden text; both kernels agree in the interpreters (interp-marked); the jaxpr
says what stays dynamic; a second run changes nothing; LibCST's own runner gives the same text.
Every refusal comes out unchanged, refused for the reason it declares.

Checks that only one codemod has (R2's dimension semantics, GPU interpret mode runs, comments,
unroll limits, ...) stay in test_lift_pairs.py, test_reduce_pairs.py, test_codemods_simple.py and
test_gpu_interpret.py.

BLOCKED pairs (pair_harness.BLOCKED, key `folder/name`) are kernels a codemod should rewrite but does not, or rewrites
wrongly or untidily: their after-file is written by hand (and verified like the others), and only
the golden-text test is a strict xfail naming the bug. Once the bug is fixed that test XPASSes
and fails: regenerate the after-file with the tool, read it, and drop the entry.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import pair_harness as H
from pallas_fix.engine import analyze_source

FAMILIES = H.FAMILIES
PAIRS = H.codemod_pairs()
REFUSALS = H.codemod_refusals()

BLOCKED = H.BLOCKED
BLOCKED_REFUSALS = H.BLOCKED_REFUSALS


def _pid(p: H.Pair) -> str:
    return p.key


def _rid(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


def _golden_params():
    return [
        pytest.param(p, id=_pid(p), marks=[pytest.mark.xfail(strict=True, reason=BLOCKED[p.key])] if p.key in BLOCKED else [])
        for p in PAIRS
    ]


def _refusal_params():
    out = []
    for path in REFUSALS:
        reason = BLOCKED_REFUSALS.get(_rid(path))
        out.append(pytest.param(path, id=_rid(path), marks=[pytest.mark.xfail(strict=True, reason=reason)] if reason else []))
    return out


PAIR_PARAMS = [pytest.param(p, id=_pid(p)) for p in PAIRS]
INTERP_PARAMS = [pytest.param(p, id=_pid(p)) for p in PAIRS if H.family_of(p).interpreted(p)]


@pytest.fixture(autouse=True, scope="module")
def _start_interpreter_runs(request):
    # Interpreter runs are worker processes: start them first so that they overlap with the
    # in-process tests.
    H.VERDICTS.start(request.session)


# =========================================================================== the fixture set


def test_every_codemod_has_a_fixture_folder_and_every_folder_a_codemod():
    folders = {p.name for p in H.CODEMOD_FIXTURES.iterdir() if p.is_dir() and not p.name.startswith(("_", "."))}
    assert folders == set(FAMILIES), (sorted(folders - set(FAMILIES)), sorted(set(FAMILIES) - folders))
    strays = sorted(p.name for p in H.CODEMOD_FIXTURES.iterdir() if p.is_file())
    assert not strays, f"fixtures outside a codemod folder: {strays}"
    modules = {p.stem for p in (H.REPO / "codemods").glob("*.py") if not p.name.startswith("_")}
    assert set(FAMILIES) <= modules, sorted(set(FAMILIES) - modules)


@pytest.mark.parametrize("folder", sorted(FAMILIES))
def test_fixture_folder_is_complete(folder):
    fam = FAMILIES[folder]
    if fam.refusal_style == "declared":
        H.check_fixture_set(fam.path, min_pairs=fam.min_pairs, min_refusals=fam.min_refusals,
                            blocked=[k.split("/", 1)[1] for k in BLOCKED if k.startswith(folder + "/")])
        return
    found = fam.pairs()
    safe = [p for p in found if not fam.needs_unsafe(p.name)]
    assert len(safe) >= fam.min_pairs, f"{len(safe)} safe pairs in {folder}, want at least {fam.min_pairs}"
    assert all(p.after.exists() for p in found), [p.after.name for p in found if not p.after.exists()]
    assert set(fam.unsafe_pairs) <= {p.name for p in found}, "unsafe_pairs names a missing pair"
    refs = fam.refusals()
    assert len(refs) >= fam.min_refusals
    assert all(H.refuse_markers(r.read_text(encoding="utf-8")) for r in refs), "a refusal marks no `# refuse:` line"


@pytest.mark.parametrize("pair", PAIR_PARAMS)
def test_pair_exercises_its_codemod(pair):
    fam = H.family_of(pair)
    analysis = analyze_source(pair.before_source, str(pair.before), fam.config(pair.name))
    codes = {f.code for f in analysis.findings}
    assert codes & fam.codes, codes
    assert fam.codemod in {p.codemod for p in analysis.plans}, [p.codemod for p in analysis.plans]


# =========================================================================== (1) golden text


@pytest.mark.parametrize("pair", _golden_params())
def test_rewrite_matches_golden(pair):
    fam = H.family_of(pair)
    H.check_golden(pair, **fam.fix_kwargs(pair.name))
    if fam.applied_within is not None:
        applied = H.rewrite(pair.before_source, pair.before, **fam.fix_kwargs(pair.name)).applied
        assert applied and all(a.split(" ", 1)[0].rstrip(":") in fam.applied_within for a in applied), applied


# =========================================================================== (2) interpreters


@pytest.mark.interp
@pytest.mark.parametrize("pair", INTERP_PARAMS)
def test_pair_verified_in_the_interpreters(request, pair):
    fam = H.family_of(pair)
    verdicts = H.VERDICTS.get(request, pair)
    assert verdicts, "no verdict"
    for v in verdicts:
        assert v.status == "verified", f"{v.status}: {v.message}"
        if fam.oracle not in ("fewer", "int_starts", "windows"):  # those families declare no `remaining`
            if v.dynamic_slices_after is not None:
                assert v.dynamic_slices_after == pair.remaining, (v.dynamic_slices_before, v.dynamic_slices_after)
        if fam.gpu_interpret:
            assert "gpu-interpret" in v.interpreters, v.interpreters
    if fam.one_verdict:
        assert len(verdicts) == 1, [v.status for v in verdicts]


# =========================================================================== (3) jaxpr oracle


@pytest.mark.parametrize("pair", [p for p in PAIR_PARAMS if H.family_of(p.values[0]).oracle])
def test_oracle_says_what_stays_dynamic(pair):
    fam = H.family_of(pair)
    if fam.oracle == "declared":
        H.check_oracle_counts(pair)
    else:
        H.check_oracle_static(pair, fam.oracle)


# =========================================================================== (4) fixed point


@pytest.mark.parametrize("pair", PAIR_PARAMS)
def test_second_run_changes_nothing(pair):
    fam = H.family_of(pair)
    # A codemod run alone gets unsafe fixes on the second run: nothing, not even an unsafe fix,
    # is left for it.
    kwargs = fam.fix_kwargs(pair.name, unsafe=True if fam.only else None)
    H.check_idempotent(pair, **kwargs)
    assert H.rewrite(pair.after_source, pair.after, **kwargs).applied == []


# =========================================================================== refusals


@pytest.mark.parametrize("path", _refusal_params())
def test_refusal_leaves_the_file_unchanged(path):
    fam = H.family_of(path)
    if fam.refusal_style == "declared":
        H.check_refusal(path, **fam.fix_kwargs(path.stem))
    else:
        H.check_marked_refusal(path, fam)


@pytest.mark.parametrize("path", [pytest.param(p, id=_rid(p)) for p in REFUSALS if H.family_of(p).real_refusals])
def test_refusal_fixture_is_a_real_kernel(path):
    H.check_real_kernel(path)


# =========================================================================== LibCST's own runner


@pytest.mark.parametrize("folder", sorted(FAMILIES))
def test_libcst_runner_gives_the_golden_text(folder, tmp_path: Path):
    """`python -m libcst.tool codemod -x pallas_fix.frontends.libcst_commands.<Class>` writes the
    golden text (the runner reads [tool.pallas-fix] from the nearest pyproject.toml: opting in to
    unsafe fixes there is how a LibCST user gets R2); where the family says so, it leaves a
    refusal alone and `pallas-fix --apply --no-verify --select CODE` writes the same text."""
    fam = FAMILIES[folder]
    found = fam.pairs()
    chosen = (
        [p for p in found if not fam.needs_unsafe(p.name)]
        if fam.libcst_pairs is None
        else [next(p for p in found if p.name == n) for n in fam.libcst_pairs]
    )
    assert chosen
    files = [p.before for p in chosen]
    refusal = fam.refusals()[0] if fam.libcst_refusal else None
    if refusal is not None:
        files.append(refusal)
    produced = H.run_libcst_codemod_files(
        f"pallas_fix.frontends.libcst_commands.{fam.libcst}", files, tmp_path / "libcst",
        pyproject="[tool.pallas-fix]\nunsafe-fixes = true\n" if fam.unsafe else "",
    )
    for p in chosen:
        assert produced[p.before.name] == p.after_source, H.text_diff(p.after_source, produced[p.before.name], p.name)
    if refusal is not None:
        assert produced[refusal.name] == refusal.read_text(encoding="utf-8")
    if fam.cli_select:
        via_cli = tmp_path / "cli"
        via_cli.mkdir()
        for p in chosen:
            (via_cli / p.before.name).write_text(p.before_source, encoding="utf-8")
        run = subprocess.run(
            [sys.executable, "-m", "pallas_fix", "--apply", "--no-verify", "--select", fam.cli_select,
             *[str(via_cli / p.before.name) for p in chosen]],
            capture_output=True, text=True, timeout=300, cwd=tmp_path,
        )
        assert run.returncode in (0, 1), run.stderr[-2000:]
        for p in chosen:
            assert (via_cli / p.before.name).read_text(encoding="utf-8") == p.after_source, p.name
