"""Command line: `pallas-fix [OPTIONS] PATHS...`, plus `explain`, `verify`, `record` and `lsp`.

The check form is the default so that users type `pallas-fix --apply kernel.py`. A first argument
is read as a subcommand only when it is one of the reserved names AND no file of that name exists,
so a path is never mistaken for a subcommand.
"""

from __future__ import annotations

import os
import sys
from concurrent.futures import ProcessPoolExecutor
from enum import Enum
from typing import List, Optional

import typer

from pallas_fix.core.config import ConfigError, parse_backend, parse_target, parse_unroll_limit
from pallas_fix.core.model import Finding, FixSafety
from pallas_fix.engine import SourceError
from pallas_fix.frontends.cli.apply import apply_file
from pallas_fix.frontends.cli.console import console as _console
from pallas_fix.frontends.cli.console import escape as _e
from pallas_fix.frontends.files.files import FileError, iter_files, read_source
from pallas_fix.frontends.files.notebook_service import notebook_diff
from pallas_fix.frontends.report import FileReport
from pallas_fix.frontends.service import (
    Options,
    analyse_file,
    examples_for,
    propose_fix,
    unknown_codes_message,
    runs_in_gpu_interpret,
    verify_rewrite,
    wants_facts,
)
from pallas_fix.output import render_github, render_json, render_sarif, render_text, unified_diff
from pallas_fix.rules.registry import RULES, describe, unknown_codes
from pallas_fix.verify.runner import format_verdict

SUBCOMMANDS = ("explain", "verify", "record", "lsp")


class Format(str, Enum):
    text = "text"
    json = "json"
    sarif = "sarif"
    github = "github"


def _print_diff(text: str, color: bool) -> None:
    if color:
        from rich.syntax import Syntax

        _console().print(Syntax(text, "diff", theme="ansi_dark", background_color="default"))
    else:
        sys.stdout.write(text)
        if not text.endswith("\n"):
            sys.stdout.write("\n")


def run_check(paths: list[str], opts: Options, fmt: Format, workers: int, no_ignore: bool, color: bool) -> int:
    reports = _reports(paths, opts, workers, no_ignore)
    err = _console(stderr=True)
    exit_code = 0
    all_findings: list[Finding] = []
    verdict_json: list[dict] = []
    unchecked: list[str] = []  # files written although the original ran on none of their examples
    for report in reports:
        counted, code = _present(report, opts, fmt, color, err, verdict_json, unchecked)
        all_findings.extend(counted)
        exit_code = max(exit_code, code)
    _print_machine_output(fmt, all_findings, verdict_json if opts.apply else None, [_error_json(r) for r in reports if r.error])
    if fmt is Format.text and not opts.diff_only:
        err.print(_summary(reports, all_findings, opts, unchecked))
    if all_findings and exit_code == 0:
        exit_code = 1
    return exit_code


def _reports(paths: list[str], opts: Options, workers: int, no_ignore: bool) -> list[FileReport]:
    """One report per path: the paths that cannot be read first, then the analysed files in order."""
    targets: list[str] = []
    reports: list[FileReport] = []
    for path, err in iter_files(paths, no_ignore=no_ignore):
        if err:
            reports.append(FileReport(path=path, error=err))
        else:
            targets.append(path)
    if workers > 1 and len(targets) > 1:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            reports.extend(pool.map(analyse_file, targets, [opts] * len(targets), chunksize=8))
    else:
        reports.extend(analyse_file(p, opts) for p in targets)
    return reports


def _present(report: FileReport, opts: Options, fmt: Format, color: bool, err, verdict_json: list[dict],
             unchecked: list[str]) -> tuple[list[Finding], int]:
    """Print one file's findings (and diff, or apply its rewrite): (the findings it counts, exit
    code). A rewrite written unchecked (its examples did not run the original) exits 1: the
    user should look at the examples."""
    if report.error:
        err.print(f"[bold red]error[/]: {_e(report.path)}: {_e(report.error)}", markup=True)
        return [], 2
    if report.fix_error:
        err.print(f"[yellow]warning[/]: {_e(report.path)}: {_e(report.fix_error)}", markup=True)
    text = fmt is Format.text
    if not opts.apply:
        if report.findings and text and not opts.diff_only:
            print(render_text(report.findings))
        if report.proposed is not None and text:
            _print_diff(_diff(report), color)
        return report.findings, 0
    status = "unchanged"
    if report.proposed is not None or any(f.fixable for f in report.findings) or (opts.verify and wants_facts(report)):
        status, report = apply_file(report, opts, err, verdict_json)
    if status == "diff":
        if text:
            _print_diff(_diff(report), color)
        return report.remaining, 1
    if status in ("written", "unchecked", "unchanged"):
        if report.remaining and text:
            print(render_text(report.remaining))
        if status == "unchecked":
            unchecked.append(report.path)
        return report.remaining, 1 if status == "unchecked" else 0
    if text:
        print(render_text(report.findings))
    return report.findings, 2 if status == "error" else 1


def _error_json(report: FileReport) -> dict:
    line, column = report.error_place or (None, None)
    return {"path": report.path, "message": report.error, "line": line, "column": column}


def _print_machine_output(fmt: Format, findings: list[Finding], verdicts: Optional[list[dict]], errors: list[dict]) -> None:
    if fmt is Format.json:
        print(render_json(findings, verdicts, errors))
    elif fmt is Format.sarif:
        print(render_sarif(findings))
    elif fmt is Format.github:
        out = render_github(findings)
        if out:
            print(out)


def _summary(reports: list[FileReport], findings: list[Finding], opts: Options, unchecked: list[str]) -> str:
    """What `--apply` will really do, counted over the findings shown: those its rewrite fixes
    (each marked fixable, a later round's saying which fix comes first: service.settle), and the
    unsafe fixes it writes only once verified (or with --unsafe-fixes); after `--apply`, the files
    written without a check although they had examples."""
    checked = sum(1 for r in reports if not r.error)
    summary = f"{len(findings)} finding(s) in {checked} file(s)"
    if opts.apply:
        if unchecked:
            summary += f"; {len(unchecked)} file(s) written unverified: the original ran on none of their examples"
        return summary
    fixed = sum(1 for r in reports if r.proposed is not None for f in r.findings if f.fixable and _applied_now(r, f))
    unsafe = sum(1 for r in reports for f in r.findings if f.fixable and not _applied_now(r, f))
    if fixed:
        summary += f"; {fixed} fixable with --apply"
    if unsafe:
        how = "once verified on an example, or with --unsafe-fixes"
        summary += f", {unsafe} more {how}" if fixed else f"; {unsafe} fixable with --apply {how}"
    return summary


def _applied_now(report: FileReport, f: Finding) -> bool:
    """The proposal applies this finding's fix: a safe one, or an unsafe one with unsafe fixes on."""
    return f.fix_safety is FixSafety.SAFE or bool(report.config and report.config.unsafe_fixes)


def _diff(report: FileReport) -> str:
    if report.notebook is not None:
        return notebook_diff(report.path, report.notebook)
    return unified_diff(report.path, report.original or "", report.proposed or "")


def _check_target(target: Optional[str]) -> None:
    if target is not None:
        _option("--target", parse_target, target)


def _option(name: str, parse, value):
    """`parse(value)` from pallas_fix.core.config, its ConfigError as a usage error of option `name`."""
    try:
        return parse(value)
    except ConfigError as exc:
        raise typer.BadParameter(str(exc), param_hint=name)


check_app = typer.Typer(add_completion=False, context_settings={"help_option_names": ["-h", "--help"]})


@check_app.command(
    help="Find dynamic ref slices in Pallas kernels; show (or --apply) verified rewrites into grid axes and BlockSpecs. "
    "Subcommands: `pallas-fix explain CODE`, `pallas-fix verify FILE`, `pallas-fix record -- CMD`, `pallas-fix lsp`."
)
def check(
    paths: List[str] = typer.Argument(..., help="Files or directories (directories recurse)."),
    apply: bool = typer.Option(False, "--apply", help="Write the rewrites (verified when examples exist)."),
    diff: bool = typer.Option(False, "--diff", help="Print only the diff of the proposed rewrites."),
    unsafe_fixes: Optional[bool] = typer.Option(None, "--unsafe-fixes/--no-unsafe-fixes", help="Also apply fixes marked unsafe."),
    fmt: Format = typer.Option(Format.text, "--format", help="Output format."),
    select: List[str] = typer.Option([], "--select", help="Only these rule codes (prefixes allowed)."),
    ignore: List[str] = typer.Option([], "--ignore", help="Skip these rule codes (prefixes allowed)."),
    backend: Optional[str] = typer.Option(None, "--backend", help="tpu | mosaic-gpu | triton (overrides detection)."),
    target: Optional[str] = typer.Option(None, "--target", help="default | gpu-interpret | compiled"),
    unroll_limit: Optional[int] = typer.Option(None, "--unroll-limit", help="Largest trip count R5 unrolls (gpu-interpret target)."),
    example: List[str] = typer.Option([], "--example", help="Example call for verification, e.g. 'matmul(f32[256, 512], f32[512, 256])'."),
    verify: bool = typer.Option(True, "--verify/--no-verify", help="Verify rewrites through the Pallas interpreters before writing."),
    verify_timeout: float = typer.Option(300.0, "--verify-timeout", help="Seconds allowed for verifying one file."),
    require_verified: bool = typer.Option(False, "--require-verified", help="Refuse to write rewrites that could not be verified."),
    lift_for_memory: Optional[bool] = typer.Option(
        None, "--lift-for-memory/--no-lift-for-memory",
        help="Also write verified lifts that only trade speed for memory on TPU (the original fits on chip and is already pipelined)."),
    synthesise: bool = typer.Option(True, "--synthesise/--no-synthesise", help="Without example calls, find some in the code and its __main__ block."),
    kernel: List[str] = typer.Option([], "--kernel", help="Rewrite only these kernels (function names)."),
    exit_zero: bool = typer.Option(False, "--exit-zero", help="Exit 0 even when findings remain or a rewrite is refused (errors still exit 2)."),
    workers: int = typer.Option(1, "--workers", "-j", help="Analyse files in this many processes."),
    no_ignore: bool = typer.Option(False, "--no-ignore", help="Include hidden and .gitignored paths."),
    color: Optional[bool] = typer.Option(None, "--color/--no-color", help="Colour the diff (default: on a terminal)."),
) -> None:
    _check_target(target)
    _option("--backend", parse_backend, backend)
    if unroll_limit is not None:
        _option("--unroll-limit", parse_unroll_limit, unroll_limit)
    for flag, codes in (("--select", select), ("--ignore", ignore)):
        unknown = unknown_codes(codes)
        if unknown:
            raise typer.BadParameter(unknown_codes_message(unknown), param_hint=flag)
    opts = Options(
        apply=apply,
        diff_only=diff,
        unsafe_fixes=unsafe_fixes,
        select=tuple(select),
        ignore=tuple(ignore),
        backend=backend,
        target=target,
        unroll_limit=unroll_limit,
        examples=tuple(example),
        verify=verify,
        verify_timeout=verify_timeout,
        require_verified=require_verified,
        lift_for_memory=lift_for_memory,
        synthesise=synthesise,
        kernels=tuple(kernel),
        fix_edits=fmt is Format.sarif,
    )
    use_color = sys.stdout.isatty() and not os.environ.get("NO_COLOR") if color is None else color
    code = run_check(paths, opts, fmt, max(1, workers), no_ignore, use_color)
    raise typer.Exit(0 if exit_zero and code == 1 else code)


sub_app = typer.Typer(add_completion=False, no_args_is_help=True, context_settings={"help_option_names": ["-h", "--help"]})


@sub_app.command("explain", help="Print a rule's documentation and examples (all rules when no code is given).")
def explain(code: Optional[str] = typer.Argument(None)) -> None:
    if code is None:
        rules = sorted(RULES.values(), key=lambda r: r.code)
        width = max(len(r.name) for r in rules)  # the longest name sets the column: none runs into its summary
        for r in rules:
            print(f"{r.code}  {r.name:{width}s}  {r.summary}")
        return
    try:
        print(describe(code))
    except KeyError:
        print(f"unknown rule code {code!r}; known: {', '.join(sorted(RULES))}", file=sys.stderr)
        raise typer.Exit(2)
    print(RULES[code.upper()].examples_text())


@sub_app.command("verify", help="Verify a file's proposed rewrite (FILE) or compare two versions (OLD NEW) without writing.")
def verify_cmd(
    files: List[str] = typer.Argument(..., help="FILE, or OLD.py NEW.py"),
    example: List[str] = typer.Option([], "--example"),
    verify_timeout: float = typer.Option(300.0, "--verify-timeout"),
    fmt: Format = typer.Option(Format.text, "--format"),
    target: Optional[str] = typer.Option(None, "--target"),
    unsafe_fixes: Optional[bool] = typer.Option(None, "--unsafe-fixes/--no-unsafe-fixes"),
) -> None:
    import json

    if len(files) not in (1, 2):
        raise typer.BadParameter("give FILE or OLD NEW")
    _check_target(target)
    # Verification is how an unsafe fix becomes safe: it considers every plan unless told not to.
    unsafe = True if unsafe_fixes is None else unsafe_fixes
    opts = Options(target=target, unsafe_fixes=unsafe, examples=tuple(example), verify_timeout=verify_timeout)
    old, new, divided = _versions(files, opts, fmt)
    examples, problem = examples_for(files[0], old, opts)
    if problem:
        print(f"error: example: {problem}", file=sys.stderr)
        raise typer.Exit(2)
    verdicts = verify_rewrite(files[0], old, new, examples, opts, gpu=runs_in_gpu_interpret(files[0], old, opts),
                              divided_only=divided)
    if fmt is Format.json:
        print(json.dumps([v.to_json() for v in verdicts], indent=2))
    else:
        for v in verdicts:
            print(format_verdict(v))
    ok = all(v.status == "verified" for v in verdicts)
    raise typer.Exit(0 if ok else 1)


def _versions(files: list[str], opts: Options, fmt: "Format") -> tuple[str, str, bool]:
    """`verify`'s two texts: OLD and NEW as given, or FILE and its proposed rewrite; and whether
    the rewrite holds a lift the interpreters judge only where its blocks divide (FixResult.divided_only)."""
    try:
        old = read_source(files[0]).text
        if len(files) == 2:
            return old, read_source(files[1]).text, False
        fixed = propose_fix(files[0], old, opts)
    except (FileError, ConfigError, SourceError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise typer.Exit(2)
    if fixed.error:
        print(f"error: {files[0]}: {fixed.error}", file=sys.stderr)
        raise typer.Exit(2)
    if not fixed.changed:
        print(f"{files[0]}: nothing to rewrite", file=sys.stderr)
        if fmt is Format.json:
            print("[]")  # a JSON reader always gets a list of verdicts
        raise typer.Exit(0)
    return old, fixed.source, fixed.divided_only


@sub_app.command(
    "record",
    help="Run CMD (after --) and record the calls of its kernels' entry functions as example calls in pallas-fix-examples.json.",
    context_settings={"allow_interspersed_args": False, "ignore_unknown_options": True},
)
def record_cmd(
    cmd: List[str] = typer.Argument(..., help="The command to run, e.g. -- pytest tests/kernels"),
    output: Optional[str] = typer.Option(None, "--output", "-o", help="The recording (default ./pallas-fix-examples.json)."),
    max_per_entry: int = typer.Option(3, "--max-per-entry", min=1, help="Examples kept per entry point."),
) -> None:
    from pallas_fix.frontends.cli.record import record_command

    raise typer.Exit(record_command(cmd, output, max_per_entry))


@sub_app.command("lsp", help="Start the language server on stdio.")
def lsp_cmd() -> None:
    # pygls and lsprotocol take a while to import: only the server pays for them.
    from pallas_fix.frontends.lsp.server import serve

    serve()


@sub_app.command("check", hidden=True)
def _check_alias(paths: List[str]) -> None:  # pragma: no cover - keeps Typer in multi-command mode
    raise typer.Exit(run_check(paths, Options(), Format.text, 1, False, False))


def main(argv: Optional[list[str]] = None) -> None:
    args = sys.argv[1:] if argv is None else list(argv)
    if args and args[0] in SUBCOMMANDS and not os.path.exists(args[0]):
        sub_app(args=args, prog_name="pallas-fix")
    else:
        if args and args[0] == "--":
            args = args[1:]
        check_app(args=args, prog_name="pallas-fix")


if __name__ == "__main__":  # pragma: no cover
    main()
