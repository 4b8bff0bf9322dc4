"""Coverage: how much of the kernels people write pallas-fix fixes, and why it refuses the rest.

Four corpora:
- the blind corpus, tests/fixtures/blind/ (kernels written without reading the planners, each
  labelled `# label: fix | either | refuse` and carrying an example call; its held-out files are
  listed in its README),
- the second blind corpus, tests/fixtures/blind2/ (written the same way by another session after
  the first was in the tuning loop; held out as a whole: no planner work looks at it; its
  refusals were later described to the sessions that built the lifts, without its code),
- the third blind corpus, tests/fixtures/blind3/ (written by a fresh session while those lifts
  were built; held out as a whole: no session that builds planners opens it),
- the real corpus, tests/fixtures/real/ (kernels condensed from public repositories, each pinned
  to a commit by its `# source:` line; a third marked `# held-out: yes`; see its README), and
- JAX's own Pallas kernels, read at run time from the installed jax package
  (jax/experimental/pallas/ops/**).

Per kernel file: findings, whether a rewrite is proposed, what it fixed, and (with --verify) the
verification verdicts; then the share of fix-labelled blind kernels fixed (and verified), the
rewrites that changed outputs, and a histogram of refusal reasons. A file is FIXED when the
accepted rewrite (verified, with --verify) removes every finding, PARTIAL when it removes some,
held when its rewrite verified but plain --apply holds it back as slower (--lift-for-memory writes it).
The real corpus is also reported per repository (files, labels, findings, FIXED/PARTIAL, verified,
the first refusal of each file not lifted), its held-out files apart, and every file is traced by
the jaxpr oracle on its example to list kernels with dynamic accesses but no finding.

    .venv/bin/python benchmarks/bench_coverage.py                 # proposals only (seconds)
    .venv/bin/python benchmarks/bench_coverage.py --verify        # verify every proposal (minutes)
    .venv/bin/python benchmarks/bench_coverage.py --corpus blind --held-out-only --verify
    .venv/bin/python benchmarks/bench_coverage.py --corpus blind2 --verify
    .venv/bin/python benchmarks/bench_coverage.py --corpus blind3 --verify
    .venv/bin/python benchmarks/bench_coverage.py --corpus real --verify [--held-out-only]
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pallas_fix.core.speed import OPTION  # noqa: E402
from pallas_fix.frontends.service import Options, analyse_file, rewrite_kernels  # noqa: E402

BLIND = ROOT / "tests" / "fixtures" / "blind"
BLIND2 = ROOT / "tests" / "fixtures" / "blind2"
BLIND3 = ROOT / "tests" / "fixtures" / "blind3"
REAL = ROOT / "tests" / "fixtures" / "real"
_LABEL = re.compile(r"^#\s*label:\s*(fix|either|refuse)\b", re.M)
# Refusal texts name the place they refer to (`x_ref`, line numbers): a histogram groups by shape.
_DETAILS = re.compile(r"`[^`]*`|\b\d+\b")
_SOURCE = re.compile(r"^#\s*source:\s*https://github\.com/([^/\s]+/[^/\s]+)/blob/[0-9a-f]{40}/", re.M)
_HELD_OUT = re.compile(r"^#\s*held-out:\s*yes\b", re.M)


@dataclass
class Row:
    path: Path
    label: Optional[str]
    findings: int = 0
    fixed: int = 0
    proposed: bool = False
    verdicts: list[str] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)
    error: Optional[str] = None
    # Dynamic ref accesses the jaxpr oracle finds at this file's lines, by kind ("slice",
    # "int_array", "scalar"); None when not traced (real corpus only).
    jaxpr_accesses: Optional[dict[str, int]] = None
    # --verify: a kernel's rewrite verified but held back because it only trades speed for
    # memory (written with --lift-for-memory): not lifted by plain --apply, not a refusal either.
    held: bool = False

    @property
    def outcome(self) -> str:
        """FIXED / PARTIAL (a rewrite that removes every / some findings), held (verified, held
        back for speed), refused, no finding."""
        if self.error:
            return "error"
        if not self.findings:
            return "no finding"
        if self.proposed and self.fixed >= self.findings:
            return "FIXED"
        if self.proposed and self.fixed:
            return "PARTIAL"
        return "held" if self.held else "refused"

    @property
    def lifted(self) -> bool:
        return self.outcome in ("FIXED", "PARTIAL")

    @property
    def verified(self) -> bool:
        return bool(self.verdicts) and all(v == "verified" for v in self.verdicts)

    @property
    def differs(self) -> bool:
        return any(v == "mismatch" for v in self.verdicts)


def blind_files(held_out_only: bool) -> list[Path]:
    files = sorted(BLIND.glob("*.py"))
    if not held_out_only:
        return files
    readme = (BLIND / "README.md").read_text(encoding="utf-8")
    held = readme.split("## Held out", 1)[1] if "## Held out" in readme else ""
    names = set(re.findall(r"`?([\w]+\.py)`?", held))
    return [f for f in files if f.name in names]


def real_files(held_out: bool) -> list[Path]:
    """The real corpus's files held out (`# held-out: yes`) or not."""
    return [p for p in sorted(REAL.glob("*.py"))
            if bool(_HELD_OUT.search(p.read_text(encoding="utf-8"))) == held_out]


def repository(path: Path) -> str:
    m = _SOURCE.search(path.read_text(encoding="utf-8"))
    return m.group(1) if m else "(no source line)"


def jax_files() -> list[Path]:
    import jax

    ops = Path(jax.__file__).parent / "experimental" / "pallas" / "ops"
    return sorted(p for p in ops.rglob("*.py") if "pallas_call" in p.read_text(encoding="utf-8"))


def measure(path: Path, verify: bool, opts: Options) -> Row:
    text = path.read_text(encoding="utf-8")
    m = _LABEL.search(text)
    row = Row(path, m.group(1) if m else None)
    report = analyse_file(str(path), opts)
    if report.error:
        row.error = report.error
        return row
    row.findings = len(report.findings)
    row.refusals = [f.refusal for f in report.remaining if f.refusal and not f.fixable]
    if verify:
        # What plain `--apply` writes: each kernel's rewrite verified on the file's example,
        # accepted whatever its safety class once verified (rewrite_kernels, per kernel).
        rewrite, problem = rewrite_kernels(report, opts, gpu=report.gpu_interpret)
        accepted = rewrite.accepted() if rewrite is not None and not rewrite.error else []
        row.proposed = bool(accepted)
        row.held = any(k.status == "refused" and OPTION in k.reason for k in (rewrite.kernels if rewrite else []))
        row.fixed = max(0, len(report.findings) - len(rewrite.remaining)) if accepted else 0
        statuses = [v.status for k in (rewrite.kernels if rewrite else []) for v in k.verdicts]
        failed = [k.status for k in (rewrite.kernels if rewrite else []) if k.status == "failed"]
        row.verdicts = statuses + failed or [f"example problem: {problem}" if problem else "no example"]
        if rewrite is not None and not rewrite.error:  # what is left as --apply says it (facts from the examples included)
            row.refusals = [f.refusal for f in rewrite.remaining if f.refusal and not f.fixable]
        return row
    row.proposed = report.proposed is not None
    row.fixed = max(0, len(report.findings) - len(report.remaining)) if row.proposed else 0
    return row


def summarise(name: str, rows: list[Row], verify: bool) -> None:
    print(f"\n== {name}: {len(rows)} files")
    print(f"{'file':48} {'label':7} {'find':>4} {'fixed':>5}  outcome")
    for r in rows:
        outcome = r.error or ("proposed" if r.proposed else "refused")
        if r.verdicts:
            outcome += " / " + ",".join(sorted(set(r.verdicts)))
        print(f"{r.path.name[:48]:48} {r.label or '-':7} {r.findings:4} {r.fixed:5}  {outcome}")
    _summary_lines(rows, verify)


def _summary_lines(rows: list[Row], verify: bool) -> None:
    """Fix-labelled share, differing outputs, wrong-way rewrites, totals and the refusal histogram."""
    labelled = [r for r in rows if r.label == "fix"]
    if labelled:
        line = f"fix-labelled: {sum(1 for r in labelled if r.proposed)} of {len(labelled)} get a rewrite"
        if verify:
            line += f", {sum(1 for r in labelled if r.verified)} of {len(labelled)} verified"
        line += f" ({sum(1 for r in labelled if r.proposed and not r.fixed)} of them remove no finding)"
        print(line)
    if verify:
        print(f"rewrites whose outputs differ: {sum(1 for r in rows if r.differs)}")
    wrong_way = [r.path.name for r in rows if r.label == "refuse" and r.proposed]
    if wrong_way:
        print(f"refuse-labelled files that got a rewrite (check them): {', '.join(wrong_way)}")
    print(f"files with findings: {sum(1 for r in rows if r.findings)}; findings {sum(r.findings for r in rows)}, "
          f"fixed {sum(r.fixed for r in rows)}")
    histogram = collections.Counter(_DETAILS.sub("…", reason) for r in rows for reason in set(r.refusals))
    if histogram:
        print("refusal reasons (files):")
        # Ties in count are ordered by text: set iteration follows string hashing, which changes
        # between runs, and two runs of the same tree must print the same histogram to be diffed.
        for reason, n in sorted(histogram.items(), key=lambda kv: (-kv[1], kv[0]))[:15]:
            print(f"  {n:3}  {reason[:150]}")


def jaxpr_accesses(path: Path) -> Optional[dict[str, int]]:
    """Dynamic ref accesses in the kernels the file's examples trace to, at this file's lines, counted
    by kind (distinct line, kind, dim); None when the file has no example.
    Array arguments are traced; every other example value (keyword or positional) stays static."""
    import importlib.util

    from pallas_fix.verify.examples.sources import collect_examples
    from pallas_fix.verify.judge.oracle import example_report

    text = path.read_text(encoding="utf-8")
    examples = collect_examples(path, text, pyproject=False, recorded=False)
    if not examples:
        return None
    spec = importlib.util.spec_from_file_location(f"_real_{path.stem.replace('-', '_')}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    lines: set[tuple[int, str, int]] = set()
    for ex in examples:
        report = example_report(getattr(module, ex.entry), ex)
        lines |= {(a.line, a.kind, a.dim) for a in report.accesses
                  if a.line is not None and a.file and Path(a.file).name == path.name}
    return dict(collections.Counter(kind for _, kind, _ in lines))


def _first_reason(row: Row) -> str:
    return _DETAILS.sub("…", row.refusals[0])[:110] if row.refusals else "(no refusal text)"


def _jaxpr_text(row: Row) -> str:
    if row.jaxpr_accesses is None:
        return "-"
    return " ".join(f"{k}:{n}" for k, n in sorted(row.jaxpr_accesses.items())) or "none"


def summarise_real(name: str, rows: list[Row], verify: bool) -> None:
    """Per file (with the jaxpr oracle's counts), the shared summary, then per repository, the
    fix/either lift share and where the oracle and the findings disagree."""
    print(f"\n== {name}: {len(rows)} files")
    print(f"{'file':44} {'label':7} {'find':>4} {'fixed':>5}  {'outcome':10} {'jaxpr accesses':24} verdicts")
    for r in rows:
        # "no example" is measure's placeholder when no kernel got a rewrite to verify.
        verdicts = "" if r.verdicts == ["no example"] else ",".join(sorted(set(r.verdicts)))
        print(f"{r.path.name[:44]:44} {r.label or '-':7} {r.findings:4} {r.fixed:5}  {r.outcome:10} "
              f"{_jaxpr_text(r):24} {verdicts}")
    if not rows:
        return
    _summary_lines(rows, verify)
    by_repo: dict[str, list[Row]] = collections.defaultdict(list)
    for r in rows:
        by_repo[repository(r.path)].append(r)
    print(f"per repository ({'verified' if verify else 'unverified'} rewrites):")
    print(f"  {'repository':34} {'files':>5} {'fix/eith/ref':>12} {'find':>4} {'FIXED':>5} {'PART':>4} {'verif':>5}")
    for repo in sorted(by_repo):
        rs = by_repo[repo]
        labels = "/".join(str(sum(1 for r in rs if r.label == lab)) for lab in ("fix", "either", "refuse"))
        print(f"  {repo[:34]:34} {len(rs):5} {labels:>12} {sum(r.findings for r in rs):4} "
              f"{sum(1 for r in rs if r.outcome == 'FIXED'):5} {sum(1 for r in rs if r.outcome == 'PARTIAL'):4} "
              f"{sum(1 for r in rs if r.verified):5}")
        for r in rs:
            if r.findings and not r.lifted:
                why = "verified, held back as slower (written with --lift-for-memory)" if r.held else _first_reason(r)
                print(f"      {r.outcome} {r.path.name}: {why}")
    wanted = [r for r in rows if r.label in ("fix", "either")]
    if wanted:
        print(f"fix/either lifted (FIXED or PARTIAL): {sum(1 for r in wanted if r.lifted)} of {len(wanted)}")
        held = [r.path.name for r in wanted if r.outcome == "held"]
        if held:
            print(f"fix/either verified but held back for speed (written with --lift-for-memory): {len(held)}: {', '.join(held)}")
    # Windows (dynamic slices, integer-array indices) need a finding; a scalar index alone may be
    # the fix form already (a scalar-prefetch table read by program id).
    windows = [r.path.name for r in rows if not r.findings and r.jaxpr_accesses
               and (r.jaxpr_accesses.get("slice") or r.jaxpr_accesses.get("int_array"))]
    scalars = [r.path.name for r in rows if not r.findings and r.jaxpr_accesses and r.path.name not in windows]
    print(f"dynamic windows in the jaxpr but no finding: {', '.join(windows) or 'none'}")
    print(f"only scalar indices in the jaxpr and no finding: {', '.join(scalars) or 'none'}")
    untraced = [r.path.name for r in rows if r.jaxpr_accesses is None]
    if untraced:
        print(f"not traced by the oracle: {', '.join(untraced)}")


def measure_real(path: Path, verify: bool, opts: Options) -> Row:
    row = measure(path, verify, opts)
    try:
        row.jaxpr_accesses = jaxpr_accesses(path)
    except Exception as exc:  # a file the oracle cannot trace is listed, not fatal
        print(f"oracle: {path.name}: {type(exc).__name__}: {exc}"[:200], file=sys.stderr)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", choices=("blind", "blind2", "blind3", "real", "jax", "both", "all"), default="both")
    ap.add_argument("--verify", action="store_true", help="verify every proposed rewrite (slow)")
    ap.add_argument("--held-out-only", action="store_true", help="only the held-out files (blind and real corpora)")
    ap.add_argument("--backend", default=None, help="override backend detection (e.g. tpu)")
    args = ap.parse_args()
    # Without --verify: the safe fixes plain --apply writes unverified. With it: what plain --apply
    # writes when the file's example verifies each kernel's rewrite (verified unsafe fixes too).
    opts = Options(verify=args.verify, backend=args.backend)
    if args.corpus in ("blind", "both", "all"):
        summarise("blind corpus", [measure(p, args.verify, opts) for p in blind_files(args.held_out_only)], args.verify)
    if args.corpus in ("blind2", "all"):
        summarise("second blind corpus (held out)", [measure(p, args.verify, opts) for p in sorted(BLIND2.glob("*.py"))], args.verify)
    if args.corpus in ("blind3", "all"):
        summarise("third blind corpus (held out)", [measure(p, args.verify, opts) for p in sorted(BLIND3.glob("*.py"))], args.verify)
    if args.corpus in ("real", "all"):
        if not args.held_out_only:
            summarise_real("real corpus (tuning part)", [measure_real(p, args.verify, opts) for p in real_files(False)], args.verify)
        summarise_real("real corpus (held out)", [measure_real(p, args.verify, opts) for p in real_files(True)], args.verify)
    if args.corpus in ("jax", "both", "all"):
        summarise("JAX's Pallas ops (installed jax)", [measure(p, args.verify, opts) for p in jax_files()], args.verify)


if __name__ == "__main__":
    main()
