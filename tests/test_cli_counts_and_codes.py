"""The summary counts what --apply will really do, and unknown rule codes are usage errors."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pallas_fix.frontends.cli import main

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "tiled_kernels.py"


def run(capsys, *args) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main([str(a) for a in args])
    out, err = capsys.readouterr()
    return int(info.value.code or 0), out, err


def test_the_summary_separates_safe_fixes_from_those_needing_unsafe_fixes(capsys):
    # Two PF101 and two PF103 are safe; the two PF102 (a reduction) need --unsafe-fixes.
    _, _, err = run(capsys, "--no-color", EXAMPLE)
    assert err.strip().splitlines()[-1] == "6 finding(s) in 1 file(s); 4 fixable with --apply, 2 more with --unsafe-fixes"
    _, _, err = run(capsys, "--no-color", "--unsafe-fixes", EXAMPLE)
    assert err.strip().splitlines()[-1] == "6 finding(s) in 1 file(s); 6 fixable with --apply"
    _, _, err = run(capsys, "--no-color", "--select", "PF102", EXAMPLE)
    assert err.strip().splitlines()[-1] == "2 finding(s) in 1 file(s); 2 fixable with --apply --unsafe-fixes"


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
