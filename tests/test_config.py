"""`[tool.pallas-fix]` in the nearest pyproject.toml: rule selection, backend, and how the command
line overrides it. Every project here is a fresh folder under tmp_path, so no pyproject.toml of
this repository is in play."""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import pytest

from kernel_loading import FIXTURES
from pallas_fix import codemods
from pallas_fix.frontends.cli.app import main
from pallas_fix.frontends.service import Options, analyse_file
from pallas_fix.core.config import ConfigError, load_config
from pallas_fix.core.model import Backend

# Three codes in one file: PF101 (fori_loop), PF102 (K reduction), PF103 (program_id).
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "tiled_kernels.py"
TANH = FIXTURES / "detect" / "tiled_tanh_fori.py"


def project(tmp_path: Path, table: str, kernel: Path = EXAMPLE, sub: str = "src") -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "pyproject.toml").write_text(textwrap.dedent(table))
    folder = tmp_path / sub
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / kernel.name
    shutil.copyfile(kernel, path)
    return path


def codes(capsys, *args) -> tuple[int, set[str], str]:
    with pytest.raises(SystemExit) as info:
        main(["--format", "json", *map(str, args)])
    out, err = capsys.readouterr()
    return int(info.value.code or 0), {f["code"] for f in json.loads(out)["findings"]}, err


@pytest.mark.parametrize(
    "table, cli, expected",
    [
        ("", [], {"PF101", "PF102", "PF103"}),
        ("[tool.other]\nselect = ['PF103']\n", [], {"PF101", "PF102", "PF103"}),
        ("[tool.pallas-fix]\nselect = ['PF103']\n", [], {"PF103"}),
        ("[tool.pallas-fix]\nselect = 'PF103'\n", [], {"PF103"}),
        ("[tool.pallas-fix]\nselect = ['pf10']\nignore = ['PF102']\n", [], {"PF101", "PF103"}),
        ("[tool.pallas-fix]\nignore = ['PF101', 'PF103']\n", [], {"PF102"}),
        # The command line replaces the file's list of the same kind...
        ("[tool.pallas-fix]\nselect = ['PF103']\n", ["--select", "PF101"], {"PF101"}),
        ("[tool.pallas-fix]\nignore = ['PF103']\n", ["--ignore", "PF101"], {"PF102", "PF103"}),
        # ...and combines with the other kind.
        ("[tool.pallas-fix]\nselect = ['PF101', 'PF103']\n", ["--ignore", "PF103"], {"PF101"}),
        ("[tool.pallas-fix]\nignore = ['PF101']\n", ["--select", "PF101", "--select", "PF102"], {"PF102"}),
    ],
)
def test_select_and_ignore_from_pyproject(capsys, tmp_path, table, cli, expected):
    path = project(tmp_path, table)
    code, found, err = codes(capsys, *cli, path)
    assert found == expected, err
    assert code == (1 if expected else 0)


def test_the_nearest_pyproject_wins(capsys, tmp_path):
    outer = project(tmp_path, "[tool.pallas-fix]\nselect = ['PF103']\n", sub="a")
    inner = project(tmp_path / "b", "[tool.pallas-fix]\nselect = ['PF102']\n", sub="pkg")
    with pytest.raises(SystemExit):
        main(["--format", "json", str(tmp_path)])
    by_file: dict[str, set[str]] = {}
    for f in json.loads(capsys.readouterr().out)["findings"]:
        by_file.setdefault(f["path"], set()).add(f["code"])
    assert by_file == {str(outer): {"PF103"}, str(inner): {"PF102"}}


@pytest.mark.parametrize(
    "value, backend", [("tpu", Backend.TPU), ("triton", Backend.TRITON), ("mosaic-gpu", Backend.MOSAIC_GPU), ("Mosaic_GPU", Backend.MOSAIC_GPU)]
)
def test_backend_from_pyproject(tmp_path, value, backend):
    path = project(tmp_path, f"[tool.pallas-fix]\nbackend = '{value}'\n")
    report = analyse_file(str(path), Options())
    assert report.error is None
    assert report.config.backend is backend
    assert report.config.source == tmp_path / "pyproject.toml"


def test_backend_reaches_every_kernel_site_and_the_command_line_overrides_it(capsys, tmp_path, monkeypatch):
    """Observed where it matters: the backend each discovered pallas_call site is analysed for."""
    seen: list[Backend] = []

    def spy(analysis):
        seen.extend(site.backend for site in analysis.sites)
        return {}

    spy.name = "backend-spy"
    spy.codes = frozenset()
    monkeypatch.setattr(codemods, "PLANNERS", [spy])

    path = project(tmp_path, "[tool.pallas-fix]\nbackend = 'triton'\n")
    codes(capsys, path)
    assert seen and set(seen) == {Backend.TRITON}

    seen.clear()
    codes(capsys, "--backend", "tpu", path)
    assert seen and set(seen) == {Backend.TPU}

    seen.clear()
    (tmp_path / "pyproject.toml").write_text("[tool.pallas-fix]\n")
    codes(capsys, path)
    # Without a setting the backend is read from the code: this file uses pltpu.CompilerParams.
    assert Backend.TPU in seen


@pytest.mark.parametrize(
    "table, words",
    [
        ("[tool.pallas-fix]\nbackend = 'cuda'\n", "unknown backend 'cuda'"),
        ("[tool.pallas-fix]\nbackend = 3\n", "backend must be a string"),
        ("[tool.pallas-fix]\nselect = 3\n", "select must be a list of rule codes"),
        ("[tool.pallas-fix]\nignore = ['PF101', 7]\n", "ignore must be a list of rule codes"),
        ("[tool.pallas-fix]\nunroll-limit = 'many'\n", "unroll-limit"),
        ("[tool.pallas-fix]\nunroll-limit = true\n", "unroll-limit"),
        ("[tool.pallas-fix]\ntarget = 'fpga'\n", "target"),
        ("[tool.pallas-fix]\nunsafe-fixes = 'yes'\n", "unsafe-fixes"),
        ("[tool.pallas-fix]\nexamples = ['silu(f32[8])']\n", "examples"),
        ("[tool.pallas-fix]\nexamples = {'x.py' = 3}\n", "examples"),
        ("tool.pallas-fix = 3\n", "must be a table"),
        ("[tool.pallas-fix\nselect = []\n", "pyproject.toml"),
    ],
)
def test_a_bad_configuration_is_exit_2_naming_the_file_and_the_problem(capsys, tmp_path, table, words):
    path = project(tmp_path, table)
    with pytest.raises(ConfigError, match="pyproject.toml"):
        load_config(path)
    elsewhere = tmp_path.parent / f"{tmp_path.name}-other" / "ok.py"
    elsewhere.parent.mkdir()
    shutil.copyfile(TANH, elsewhere)
    with pytest.raises(SystemExit) as info:
        main(["--format", "json", str(path), str(elsewhere)])
    out, err = capsys.readouterr()
    assert info.value.code == 2
    assert str(path) in err and "configuration" in err and words in err, err
    # A file under another (or no) configuration is still checked.
    assert {f["path"] for f in json.loads(out)["findings"]} == {str(elsewhere)}


def test_settings_are_read(tmp_path):
    path = project(
        tmp_path,
        """
        [tool.pallas-fix]
        select = ["PF1"]
        ignore = ["pf106"]
        backend = "tpu"
        target = "gpu-interpret"
        unroll-limit = 8
        unsafe-fixes = true

        [tool.pallas-fix.examples]
        "src/*.py" = "silu(f32[512, 256])"
        "pkg.mod" = ["a(f32[8])", "b(f32[8])"]
        """,
    )
    cfg = load_config(path)
    assert cfg.select == ("PF1",) and cfg.ignore == ("PF106",)
    assert cfg.backend is Backend.TPU and cfg.target == "gpu-interpret"
    assert cfg.unroll_limit == 8 and cfg.unsafe_fixes is True
    assert cfg.examples == {"src/*.py": ["silu(f32[512, 256])"], "pkg.mod": ["a(f32[8])", "b(f32[8])"]}


def test_an_edited_pyproject_is_seen_by_the_next_run_in_the_same_process(capsys, tmp_path):
    # Same size, written at once: only the content tells the two versions apart.
    path = project(tmp_path, "[tool.pallas-fix]\nselect = ['PF101']\n")
    assert codes(capsys, path)[1] == {"PF101"}
    (tmp_path / "pyproject.toml").write_text("[tool.pallas-fix]\nselect = ['PF103']\n")
    assert codes(capsys, path)[1] == {"PF103"}
