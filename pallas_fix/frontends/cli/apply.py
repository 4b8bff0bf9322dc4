"""`--apply` for one file: verify and write its rewrite kernel by kernel (a notebook as a whole),
saying on stderr what happened to each kernel."""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

from pallas_fix.core.speed import OPTION
from pallas_fix.frontends.cli.console import escape as _e
from pallas_fix.frontends.cli.console import progress as _progress
from pallas_fix.frontends.files.files import FileError
from pallas_fix.frontends.kernel_rewrites import KernelRewrite
from pallas_fix.frontends.report import FileReport
from pallas_fix.frontends.service import Options, rewrite_kernels, suggested_example_for, verify_report, write_report
from pallas_fix.verify.examples.candidates import no_example_message
from pallas_fix.verify.judge.footprint_findings import format_finding
from pallas_fix.verify.judge.lift_cost import held_lift, trade_note
from pallas_fix.verify.runner import format_verdict


def apply_file(report: FileReport, opts: Options, err, verdict_json: list[dict]) -> tuple[str, FileReport]:
    """Verify and write one file, kernel by kernel: (written | unchecked | unchanged | refused |
    error | diff, the report of what the file now holds); unchecked: written, but a kernel's
    rewrite is unverified although the file had examples, because the original ran on none of
    them; diff (--diff): nothing written, the report holds what would be."""
    if report.notebook is not None:
        return _apply_notebook(report, opts, err, verdict_json), report
    rewrite, problem = rewrite_kernels(report, opts, gpu=report.gpu_interpret, progress=_progress)
    if problem or rewrite is None or rewrite.error:
        err.print(f"[bold red]error[/]: {_e(report.path)}: {'example: ' + problem if problem else rewrite and rewrite.error}", markup=True)
        return "error", report
    for kernel in rewrite.kernels:
        _print_kernel(report, kernel, err, verdict_json)
    accepted = rewrite.accepted()
    if not accepted:
        # The text is the original's; its findings as re-analysed say what the examples' trace
        # showed (core.traced_facts), when --apply traced them.
        return ("refused" if rewrite.kernels else "unchanged"), replace(report, proposed=None, remaining=rewrite.remaining)
    applied = [line for k in accepted for line in k.applied]
    written = replace(report, proposed=rewrite.source, applied=applied, remaining=rewrite.remaining)
    if opts.diff_only:  # --apply --diff: what --apply would write, verified, and nothing written (as ruff --fix --diff)
        return "diff", written
    try:
        write_report(written)
    except FileError as exc:
        err.print(f"[bold red]error[/]: {_e(report.path)}: {_e(exc)}", markup=True)
        return "error", report
    for line in fixed_lines(applied):
        err.print(f"fixed {report.path}: {line}")
    return ("unchecked" if any(k.unchecked for k in accepted) else "written"), written


def fixed_lines(applied: list[str]) -> list[str]:
    """One line per distinct rewrite, in order; rewrites that say the same thing are one line
    with their count, so no sentence is printed twice."""
    counts: dict[str, int] = {}
    for line in applied:
        counts[line] = counts.get(line, 0) + 1
    return [line if n == 1 else f"{line} ({n} rewrites)" for line, n in counts.items()]


def _print_kernel(report: FileReport, kernel: KernelRewrite, err, verdict_json: list[dict]) -> None:
    """What happened to one kernel's rewrite: its verdicts, then why it was not verified or written."""
    name = f"kernel {kernel.kernel}" if kernel.kernel else "a kernel"
    _print_verdicts(report, list(kernel.verdicts), err, verdict_json)
    if kernel.status == "failed":
        err.print(f"[bold red]not written[/]: {_e(report.path)}: {_e(name)}: verification failed ({_e(kernel.reason)}); its code is unchanged", markup=True)
    elif kernel.status == "refused":
        err.print(f"[yellow]not written[/]: {_e(report.path)}: {_e(name)}: {_e(kernel.reason)}", markup=True)
    elif kernel.status == "not verified":
        if kernel.reason == "no example call":
            err.print(f"not verified {report.path}: {no_example_message(report.path, suggested_example_for(report))}")
        elif kernel.reason == "verification disabled":
            err.print(f"not verified {report.path}: {kernel.reason}")
        elif kernel.unchecked:
            err.print(f"[yellow]not verified[/] {_e(report.path)}: {_e(name)}: {_e(kernel.reason)}; its safe fix is written "
                      "without a check (--require-verified refuses it), and the exit status is 1", markup=True)
        else:
            err.print(f"not verified {report.path}: {name}: {kernel.reason}")


def _print_verdicts(report: FileReport, verdicts: list, err, verdict_json: list[dict]) -> None:
    verdict_json.extend({"path": report.path, **v.to_json()} for v in verdicts)
    untouched = [v for v in verdicts if v.untouched]
    for v in verdicts:
        if not any(v is u for u in untouched):
            err.print(format_verdict(v))
    if untouched:
        names = ", ".join(v.entry for v in untouched)
        err.print(f"verified {names}: outputs equal; the rewrite left their dynamic slices as they were")
        for finding in (f for v in untouched for f in v.findings):  # PF301: said even where nothing changed
            err.print("  " + format_finding(finding))


def _apply_notebook(report: FileReport, opts: Options, err, verdict_json: list[dict]) -> str:
    """A notebook's rewrite is verified and written as a whole: written | unchecked | refused | error."""
    refused = _verify_before_writing(report, opts, err, verdict_json)
    if refused and refused != "unchecked":
        return refused
    try:
        write_report(report)
    except FileError as exc:
        err.print(f"[bold red]error[/]: {_e(report.path)}: {_e(exc)}", markup=True)
        return "error"
    for line in fixed_lines(report.applied):
        err.print(f"fixed {report.path}: {line}")
    return refused or "written"


def _verify_before_writing(report: FileReport, opts: Options, err, verdict_json: list[dict]) -> Optional[str]:
    """None when the rewrite may be written, "unchecked" when it may although no example ran the
    original; else refused | error (said on stderr). A lift that only trades speed for memory on TPU
    holds the notebook back, as it holds a kernel back (frontends.kernel_rewrites)."""
    verdicts, problem = (None, None)
    if opts.verify:
        verdicts, problem = verify_report(report, opts, gpu=report.gpu_interpret, progress=_progress)
        if problem:
            err.print(f"[bold red]error[/]: {_e(report.path)}: example: {_e(problem)}", markup=True)
            return "error"
    if verdicts:
        _print_verdicts(report, verdicts, err, verdict_json)
        if any(v.status not in ("verified", "unverified") for v in verdicts):
            err.print(f"[bold red]not written[/]: {_e(report.path)}: verification failed; the file is unchanged", markup=True)
            return "refused"
        if opts.require_verified and not all(v.status == "verified" for v in verdicts):
            err.print(f"[yellow]not written[/]: {_e(report.path)}: not verified and --require-verified is set", markup=True)
            return "refused"
        if not any(v.ok for v in verdicts):
            err.print(f"[yellow]not verified[/] {_e(report.path)}: the original ran on none of the examples (see above); "
                      "its rewrite is written without a check, and the exit status is 1", markup=True)
            return "unchecked"
        held = held_lift([r for v in verdicts if v.ok for r in v.speed])
        if held is not None and not (report.config is not None and report.config.lift_for_memory):
            why = f"kernel {held.get('kernel')}: {trade_note(held)}; {OPTION}"
            err.print(f"[yellow]not written[/]: {_e(report.path)}: {_e(why)}", markup=True)
            return "refused"
        return None
    why = "verification disabled" if not opts.verify else no_example_message(report.path, suggested_example_for(report))
    if opts.require_verified:
        err.print(f"[yellow]not written[/]: {_e(report.path)}: not verified ({_e(why)}) and --require-verified is set", markup=True)
        return "refused"
    err.print(f"not verified {report.path}: {why}")
    return None


