"""What a new user reads: the summary counts what --apply will do, unknown rule codes are usage
errors, a syntax error names its place once."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from pallas_fix.frontends.cli.app import main

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "tiled_kernels.py"


def run(capsys, *args) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main([str(a) for a in args])
    out, err = capsys.readouterr()
    return int(info.value.code or 0), out, err


def test_the_summary_separates_safe_fixes_from_those_needing_unsafe_fixes(capsys):
    # Two PF101 and two PF103 are safe; the two PF102 (a reduction) need --unsafe-fixes.
    _, _, err = run(capsys, "--no-color", EXAMPLE)
    assert err.strip().splitlines()[-1] == "6 finding(s) in 1 file(s); 4 fixable with --apply, 2 more once verified on an example, or with --unsafe-fixes"
    _, _, err = run(capsys, "--no-color", "--unsafe-fixes", EXAMPLE)
    assert err.strip().splitlines()[-1] == "6 finding(s) in 1 file(s); 6 fixable with --apply"
    _, _, err = run(capsys, "--no-color", "--select", "PF102", EXAMPLE)
    assert err.strip().splitlines()[-1] == "2 finding(s) in 1 file(s); 2 fixable with --apply once verified on an example, or with --unsafe-fixes"


@pytest.mark.parametrize("flag", ["--select", "--ignore"])
def test_an_unknown_code_on_the_command_line_is_a_usage_error_listing_the_codes(capsys, flag):
    code, _, err = run(capsys, flag, "XYZ", EXAMPLE)
    assert code == 2
    assert "unknown rule code(s) XYZ" in err and "PF101" in err and "PF206" in err


def test_prefixes_of_codes_are_known(capsys):
    code, _, err = run(capsys, "--select", "pf1", "--ignore", "PF10", EXAMPLE)
    assert code == 0, err  # every PF1xx here is PF10x: nothing is left to report


def test_an_unknown_code_in_pyproject_is_a_configuration_error(capsys, tmp_path):
    shutil.copy(EXAMPLE, tmp_path / EXAMPLE.name)
    (tmp_path / "pyproject.toml").write_text('[tool.pallas-fix]\nignore = ["PF999"]\n')
    code, _, err = run(capsys, tmp_path / EXAMPLE.name)
    assert code == 2
    assert "configuration:" in err and "[tool.pallas-fix] ignore: unknown rule code(s) PF999" in err


def test_a_syntax_error_names_its_place_once(capsys, tmp_path):
    path = tmp_path / "broken.py"
    path.write_text("from jax.experimental import pallas as pl\ndef k(x_ref, o_ref):\n    o_ref[...] = x_ref[...\npl.pallas_call(k)\n")
    code, _, err = run(capsys, path)
    assert code == 2
    assert "error at" not in err  # LibCST's own numbering of the place is dropped
    assert re.search(r"syntax error: .* \(line 4, column 1\)", err), err


def _without_examples(tmp_path) -> Path:
    path = tmp_path / EXAMPLE.name
    path.write_text("".join(line for line in EXAMPLE.read_text().splitlines(True) if "pallas-fix: example" not in line))
    return path


def test_the_verification_hint_names_the_entry_with_shapes(capsys, tmp_path):
    # The same suggestion `pallas-fix verify` makes: the entry, at sizes its blocks divide.
    path = _without_examples(tmp_path)
    _, _, err = run(capsys, "--apply", "--select", "PF101", "--no-synthesise", path)
    assert f"no example call for {path} (add `# pallas-fix: example silu(f32[256, 256])`, pass --example" in err


@pytest.mark.interp
def test_an_example_that_does_not_fit_the_original_is_blamed(capsys, tmp_path):
    path = _without_examples(tmp_path)
    # silu walks 128-row blocks: 64 rows do not fit the original kernel either.
    before = path.read_text()
    code, _, err = run(capsys, "--apply", "--select", "PF101", "--example", "silu(f32[64, 256])", path)
    assert code == 1 and path.read_text() == before
    assert "the example `silu(f32[64, 256])` (--example) does not run the original" in err
    assert "check the example" in err and "tracing the rewrite failed" not in err


@pytest.mark.interp
def test_examples_whose_kernels_the_rewrite_leaves_alone_share_one_line(capsys, tmp_path):
    path = tmp_path / EXAMPLE.name
    shutil.copy(EXAMPLE, path)
    _, _, err = run(capsys, "--apply", "--select", "PF101", path)
    assert re.search(r"^verified silu: 2 dynamic slices -> 0", err, re.M), err
    assert "verified scale_rows, matmul: outputs equal; the rewrite left their dynamic slices as they were" in err
    assert not re.search(r"^verified (scale_rows|matmul):", err, re.M)


def test_exit_zero_keeps_findings_from_failing_a_hook_but_not_usage_errors(capsys, tmp_path):
    assert run(capsys, EXAMPLE)[0] == 1
    assert run(capsys, "--exit-zero", EXAMPLE)[0] == 0
    assert run(capsys, "--exit-zero", tmp_path / "missing.py")[0] == 2


@pytest.mark.interp
def test_a_rewrite_no_example_ran_is_written_unverified_says_why_and_exits_1(capsys, tmp_path, monkeypatch):
    # Issue 25: the safe rewrite used to be written with exit 0 after "no example call (add ...)",
    # though verification had tried the file's examples and the original rejected them all.
    monkeypatch.setenv("PALLAS_FIX_CACHE_DIR", str(tmp_path / "cache"))
    folder = tmp_path / "kernels"
    folder.mkdir()
    path = folder / "ln.py"
    shutil.copy(Path(__file__).parent / "fixtures" / "synthesis" / "main_block_unread_layernorm.py", path)
    code, out, _ = run(capsys, "verify", path)
    assert code == 1
    verdict = out.strip().splitlines()[0]
    assert verdict.startswith("unverified layernorm: not verified: the original ran on none of the"), verdict
    code, _, err = run(capsys, "--no-color", "--apply", folder)  # a directory, and the cache says none ran
    assert code == 1, err
    assert verdict in err.splitlines()
    assert re.search(r"^not verified .*ln\.py: kernel _ln_kernel: no example reaches this kernel: the original ran on "
                     r"none of the examples of layernorm \(see above\); its safe fix is written without a check", err, re.M), err
    assert err.strip().splitlines()[-1] == ("0 finding(s) in 1 file(s); 1 file(s) written unverified: "
                                            "the original ran on none of their examples")
    assert "grid=(" in path.read_text()
