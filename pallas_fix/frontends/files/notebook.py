"""Jupyter notebooks: the code cells analysed and fixed as one virtual module.

A kernel defined in one cell is often called in another, so cells are not analysed one by one:
the code cells are joined, in order, into one module, each preceded by a marker comment line
(`# <pallas-fix cell 3>`, 3 being the cell's index in the notebook's `cells` list, markdown cells
included). Findings map back to `nb.ipynb:cell[3]:LINE:COL`, lines counted inside the cell.

IPython syntax is not Python: in a cell that does not parse, magic and shell lines (`%time`,
`!pip ...`, `x = !ls`, `obj?`) become placeholder comments (`# <pallas-fix ipython 0>`) that keep
the line count; a cell magic (`%%bash`) or a cell that still does not parse is left out whole
(every line a placeholder) with a warning. A cell that parses is taken as written.

Writing back edits only the `source` of the cells whose text changed (outputs, metadata, cell ids
and all other cells untouched) and keeps the file's JSON layout (nbformat writes indent 1,
non-ASCII as is, a final newline). The markers and placeholders must come back from the rewrite
exactly once each and in order; otherwise the rewrite moved code across cells and the notebook is
left unchanged.

This module is the mapping between a notebook and its virtual module; notebook_service uses it to
analyse a .ipynb file, show its rewrite and write it back.
"""

from __future__ import annotations

import ast
import json
import re
import warnings
from dataclasses import dataclass, field, replace
from typing import Optional

import libcst as cst

from pallas_fix.core.model import Finding, Span
from pallas_fix.frontends.files.file_errors import FileError
from pallas_fix.frontends.lines import split_lines

_MARKER = "# <pallas-fix cell {}>"
_MARKER_RE = re.compile(r"^# <pallas-fix cell (\d+)>(?:\r\n|\r|\n)?\Z")
_PLACEHOLDER = "# <pallas-fix ipython {}>"
_PLACEHOLDER_RE = re.compile(r"^[ \t]*# <pallas-fix ipython (\d+)>[ \t]*(\r\n|\r|\n)?\Z")
# Line forms IPython accepts and Python does not: magics, shell escapes, help, captured output.
_MAGIC_LINE = re.compile(
    r"""^[ \t]*(?:
        [%!?]                                     # %magic, !shell, ?obj
      | [\w.\[\]]+[ \t]*\?\??[ \t]*$              # obj? / obj??
      | [\w.,\[\]() \t]+=[ \t]*[%!]               # x = !ls / x = %time f()
    )""",
    re.VERBOSE,
)


class NotebookError(FileError):
    """The notebook cannot be read, or a rewrite cannot be written back into it."""


@dataclass
class _Cell:
    index: int  # position in the notebook's `cells` list
    text: str  # the source as written
    as_list: bool  # `source` stored as a list of lines (nbformat's own form) or one string
    magic_lines: list[str] = field(default_factory=list)  # original lines behind the placeholders
    appended_newline: bool = False  # the virtual module added the newline the cell lacked
    skipped: Optional[str] = None  # why the whole cell was left out


@dataclass
class VirtualModule:
    text: str
    cells: list[_Cell]
    warnings: list[str]


@dataclass
class NotebookEdit:
    """What `--apply` writes: new sources of the changed cells, and the bytes they were read from."""

    raw: bytes
    changes: dict[int, tuple[str, str]]  # cell index -> (old text, new text)
    as_list: dict[int, bool]
    style: dict


# -- reading ------------------------------------------------------------------------------------------
def load_notebook(text: str) -> dict:
    try:
        nb = json.loads(text)
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno}, column {exc.colno}"
        raise NotebookError(f"not a notebook: invalid JSON ({exc.msg} at {where})") from None
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        if isinstance(nb, dict) and "worksheets" in nb:
            version = nb.get("nbformat", "?")
            raise NotebookError(f"nbformat {version} notebooks are not supported (convert to nbformat 4)")
        raise NotebookError("not a notebook: no `cells` list")
    return nb


def is_python(nb: dict) -> bool:
    meta = nb.get("metadata") or {}
    lang = (meta.get("language_info") or {}).get("name") or (meta.get("kernelspec") or {}).get("language")
    return lang is None or str(lang).lower() in ("python", "python3", "ipython", "ipython3")


def cell_text(source) -> tuple[str, bool]:
    if isinstance(source, list):
        return "".join(str(s) for s in source), True
    return str(source or ""), False


def _parses(text: str) -> Optional[cst.ParserSyntaxError]:
    try:
        cst.parse_module(text)
    except cst.ParserSyntaxError as exc:
        return exc
    except Exception as exc:  # LibCST raises a few other errors on odd input; treat them alike
        return cst.ParserSyntaxError(str(exc), lines=[""], raw_line=1, raw_column=0)
    return None


def _error_line(text: str, err: cst.ParserSyntaxError) -> int:
    """CPython's line for the error: LibCST sometimes names the line after the real one."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the user's invalid escapes are not ours to report
            ast.parse(text)
    except SyntaxError as exc:
        return exc.lineno or err.raw_line
    except Exception:
        pass
    return err.raw_line


def _placeholder_lines(cell: _Cell, lines: list[str], which: set[int]) -> list[str]:
    out = []
    for n, line in enumerate(lines):
        if n not in which:
            out.append(line)
            continue
        body = line.rstrip("\r\n")
        ending = line[len(body) :]
        indent = body[: len(body) - len(body.lstrip(" \t"))]
        out.append(indent + _PLACEHOLDER.format(len(cell.magic_lines)) + ending)
        cell.magic_lines.append(line)
    return out


def _virtual_cell(cell: _Cell) -> tuple[str, Optional[str]]:
    """The cell as Python, and a warning when part of it had to be left out."""
    text = cell.text
    if not text.endswith("\n"):
        text += "\n"
        cell.appended_newline = True
    if _parses(text) is None:
        return text, None
    lines = split_lines(text)
    if text.lstrip().startswith("%%"):
        cell.skipped = "cell magic"
        return "".join(_placeholder_lines(cell, lines, set(range(len(lines))))), None
    magic: set[int] = set()
    for n, line in enumerate(lines):
        if n in magic or _MAGIC_LINE.match(line):
            magic.add(n)
            if line.rstrip("\r\n").endswith("\\") and n + 1 < len(lines):
                magic.add(n + 1)  # the magic goes on on the next line
    candidate = "".join(_placeholder_lines(cell, lines, magic))
    err = _parses(candidate)
    if err is None:
        return candidate, None
    cell.magic_lines = []
    cell.skipped = f"syntax error on line {_error_line(candidate, err)}"
    blanked = "".join(_placeholder_lines(cell, lines, set(range(len(lines)))))
    return blanked, f"cell[{cell.index}]: not analysed ({cell.skipped})"


def build_virtual(nb: dict) -> VirtualModule:
    parts: list[str] = []
    cells: list[_Cell] = []
    warnings: list[str] = []
    for index, raw_cell in enumerate(nb["cells"]):
        if not isinstance(raw_cell, dict) or raw_cell.get("cell_type") != "code":
            continue
        text, as_list = cell_text(raw_cell.get("source", ""))
        cell = _Cell(index, text, as_list)
        body, warning = _virtual_cell(cell)
        if warning:
            warnings.append(warning)
        parts.append(_MARKER.format(index) + "\n" + body)
        cells.append(cell)
    return VirtualModule("".join(parts), cells, warnings)


# -- positions ----------------------------------------------------------------------------------------
def line_map(virtual_text: str) -> list[tuple[int, int]]:
    """For each virtual line (index = line - 1): (cell index, line inside the cell); -1 before any cell."""
    out = []
    cell, n = -1, 0
    for line in split_lines(virtual_text):
        m = _MARKER_RE.match(line)
        if m:
            cell, n = int(m.group(1)), 0
            out.append((cell, 0))
            continue
        n += 1
        out.append((cell, n))
    return out


def locate(lmap: list[tuple[int, int]], line: int) -> tuple[int, int]:
    if 1 <= line <= len(lmap):
        return lmap[line - 1]
    return (lmap[-1][0], lmap[-1][1] + line - len(lmap)) if lmap else (-1, line)


def cell_path(path: str, cell: int) -> str:
    return f"{path}:cell[{cell}]"


def map_findings(findings: list[Finding], path: str, virtual_text: str) -> list[Finding]:
    lmap = line_map(virtual_text)
    out = []
    for f in findings:
        cell, line = locate(lmap, f.span.line)
        end_cell, end_line = locate(lmap, f.span.end_line)
        if end_cell != cell:
            end_line = line
        span = Span(line, f.span.column, end_line, f.span.end_column)
        words = {"message": _cell_lines(f.message, lmap, cell), "provenance": _cell_lines(f.provenance, lmap, cell)}
        out.append(replace(f, path=cell_path(path, cell), span=span, **words))
    return out


_LINE_WORD = re.compile(r"\bline (\d+)\b")


def _cell_lines(text: str, lmap: list[tuple[int, int]], cell: int) -> str:
    """`line N` of the joined module, as the cell numbering the finding's place uses: `line 4`
    in the finding's own cell, `cell[2] line 4` in another."""

    def local(m: re.Match) -> str:
        other, line = locate(lmap, int(m.group(1)))
        return f"line {line}" if other == cell else f"cell[{other}] line {line}"

    return _LINE_WORD.sub(local, text)


# -- rewrites back into cells -------------------------------------------------------------------------
def split_cells(vm: VirtualModule, new_text: str) -> dict[int, str]:
    """The new text of every code cell, from a rewritten virtual module.

    Raises NotebookError when a marker or a placeholder did not survive the rewrite exactly once.
    """
    chunks: dict[int, list[str]] = {}
    order: list[int] = []
    current: Optional[list[str]] = None
    prefix: list[str] = []
    for line in split_lines(new_text):
        m = _MARKER_RE.match(line)
        if m:
            idx = int(m.group(1))
            if idx in chunks:
                raise NotebookError(f"the rewrite repeated the start of cell[{idx}]")
            current = chunks[idx] = []
            order.append(idx)
            continue
        (prefix if current is None else current).append(line)
    expected = [c.index for c in vm.cells]
    if order != expected:
        raise NotebookError("the rewrite moved code across notebook cells")
    if prefix and expected:
        chunks[expected[0]][:0] = prefix  # text put above everything belongs to the first cell
    out = {}
    for cell in vm.cells:
        out[cell.index] = _restore(cell, "".join(chunks[cell.index]))
    return out


def _restore(cell: _Cell, text: str) -> str:
    lines = split_lines(text)
    used: set[int] = set()
    for n, line in enumerate(lines):
        m = _PLACEHOLDER_RE.match(line)
        if not m:
            continue
        k = int(m.group(1))
        if k >= len(cell.magic_lines) or k in used:
            raise NotebookError(f"the rewrite duplicated an IPython line of cell[{cell.index}]")
        used.add(k)
        lines[n] = cell.magic_lines[k].rstrip("\r\n") + (m.group(2) or "")
    if len(used) != len(cell.magic_lines):
        raise NotebookError(f"the rewrite dropped an IPython line of cell[{cell.index}]")
    text = "".join(lines)
    if cell.appended_newline and text.endswith("\n"):
        text = text[:-1]
    return text


# -- JSON layout --------------------------------------------------------------------------------------
def json_style(text: str, nb: dict) -> dict:
    """json.dumps arguments that reproduce the file, or nbformat's layout when none does."""
    plain = text.replace("\r\n", "\n")
    tail = "\n" if plain.endswith("\n") else ""
    for indent in (1, 2, 4, None, 3, "\t"):
        for ensure_ascii in (False, True):
            style = {"indent": indent, "ensure_ascii": ensure_ascii, "tail": tail, "exact": True}
            if dump_notebook(nb, style) == plain:
                return style
    return {"indent": 1, "ensure_ascii": False, "tail": tail or "\n", "exact": False}


def dump_notebook(nb: dict, style: dict) -> str:
    return json.dumps(nb, indent=style["indent"], ensure_ascii=style["ensure_ascii"]) + style["tail"]


def as_source(text: str, as_list: bool):
    return re.findall(r"[^\n]*\n|[^\n]+\Z", text) if as_list else text
