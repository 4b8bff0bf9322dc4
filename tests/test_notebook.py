"""Notebooks: code cells analysed as one module, findings and diffs per cell, writes that change
only the `source` of rewritten cells and keep the file's JSON layout."""

from __future__ import annotations

import copy
import json
import re

import pytest

from apply_support import planner, run_cli  # noqa: F401  (planner is a fixture)
from pallas_fix.engine import analyze_source
from pallas_fix.frontends.files.notebook import NotebookError, build_virtual, line_map, split_cells

IMPORTS_AND_KERNEL = '''import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
%matplotlib inline
!pip list | grep jax
files = !ls

BS = 32


def pick_kernel(x_ref, o_ref):
    third = jnp.int32(3) * BS
    o_ref[...] = x_ref[pl.ds(third, BS), :]'''

WRAPPER = '''# pallas-fix: example pick(f32[128, 128])
def pick(x):
    assert x.shape[0] >= 4 * BS, "pick reads the fourth block of rows"
    return pl.pallas_call(
        pick_kernel,
        out_shape=jax.ShapeDtypeStruct((BS, x.shape[1]), x.dtype),
    )(x)'''


def _lines(text: str) -> list[str]:
    return re.findall(r"[^\n]*\n|[^\n]+$", text)


def make_notebook(*, source_as_string: bool = False) -> dict:
    def src(text):
        return text if source_as_string else _lines(text)

    return {
        "cells": [
            {"cell_type": "markdown", "id": "intro", "metadata": {}, "source": src("# Picking blocks — café ü\n")},
            {
                "cell_type": "code",
                "execution_count": 1,
                "id": "kernel-cell",
                "metadata": {"tags": ["kernel"], "collapsed": False},
                "outputs": [],
                "source": src(IMPORTS_AND_KERNEL),
            },
            {"cell_type": "markdown", "id": "md2", "metadata": {}, "source": src("The wrapper lives in another cell.")},
            {
                "cell_type": "code",
                "execution_count": 2,
                "id": "wrapper-cell",
                "metadata": {},
                "outputs": [],
                "source": src(WRAPPER),
            },
            {
                "cell_type": "code",
                "execution_count": 3,
                "id": "timing",
                "metadata": {},
                "outputs": [{"name": "stdout", "output_type": "stream", "text": ["CPU times: 1 ms\n"]}],
                "source": src("%%time\nx = jnp.ones((128, 128))\npick(x)"),
            },
            {
                "cell_type": "code",
                "execution_count": None,
                "id": "broken",
                "metadata": {},
                "outputs": [],
                "source": src("def broken(:\n    pass"),
            },
            {
                "cell_type": "code",
                "execution_count": 5,
                "id": "help",
                "metadata": {},
                "outputs": [
                    {
                        "data": {"image/png": "iVBORw0KGgo=", "text/plain": ["<Figure>"]},
                        "execution_count": 5,
                        "metadata": {"needs_background": "light"},
                        "output_type": "execute_result",
                    }
                ],
                "source": src("pick?\ny = pick(jnp.ones((128, 128)))"),
            },
            {"cell_type": "raw", "id": "raw", "metadata": {}, "source": src("%not python")},
        ],
        "metadata": {
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "language_info": {"name": "python", "version": "3.12.0"},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def dump(nb: dict, indent=1, ensure_ascii=False, newline="\n") -> str:
    return (json.dumps(nb, indent=indent, ensure_ascii=ensure_ascii) + "\n").replace("\n", newline)


def write_nb(tmp_path, nb=None, **style):
    path = tmp_path / "nb.ipynb"
    path.write_bytes(dump(nb or make_notebook(), **style).encode("utf-8"))
    return path


def cell_line(text: str, needle: str) -> int:
    return next(n for n, line in enumerate(text.splitlines(), 1) if needle in line)


# -- analysis -----------------------------------------------------------------------------------------
def test_findings_name_the_cell_and_the_line_inside_it(tmp_path, capsys):
    path = write_nb(tmp_path)
    assert run_cli(path) == 1
    out, err = capsys.readouterr()
    line = cell_line(IMPORTS_AND_KERNEL, "x_ref[pl.ds(third")
    col = IMPORTS_AND_KERNEL.splitlines()[line - 1].index("x_ref[pl.ds") + 1
    assert re.findall(r"^\S+: PF\d+", out, flags=re.M) == [f"{path}:cell[1]:{line}:{col}: PF104"]
    assert "cell[5]: not analysed (syntax error on line 1)" in err


def test_a_kernel_defined_in_one_cell_and_called_in_another_is_found():
    nb = make_notebook()
    # each cell alone: the kernel cell has no pallas_call, the wrapper cell has no kernel body
    for cell in nb["cells"][1], nb["cells"][3]:
        assert analyze_source("".join(cell["source"]), "cell.py").findings == []
    vm = build_virtual(nb)
    findings = analyze_source(vm.text, "nb.ipynb").findings
    assert [f.code for f in findings] == ["PF104"]
    lmap = line_map(vm.text)
    assert lmap[findings[0].span.line - 1] == (1, cell_line(IMPORTS_AND_KERNEL, "x_ref[pl.ds(third"))


def test_ipython_lines_keep_their_place_and_come_back_unchanged():
    nb = make_notebook()
    vm = build_virtual(nb)
    assert "%matplotlib" not in vm.text and "!pip" not in vm.text and "pick?" not in vm.text
    restored = split_cells(vm, vm.text)
    assert restored == {i: "".join(nb["cells"][i]["source"]) for i in (1, 3, 4, 5, 6)}
    cells = {c.index: c for c in vm.cells}
    assert cells[4].skipped == "cell magic"
    assert cells[5].skipped.startswith("syntax error")
    assert cells[1].skipped is None and len(cells[1].magic_lines) == 3


def test_a_rewrite_that_loses_a_cell_marker_or_an_ipython_line_is_refused():
    vm = build_virtual(make_notebook())
    lines = vm.text.splitlines(keepends=True)
    without_marker = "".join(ln for ln in lines if ln != "# <pallas-fix cell 3>\n")
    with pytest.raises(NotebookError, match="moved code across notebook cells"):
        split_cells(vm, without_marker)
    without_magic = "".join(ln for ln in lines if "# <pallas-fix ipython 1>" not in ln)
    with pytest.raises(NotebookError, match="dropped an IPython line of cell\\[1\\]"):
        split_cells(vm, without_magic)
    swapped = vm.text.replace("# <pallas-fix cell 3>", "# <pallas-fix cell 9>")
    with pytest.raises(NotebookError):
        split_cells(vm, swapped)


@pytest.mark.parametrize(
    "cells",
    [
        # found by the fuzz tests: a lone carriage return ends a line for Python and LibCST
        ['"""a docstring cut by a cell boundary\n', '\r    \n\nrest of it"""\nx = 1\n'],
        ["%time y = 2\r", "z = 3\r\n", "\f\nw = 4"],
    ],
)
def test_cells_with_odd_line_endings_come_back_unchanged(cells):
    nb = {"cells": [{"cell_type": "code", "source": c, "metadata": {}, "outputs": []} for c in cells]}
    vm = build_virtual(nb)
    assert split_cells(vm, vm.text) == dict(enumerate(cells))


@pytest.mark.parametrize(
    "text, message",
    [
        ("{not json", "not a notebook: invalid JSON"),
        (json.dumps({"nbformat": 3, "worksheets": [{"cells": []}]}), "nbformat 3 notebooks are not supported"),
        (json.dumps([1, 2]), "not a notebook: no `cells` list"),
    ],
)
def test_broken_notebooks_are_per_file_errors(tmp_path, capsys, text, message):
    bad = tmp_path / "bad.ipynb"
    bad.write_text(text)
    good = write_nb(tmp_path)
    assert run_cli(bad, good) == 2
    out, err = capsys.readouterr()
    assert f"bad.ipynb: {message}" in err
    assert f"{good}:cell[1]:" in out


def test_a_notebook_in_another_language_is_skipped(tmp_path, capsys):
    nb = make_notebook()
    nb["metadata"]["language_info"] = {"name": "julia"}
    nb["metadata"]["kernelspec"]["language"] = "julia"
    path = write_nb(tmp_path, nb)
    assert run_cli(path) == 0
    assert "PF104" not in capsys.readouterr().out


def test_directories_include_notebooks(tmp_path, capsys):
    write_nb(tmp_path)
    assert run_cli(tmp_path) == 1
    assert "nb.ipynb:cell[1]:" in capsys.readouterr().out


# -- rewrites -----------------------------------------------------------------------------------------
def test_check_mode_shows_one_diff_per_changed_cell(tmp_path, capsys, planner):
    path = write_nb(tmp_path)
    before = path.read_bytes()
    assert run_cli(path, "--no-color") == 1
    out = capsys.readouterr().out
    assert f"--- a/{path}:cell[1]" in out and f"+++ b/{path}:cell[1]" in out
    assert "-    third = jnp.int32(3) * BS" in out and "+    third = 3 * BS" in out
    assert "cell[3]" not in out.split("--- a/", 1)[1], "only the changed cell has a diff"
    assert "<pallas-fix" not in out, "markers and placeholders never reach the user"
    assert path.read_bytes() == before


STYLES = {
    "nbformat": {"indent": 1, "ensure_ascii": False},
    "indent-2-ascii": {"indent": 2, "ensure_ascii": True},
    "crlf": {"indent": 1, "ensure_ascii": False, "newline": "\r\n"},
}


@pytest.mark.parametrize("style", sorted(STYLES))
@pytest.mark.parametrize("as_string", [False, True], ids=["source-list", "source-string"])
def test_apply_changes_only_the_rewritten_cell_source(tmp_path, capsys, planner, style, as_string):
    nb = make_notebook(source_as_string=as_string)
    path = write_nb(tmp_path, nb, **STYLES[style])

    assert run_cli(path, "--apply", "--no-verify") == 0, capsys.readouterr().err

    new_kernel = IMPORTS_AND_KERNEL.replace("jnp.int32(3) * BS", "3 * BS")
    expected = copy.deepcopy(nb)
    expected["cells"][1]["source"] = new_kernel if as_string else _lines(new_kernel)
    assert path.read_bytes() == dump(expected, **STYLES[style]).encode("utf-8")


def test_apply_refuses_a_notebook_changed_since_it_was_read(tmp_path, capsys, planner, monkeypatch):
    from pallas_fix.frontends.cli import app as cli

    path = write_nb(tmp_path)
    analyse = cli.analyse_file

    def analyse_then_edit(p, opts):
        report = analyse(p, opts)
        nb = make_notebook()
        nb["cells"][0]["source"] = ["edited meanwhile"]
        path.write_text(dump(nb))
        return report

    monkeypatch.setattr(cli, "analyse_file", analyse_then_edit)
    assert run_cli(path, "--apply", "--no-verify") == 2
    assert "changed on disk since it was read" in capsys.readouterr().err
    assert "edited meanwhile" in path.read_text()


@pytest.mark.interp
def test_apply_verifies_the_notebook_as_one_module(tmp_path, capsys, planner):
    # The example comment sits in the wrapper cell and the kernel in another: verification runs
    # the virtual module (IPython lines as comments, the %%time cell left out) through the interpreters.
    path = write_nb(tmp_path)
    assert run_cli(path, "--apply") == 0
    err = capsys.readouterr().err
    assert re.search(r"^verified pick: 1 dynamic slice -> 0", err, flags=re.M), err
    cell = "".join(json.loads(path.read_text())["cells"][1]["source"])
    assert "third = 3 * BS" in cell and "%matplotlib inline" in cell


def test_line_numbers_in_messages_are_the_cells_own(tmp_path, capsys):
    """Provenance names the loop's line: in a notebook that is the cell's line, not the line of
    the joined module the analysis reads."""
    kernel = (
        "def kernel(x_ref, o_ref):\n"
        "    def body(i, carry):\n"
        "        o_ref[pl.ds(i * 8, 8)] = x_ref[pl.ds(i * 8, 8)] + 1.0\n"
        "        return carry\n"
        "    lax.fori_loop(0, 4, body, None)\n"
        "\n"
        "def run(x):\n"
        "    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)\n"
    )
    cells = ["import jax\nfrom jax import lax\nfrom jax.experimental import pallas as pl\n", kernel]
    nb = make_notebook()
    nb["cells"] = [
        {"cell_type": "code", "execution_count": None, "id": f"c{n}", "metadata": {}, "outputs": [], "source": _lines(text)}
        for n, text in enumerate(cells)
    ]
    path = write_nb(tmp_path, nb)
    run_cli("--no-color", "--format", "json", path)
    findings = json.loads(capsys.readouterr().out)["findings"]
    assert findings and all(f["path"] == f"{path}:cell[1]" for f in findings)
    assert all("on line 5," in f["provenance"] for f in findings), [f["provenance"] for f in findings]
