"""The per-file service for notebooks: analyse a .ipynb as one virtual module, show its rewrite as
per-cell diffs, and write the changed cells back (see pallas_fix.frontends.files.notebook)."""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from pallas_fix.core.config import Config, ConfigError
from pallas_fix.engine import FixResult, SourceError, analyze_source, fix_source, mentions_pallas
from pallas_fix.frontends.finding_fixes import settle
from pallas_fix.frontends.files.files import FileError, SourceFile, read_source, write_source
from pallas_fix.frontends.files.notebook import (
    NotebookEdit,
    NotebookError,
    VirtualModule,
    as_source,
    build_virtual,
    cell_path,
    cell_text,
    dump_notebook,
    is_python,
    json_style,
    line_map,
    load_notebook,
    locate,
    map_findings,
    split_cells,
)
from pallas_fix.frontends.report import FileReport
from pallas_fix.output.diff import unified_diff
from pallas_fix.rules.gpu_interpret.policy import verifies_in_gpu_interpret


def analyse_notebook(path: str, config_for: Callable[[], Config]) -> FileReport:
    """`service.analyse_file` for a notebook. The configuration is read only once the notebook is
    known to be a Python one."""
    try:
        src = read_source(path)
        nb = load_notebook(src.text)
    except FileError as exc:
        return FileReport(path=path, error=str(exc))
    if not is_python(nb):
        return FileReport(path=path)
    vm = build_virtual(nb)
    try:
        config = config_for()
    except ConfigError as exc:
        return FileReport(path=path, error=f"configuration: {exc}")
    report = FileReport(path=path, config=config, original=vm.text)
    if not mentions_pallas(vm.text):
        return report
    try:
        analysis = analyze_source(vm.text, path, config, reach=True)
    except SourceError as exc:
        cell, line = locate(line_map(vm.text), exc.line)
        return replace(report, error=f"cell[{cell}]: {exc.reason} (line {line}, column {exc.column + 1})")
    found, rewrite, notes = analysis.findings, {}, []
    if any(f.fixable for f in analysis.findings):
        fixed = fix_source(vm.text, path, config, analysis=analysis)
        rewrite, notes = _rewrite(path, src, nb, vm, fixed)
        if fixed.changed and not fixed.error:
            found = settle(found, fixed)  # as a .py file's report (frontends.finding_fixes)
    findings = map_findings(found, path, vm.text)
    notes = vm.warnings + notes
    fields = {"findings": findings, "remaining": findings, "fix_error": "; ".join(notes) if notes else None,
              "gpu_interpret": verifies_in_gpu_interpret(analysis.analysis), **rewrite}
    return replace(report, **fields)


def _rewrite(path: str, src: SourceFile, nb: dict, vm: VirtualModule, fixed: FixResult) -> tuple[dict, list[str]]:
    """The FileReport fields of the notebook's rewrite ({} when there is none to write), and notes."""
    if fixed.error:
        return {}, [fixed.error]
    if not fixed.changed:
        return {}, []
    try:
        new_cells = split_cells(vm, fixed.source)
    except NotebookError as exc:
        return {}, [f"{exc}; the notebook is left unchanged"]
    style = json_style(src.text, nb)
    notes = [] if style["exact"] else ["the notebook's JSON layout is not nbformat's; writing re-formats the whole file"]
    edit = NotebookEdit(
        raw=src.raw,
        changes={c.index: (c.text, new_cells[c.index]) for c in vm.cells if new_cells[c.index] != c.text},
        as_list={c.index: c.as_list for c in vm.cells},
        style=style,
    )
    fields = {
        "proposed": fixed.source,
        "applied": fixed.applied,
        "remaining": map_findings(fixed.remaining, path, fixed.source),
        "notebook": edit,
    }
    return fields, notes


def notebook_diff(path: str, edit: NotebookEdit) -> str:
    """One unified diff per changed cell, named `nb.ipynb:cell[3]`."""
    out = []
    for index in sorted(edit.changes):
        old, new = edit.changes[index]
        # Cells rarely end with a newline; without one the diff's last lines would run together.
        out.append(unified_diff(cell_path(path, index), _nl(old), _nl(new)))
    return "".join(out)


def _nl(text: str) -> str:
    return text if text.endswith("\n") or not text else text + "\n"


def write_notebook(path: str, edit: NotebookEdit) -> None:
    """Write the changed cells' sources; everything else in the file stays as it was."""
    src = read_source(path)
    if src.raw != edit.raw:
        raise FileError("file changed on disk since it was read; not written")
    nb = load_notebook(src.text)
    for index, (old, new) in edit.changes.items():
        cell = nb["cells"][index]
        if cell_text(cell.get("source", ""))[0] != old:
            raise FileError(f"cell[{index}] changed since it was read; not written")
        cell["source"] = as_source(new, edit.as_list.get(index, True))
    write_source(src, dump_notebook(nb, edit.style))
