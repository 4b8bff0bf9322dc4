"""The per-file service every front end shares: read a file, analyse it, propose its rewrite,
verify the rewrite, write it. Pure up to `write_report`, so files can be analysed in worker
processes; the CLI presents what it returns, notebooks get the same through their virtual module.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from pallas_fix.core.config import Config, ConfigError, load_config, parse_backend, parse_codes
from pallas_fix.core.examples import ExampleSyntaxError
from pallas_fix.core.traced_facts import WANTS_FACTS
from pallas_fix.engine import CheckResult, FixResult, SourceError, analyze_source, fix_source, mentions_pallas
from pallas_fix.frontends.files.files import FileError, read_source, write_source
from pallas_fix.frontends.finding_fixes import settle, with_fix_edits
from pallas_fix.frontends.kernel_rewrites import FileRewrite, rewrite_by_kernel, unit_names
from pallas_fix.frontends.files.notebook_service import analyse_notebook, write_notebook
from pallas_fix.frontends.report import FileReport
from pallas_fix.rewrite.reduction.lanes import lane_dense_kernels
from pallas_fix.rewrite.reduction.strip import one_window_per_step
from pallas_fix.rules.gpu_interpret.policy import verifies_in_gpu_interpret
from pallas_fix.rules.registry import RULES, unknown_codes
from pallas_fix.verify.examples.sources import collect_examples
from pallas_fix.verify.facts import learn_facts
from pallas_fix.verify.judge.lift_cost import with_windows
from pallas_fix.verify.runner import Verdict, verify_sources
from pallas_fix.verify.examples.synthesised import suggested_example

if TYPE_CHECKING:
    from pallas_fix.core.example_values import Example


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
    lift_for_memory: Optional[bool] = None  # --lift-for-memory (core.speed)
    synthesise: bool = True  # find example calls in the code when none are given
    kernels: tuple = ()  # --kernel: rewrite only these kernels
    fix_edits: bool = False  # give each fixable finding the edits of its own fix (SARIF's `fixes`)


def config_for(path: str, opts: Options) -> Config:
    """The file's configuration: its pyproject's [tool.pallas-fix], then the options."""
    base = load_config(Path(path))
    for key in ("select", "ignore"):
        unknown = unknown_codes(getattr(base, key))
        if unknown:
            raise ConfigError(f"{base.source}: [tool.pallas-fix] {key}: {unknown_codes_message(unknown)}")
    return base.merged(
        select=parse_codes(list(opts.select), "select") or None,
        ignore=parse_codes(list(opts.ignore), "ignore") or None,
        backend=parse_backend(opts.backend),
        target=opts.target,
        unroll_limit=opts.unroll_limit,
        unsafe_fixes=opts.unsafe_fixes,
        lift_for_memory=opts.lift_for_memory,
    )


def analyse_file(path: str, opts: Options) -> FileReport:
    """Everything short of writing: pure, so it can run in a worker process."""
    try:
        return _analyse_file(path, opts)
    except RecursionError:  # generated code can nest past what the analysis follows
        return FileReport(path=path, error="the file nests too deeply for pallas-fix to analyse; it is unchanged")
    except Exception as exc:  # a bug on one file must not stop the run (or lose the other files)
        return FileReport(path=path, error=f"internal error ({type(exc).__name__}: {exc}); please report it with this file")


def _analyse_file(path: str, opts: Options) -> FileReport:
    if path.endswith(".ipynb"):
        return analyse_notebook(path, lambda: config_for(path, opts))
    try:
        src = read_source(path)
    except FileError as exc:
        return FileReport(path=path, error=str(exc))
    report = FileReport(path=path, original=src.text)
    if not mentions_pallas(src.text):
        return report
    try:
        config = config_for(path, opts)
    except ConfigError as exc:
        return replace(report, error=f"configuration: {exc}")
    report = replace(report, config=config)
    try:
        analysis = analyze_source(src.text, path, config, reach=True)
    except SourceError as exc:
        return replace(report, error=exc.reason + f" (line {exc.line}, column {exc.column + 1})", error_place=(exc.line, exc.column + 1))
    findings = with_fix_edits(analysis, bool(config.unsafe_fixes)) if opts.fix_edits else analysis.findings
    report = replace(report, findings=findings, remaining=findings, example_hint=example_hint(analysis),
                     gpu_interpret=verifies_in_gpu_interpret(analysis.analysis))
    if not any(f.fixable for f in analysis.findings):
        return report
    fixed = fix_source(src.text, path, config, analysis=analysis)
    if fixed.error:
        return replace(report, fix_error=fixed.error)
    if fixed.changed:
        # What the findings say of their fixes is what the proposal does (finding_fixes.settle).
        return replace(report, findings=settle(report.findings, fixed), proposed=fixed.source, applied=fixed.applied,
                       remaining=fixed.remaining, divided_only=fixed.divided_only)
    return report


def propose_fix(path: str, text: str, opts: Options) -> FixResult:
    """The rewrite of `text` under the file's configuration, found without analysing it first
    (raises ConfigError, SourceError)."""
    return fix_source(text, path, config_for(path, opts))


def examples_for(path: str, text: Optional[str], opts: Options) -> tuple[list[Example], Optional[str]]:
    """The file's example calls (the options' own first), or ([], what is wrong with them)."""
    try:
        return collect_examples(path, text, cli_examples=list(opts.examples), synthesise=opts.synthesise), None
    except (ExampleSyntaxError, ConfigError) as exc:  # the examples table of pyproject.toml is config
        return [], str(exc)


def runs_in_gpu_interpret(path: str, source: str, opts: Options) -> bool:
    """The module's kernels run in GPU interpret mode (the target or the module says so, or it has a
    Mosaic GPU kernel that runs there as it is), so verification runs that interpreter too, as
    `--apply` does."""
    if opts.target == "gpu-interpret":
        return True
    try:
        return verifies_in_gpu_interpret(analyze_source(source, path, config_for(path, opts), reach=True).analysis)
    except (ConfigError, SourceError):
        return False


def verify_rewrite(path: str, original: str, proposed: str, examples: list[Example], opts: Options, *, gpu: bool,
                   divided_only: bool = False) -> list[Verdict]:
    """Run the interpreters on both versions for every example (one "unverified" verdict for none);
    `gpu`: also GPU interpret mode (the module or the target says its kernels run there);
    `divided_only`: compare no example where a block of the rewrite is partial (core.plans.FixPlan)."""
    verdicts = verify_sources(original, proposed, examples, path=path, timeout_s=opts.verify_timeout,
                              gpu_interpret=gpu, divided_only=divided_only)
    one = one_window_per_step(original, proposed)
    if one is None or not any(v.ok for v in verdicts):
        return verdicts
    # A strip-mined lift: run it again with one window per grid step (one seed), which crosses
    # the steps of its axis on any example; a failure there fails the example.
    again = verify_sources(original, one, examples, path=path, timeout_s=opts.verify_timeout, gpu_interpret=gpu,
                           divided_only=divided_only, seeds=(0,), on_chip=False)
    # Its steps there, over the strip's, are the windows each strip step walks (judge.lift_cost).
    lanes = lane_dense_kernels(original, proposed)
    return [replace(v, speed=with_windows(v.speed, w.speed, lanes)) if w.ok else v if not v.ok or w.status == "unverified" else
            replace(v, status=w.status, message=f"with one window per grid step (the strip helper set to 1): {w.message}")
            for v, w in zip(verdicts, again)]


def verify_report(report: FileReport, opts: Options, *, gpu: bool, progress=_quiet):
    """Run the interpreters on original vs proposed: (verdicts, None), or (None, what is wrong
    with the examples); ([], None) when there is no example. `progress(message)` is a context
    manager shown while they run."""
    examples, problem = examples_for(report.path, report.original, opts)
    if problem:
        return None, problem
    if not examples:
        return [], None
    with progress(f"verifying {report.path} ({len(examples)} example(s))"):
        return verify_rewrite(report.path, report.original or "", report.proposed or "", examples, opts, gpu=gpu,
                              divided_only=report.divided_only), None


def wants_facts(report: FileReport) -> bool:
    """Some finding is refused for a fact the examples' trace may show (core.traced_facts), now
    or once the first fixes are made: a window written as an integer array becomes a contiguous
    `pl.ds` window first, and only the next round's lift needs the operand's rank (flashoptim's
    AdamW, whose operands are fields of a record the wrapper unpacks)."""
    if _wanting(report.findings):
        return True
    if not any(f.fixable for f in report.findings):
        return False
    later = fix_source(report.original or "", report.path, report.config or Config(), unsafe=True)
    return later.error is None and _wanting(later.remaining)


def _wanting(findings) -> bool:
    return any(f.refusal and any(w in f.refusal for w in WANTS_FACTS) for f in findings)


def rewrite_kernels(report: FileReport, opts: Options, *, gpu: bool, progress=_quiet) -> tuple[Optional[FileRewrite], Optional[str]]:
    """`--apply`'s rewrite of a file, verified and accepted kernel by kernel
    (:mod:`pallas_fix.frontends.kernel_rewrites`): (the rewrite, None), or (None, what is wrong
    with the examples)."""
    examples, problem = examples_for(report.path, report.original, opts) if opts.verify else ([], None)
    if problem:
        return None, problem
    config = report.config or Config()
    verifier = _kernel_verifier(report.path, examples, opts, gpu, progress) if examples else None
    if verifier is not None and wants_facts(report):
        with progress(f"tracing {report.path}'s examples for the facts its code leaves unsaid"):
            facts = learn_facts(report.original or "", examples, path=report.path, timeout_s=opts.verify_timeout)
        config = replace(config, traced_facts=facts)  # plans that use them are unsafe: verified first
    return rewrite_by_kernel(
        report.original or "", report.path, config, verifier,
        allow_unsafe=bool(config.unsafe_fixes), require_verified=opts.require_verified,
        only_kernels=set(opts.kernels) or None,
        unverified_why="no example call" if opts.verify else "verification disabled",
    ), None


def _kernel_verifier(path: str, examples: list[Example], opts: Options, gpu: bool, progress):
    """A verifier that, once an example has run, runs it again only for the kernels it reached:
    each kernel of a file is verified on its own, and most examples reach one kernel."""
    reached_by: dict[int, set] = {}  # id(example) -> the kernels its first run traced

    def verify(old: str, new: str, kernel: Optional[str], divided_only: bool = False) -> list[Verdict]:
        chosen = [e for e in examples if id(e) not in reached_by or unit_names(kernel) & reached_by[id(e)]]
        if not chosen:
            return []
        with progress(f"verifying {path}{f' ({kernel})' if kernel else ''}, {len(chosen)} example(s)"):
            verdicts = verify_rewrite(path, old, new, chosen, opts, gpu=gpu, divided_only=divided_only)
        for example, verdict in zip(chosen, verdicts):
            calls = verdict.details.get("pallas_calls")
            if calls is not None:
                reached_by.setdefault(id(example), {c.get("kernel") for c in calls})
        return verdicts

    return verify


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


def unknown_codes_message(unknown: list[str]) -> str:
    return f"unknown rule code(s) {', '.join(unknown)}; the codes are {', '.join(sorted(RULES))} (prefixes allowed)"


def suggested_example_for(report: FileReport) -> str:
    """The example call messages suggest for a file without one: its entry point with plausible
    shapes, as `pallas-fix verify` suggests it
    (:func:`~pallas_fix.verify.examples.synthesised.suggested_example`), else the report's hint.
    Read with ast when a message needs it, not for every file analysed."""
    return suggested_example(report.original or "", report.path) or report.example_hint


def example_hint(analysis: CheckResult) -> str:
    """An example call to suggest for verification: the module-level function that makes the
    first pallas_call, one `f32[...]` per argument it requires."""
    for site in analysis.sites:
        fn = site.enclosing
        if fn is None or analysis.ctx is None or analysis.ctx.parent(fn) is not analysis.ctx.module:
            continue
        required = [p for p in fn.params.params if p.default is None]
        return f"{fn.name.value}({', '.join('f32[...]' for _ in required)})"
    return FileReport.example_hint
