"""Coverage: how much of the kernels people write pallas-fix fixes, and why it refuses the rest.

Four corpora:
- the blind corpus, tests/fixtures/blind/ (kernels written without reading the planners, each
  labelled `# label: fix | either | refuse` and carrying an example call; its held-out files are
  listed in its README),
- the second blind corpus, tests/fixtures/blind2/ (written the same way by another session after
  the first was in the tuning loop; held out as a whole: no planner work looks at it; its
  refusals were later described to the sessions that built the lifts, without its code),
- the third blind corpus, tests/fixtures/blind3/ (written by a fresh session while those lifts
  were built; held out as a whole: no session that builds planners opens it), and
- JAX's own Pallas kernels, read at run time from the installed jax package
  (jax/experimental/pallas/ops/**).

Per kernel file: findings, whether a rewrite is proposed, what it fixed, and (with --verify) the
verification verdicts; then the share of fix-labelled blind kernels fixed (and verified), the
rewrites that changed outputs, and a histogram of refusal reasons.

    .venv/bin/python benchmarks/bench_coverage.py                 # proposals only (seconds)
    .venv/bin/python benchmarks/bench_coverage.py --verify        # verify every proposal (minutes)
    .venv/bin/python benchmarks/bench_coverage.py --corpus blind --held-out-only --verify
    .venv/bin/python benchmarks/bench_coverage.py --corpus blind2 --verify
    .venv/bin/python benchmarks/bench_coverage.py --corpus blind3 --verify
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

from pallas_fix.frontends.service import Options, analyse_file, rewrite_kernels  # noqa: E402

BLIND = ROOT / "tests" / "fixtures" / "blind"
BLIND2 = ROOT / "tests" / "fixtures" / "blind2"
BLIND3 = ROOT / "tests" / "fixtures" / "blind3"
_LABEL = re.compile(r"^#\s*label:\s*(fix|either|refuse)\b", re.M)
# Refusal texts name the place they refer to (`x_ref`, line numbers): a histogram groups by shape.
_DETAILS = re.compile(r"`[^`]*`|\b\d+\b")


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
        row.fixed = max(0, len(report.findings) - len(rewrite.remaining)) if accepted else 0
        statuses = [v.status for k in (rewrite.kernels if rewrite else []) for v in k.verdicts]
        failed = [k.status for k in (rewrite.kernels if rewrite else []) if k.status == "failed"]
        row.verdicts = statuses + failed or [f"example problem: {problem}" if problem else "no example"]
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", choices=("blind", "blind2", "blind3", "jax", "both", "all"), default="both")
    ap.add_argument("--verify", action="store_true", help="verify every proposed rewrite (slow)")
    ap.add_argument("--held-out-only", action="store_true", help="only the blind corpus's held-out files")
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
    if args.corpus in ("jax", "both", "all"):
        summarise("JAX's Pallas ops (installed jax)", [measure(p, args.verify, opts) for p in jax_files()], args.verify)


if __name__ == "__main__":
    main()
