"""The per-file service every front end shares: read a file, analyse it, propose its rewrite,
verify the rewrite, write it. Pure up to `write_report`, so files can be analysed in worker
processes; the CLI presents what it returns, notebooks get the same through their virtual module.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from pallas_fix.core.config import Config, ConfigError, load_config, parse_backend
from pallas_fix.core.examples import ExampleSyntaxError, collect_examples
from pallas_fix.core.model import Finding
from pallas_fix.engine import SourceError, analyze_source, fix_source
from pallas_fix.frontends.files import FileError, read_source, write_source
from pallas_fix.frontends.notebook import NotebookEdit, analyse_notebook, write_notebook
from pallas_fix.verify.runner import verify_sources


def _quiet(message: str):
    return contextlib.nullcontext()


@dataclass
class Options:
    apply: bool = False
    diff_only: bool = False
    unsafe_fixes: Optional[bool] = None
    select: tuple = ()
    ignore: tuple = ()
    backend: Optional[str] = None
    target: Optional[str] = None
    unroll_limit: Optional[int] = None
    examples: tuple = ()
    verify: bool = True
    verify_timeout: float = 300.0
    require_verified: bool = False


@dataclass
class FileReport:
    path: str
    findings: list[Finding] = field(default_factory=list)
    original: Optional[str] = None
    proposed: Optional[str] = None
    applied: list[str] = field(default_factory=list)
    remaining: list[Finding] = field(default_factory=list)
    error: Optional[str] = None
    fix_error: Optional[str] = None
    skipped: bool = False
    config: Optional[Config] = None
    notebook: Optional[NotebookEdit] = None  # what --apply writes into a .ipynb


def config_for(path: str, opts: Options) -> Config:
    """The file's configuration: its pyproject's [tool.pallas-fix], then the options."""
    base = load_config(Path(path))
    return base.merged(
        select=tuple(c.upper() for c in opts.select) or None,
        ignore=tuple(c.upper() for c in opts.ignore) or None,
        backend=parse_backend(opts.backend),
        target=opts.target,
        unroll_limit=opts.unroll_limit,
        unsafe_fixes=opts.unsafe_fixes,
    )


def analyse_file(path: str, opts: Options) -> FileReport:
    """Everything short of writing: pure, so it can run in a worker process."""
    try:
        return _analyse_file(path, opts)
    except Exception as exc:  # a bug on one file must not stop the run (or lose the other files)
        return FileReport(path=path, error=f"internal error ({type(exc).__name__}: {exc}); please report it with this file")


def _analyse_file(path: str, opts: Options) -> FileReport:
    report = FileReport(path=path)
    if path.endswith(".ipynb"):
        return analyse_notebook(path, report, lambda: config_for(path, opts))
    try:
        src = read_source(path)
    except FileError as exc:
        report.error = str(exc)
        return report
    report.original = src.text
    if "pallas_call" not in src.text:
        report.skipped = True
        return report
    try:
        config = config_for(path, opts)
    except ConfigError as exc:
        report.error = f"configuration: {exc}"
        return report
    report.config = config
    try:
        analysis = analyze_source(src.text, path, config)
    except SourceError as exc:
        report.error = exc.reason + f" (line {exc.line}, column {exc.column + 1})"
        return report
    report.findings = analysis.findings
    if any(f.fixable for f in analysis.findings):
        fixed = fix_source(src.text, path, config, analysis=analysis)
        if fixed.error:
            report.fix_error = fixed.error
        elif fixed.changed:
            report.proposed = fixed.source
            report.applied = fixed.applied
            report.remaining = fixed.remaining
    if report.proposed is None:
        report.remaining = analysis.findings
    return report


def verify_report(report: FileReport, opts: Options, *, gpu: bool, progress=_quiet):
    """Run the interpreters on original vs proposed: (verdicts, None), or (None, what is wrong
    with the examples). `progress(message)` is a context manager shown while they run."""
    try:
        examples = collect_examples(report.path, report.original, cli_examples=list(opts.examples))
    except ExampleSyntaxError as exc:
        return None, str(exc)
    if not examples:
        return [], None
    with progress(f"verifying {report.path} ({len(examples)} example(s))"):
        verdicts = verify_sources(
            report.original or "",
            report.proposed or "",
            examples,
            path=report.path,
            timeout_s=opts.verify_timeout,
            gpu_interpret=gpu,
        )
    return verdicts, None


def write_report(report: FileReport) -> None:
    """Write the proposed text (or the notebook's changed cells); raises FileError, and then the
    file is as it was, when it changed on disk since it was read or cannot be written."""
    if report.notebook is not None:
        write_notebook(report.path, report.notebook)
        return
    src = read_source(report.path)
    if src.text != report.original:
        raise FileError("file changed on disk since it was read; not written")
    write_source(src, report.proposed or "")
