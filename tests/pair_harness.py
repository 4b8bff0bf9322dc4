"""Golden before/after pairs and refusal fixtures for codemod tests, and the checks they share.

A fixture folder holds

- `<name>_before.py` / `<name>_after.py`: the kernel as written and the text `fix_source` must
  turn it into. Each before-file carries an example directive
  (`# pallas-fix: example entry(f32[...])`) so that both kernels can be traced and run.
  `# pallas-fix-test: remaining N` in the before-file declares a partial rewrite: N dynamic slices
  are left in the after-file (0 when absent).
- `refuse_<name>.py`: a kernel that must come out unchanged, with
  `# pallas-fix-test: refusal <substring>` naming a fragment of the refusal reason some finding
  must carry.

The checks are plain functions (they raise AssertionError with a readable message), so test
modules only parametrize and decide what is expected to fail. Interpreter runs are the slow part
(one worker process per pair); `VerdictPool` starts all the runs a session selected, a few at a
time, when the first test asks for one.
"""

from __future__ import annotations

import difflib
import os
import subprocess
import sys
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Optional

from kernel_loading import abstract_args, file_flags, load_module

REPO = Path(__file__).resolve().parents[1]


# =========================================================================== discovery


@dataclass(frozen=True)
class Pair:
    name: str
    before: Path
    after: Path

    @property
    def before_source(self) -> str:
        return self.before.read_text(encoding="utf-8")

    @property
    def after_source(self) -> str:
        return self.after.read_text(encoding="utf-8")

    @property
    def remaining(self) -> int:
        return declared_remaining(self.before_source)

    def __str__(self) -> str:  # pytest ids
        return self.name


def pairs(folder: Path) -> list[Pair]:
    """Every `<name>_before.py` in `folder` with its after-file (which may be missing: see
    `check_fixture_set`)."""
    out = []
    for before in sorted(folder.glob("*_before.py")):
        name = before.name.removesuffix("_before.py")
        out.append(Pair(name, before, before.with_name(f"{name}_after.py")))
    return out


def refusals(folder: Path) -> list[Path]:
    return sorted(folder.glob("refuse_*.py"))


def declared_remaining(source: str) -> int:
    flag = file_flags(source, "remaining")
    if flag is None:
        return 0
    if not flag.isdigit():
        raise ValueError(f"`# pallas-fix-test: remaining` wants a number, got {flag!r}")
    return int(flag)


def declared_refusal(source: str) -> Optional[str]:
    flag = file_flags(source, "refusal")
    return flag or None


def check_fixture_set(folder: Path, *, min_pairs: int, min_refusals: int, blocked: Iterable[str] = ()) -> None:
    """The folder is well formed: enough pairs and refusals, every pair complete and runnable,
    every refusal declaring its reason, every blocked name an existing pair."""
    from pallas_fix.verify.example_sources import collect_examples

    found = pairs(folder)
    names = {p.name for p in found}
    assert len(found) >= min_pairs, f"{len(found)} pairs in {folder}, want at least {min_pairs}"
    missing = [p.after.name for p in found if not p.after.exists()]
    assert not missing, f"before-files without an after-file: {missing}"
    no_example = [p.name for p in found if not collect_examples(p.before, p.before_source, pyproject=False)]
    assert not no_example, f"pairs without an example directive: {no_example}"
    unknown = sorted(set(blocked) - names)
    assert not unknown, f"blocked names with no pair: {unknown}"
    refs = refusals(folder)
    assert len(refs) >= min_refusals, f"{len(refs)} refusal fixtures in {folder}, want at least {min_refusals}"
    undeclared = [r.name for r in refs if declared_refusal(r.read_text(encoding="utf-8")) is None]
    assert not undeclared, f"refusal fixtures without `# pallas-fix-test: refusal ...`: {undeclared}"


# =========================================================================== rewriting


def rewrite(source: str, path: Path, **kwargs):
    """`fix_source` as the CLI runs it (every enabled planner, one plan per round)."""
    from pallas_fix.engine import fix_source

    return fix_source(source, str(path), **kwargs)


def text_diff(expected: str, actual: str, name: str = "") -> str:
    lines = difflib.unified_diff(
        expected.splitlines(keepends=True),
        actual.splitlines(keepends=True),
        fromfile=f"golden {name}",
        tofile=f"produced {name}",
    )
    return "".join(lines)


def check_golden(pair: Pair, **kwargs) -> None:
    """`fix_source(before)` is byte-for-byte the after-file."""
    result = rewrite(pair.before_source, pair.before, **kwargs)
    assert result.error is None, result.error
    assert result.changed, "nothing was rewritten; remaining: " + "; ".join(
        f"{f.span.line}: {f.code} {f.refusal}" for f in result.remaining
    )
    expected = pair.after_source
    assert result.source == expected, "rewrite differs from the golden file:\n" + text_diff(expected, result.source, pair.name)


def check_idempotent(pair: Pair, **kwargs) -> None:
    """Running the tool on its own output changes nothing."""
    src = pair.after_source
    result = rewrite(src, pair.after, **kwargs)
    assert result.error is None, result.error
    assert result.source == src, "a second run rewrote the after-file:\n" + text_diff(src, result.source, pair.name)


def check_refusal(path: Path, **kwargs) -> None:
    """The file comes out unchanged and some finding's refusal carries the declared fragment."""
    from pallas_fix.engine import analyze_source

    src = path.read_text(encoding="utf-8")
    fragment = declared_refusal(src)
    assert fragment, f"{path.name} declares no `# pallas-fix-test: refusal ...`"
    result = rewrite(src, path, **kwargs)
    assert result.error is None, result.error
    assert result.source == src, "a refusal fixture was rewritten:\n" + text_diff(src, result.source, path.name)
    reasons = [f.refusal for f in analyze_source(src, str(path)).findings if f.refusal]
    assert any(fragment in r for r in reasons), f"no refusal contains {fragment!r}; refusals: {reasons}"


# =========================================================================== jaxpr oracle


def trace_reports(path: Path, source: Optional[str] = None) -> list:
    """One oracle report per example of the file (the example's entry traced, nothing run)."""
    from pallas_fix.verify.oracle import trace_report
    from pallas_fix.verify.example_sources import collect_examples

    src = path.read_text(encoding="utf-8") if source is None else source
    examples = collect_examples(path, src, pyproject=False)
    assert examples, f"{path.name} has no example directive"
    module = load_module(path, source)
    reports = []
    for ex in examples:
        args, kwargs = abstract_args(ex)
        reports.append(trace_report(getattr(module, ex.entry), *args, **kwargs))
    return reports


def check_oracle_counts(pair: Pair) -> None:
    """The after-file has exactly the declared number of dynamic slices left (0 unless the pair
    says `remaining N`), and fewer than the before-file."""
    before = trace_reports(pair.before)
    after = trace_reports(pair.after)
    for old, new in zip(before, after):
        left = new.dynamic_slices()
        assert new.pallas_calls == old.pallas_calls, "the rewrite changed the number of pallas_calls"
        assert len(left) == pair.remaining, (
            f"{len(left)} dynamic slices left in the after-file (lines {sorted(new.lines())}), "
            f"the pair declares {pair.remaining}"
        )
        assert len(old.dynamic_slices()) > len(left), "the before-file has no more dynamic slices than the after-file"


def check_real_kernel(path: Path) -> None:
    """A refusal fixture traces and does have dynamic slices: it is refused, not just clean."""
    reports = trace_reports(path)
    assert any(r.dynamic_slices() for r in reports), f"{path.name} has no dynamic slice for the oracle"


# =========================================================================== interpreters


def verify_pair(pair: Pair, *, timeout_s: float = 240, **kwargs) -> list:
    """Both kernels through the interpreters on the file's examples: one Verdict per example."""
    from pallas_fix.verify.example_sources import collect_examples
    from pallas_fix.verify.runner import verify_sources

    src = pair.before_source
    examples = collect_examples(pair.before, src, pyproject=False)
    assert examples, f"{pair.before.name} has no example directive"
    return verify_sources(src, pair.after_source, examples, path=str(pair.before), timeout_s=timeout_s, **kwargs)


def check_verdicts(pair: Pair, verdicts: list) -> None:
    assert verdicts, "no verdict"
    for v in verdicts:
        assert v.status == "verified", f"{v.status}: {v.message}"
        if v.dynamic_slices_after is not None:
            assert v.dynamic_slices_after == pair.remaining, (v.dynamic_slices_before, v.dynamic_slices_after)


class VerdictPool:
    """Verdicts per pair, computed in the background a few workers at a time.

    `start(session)` launches the runs of every pair that the session's selected items of
    `test_name` parametrize (their `pair` argument), so `-k` selections stay cheap; call it early
    (an autouse module fixture) and the worker processes overlap with the in-process tests. `get`
    waits for one pair's verdicts, verifying on demand a pair that was not announced.
    """

    def __init__(self, test_name: str, workers: int = 2, verify: Callable[[Pair], list] = verify_pair) -> None:
        self.test_name = test_name
        self.workers = workers
        self.verify = verify
        self._futures: dict[str, Future] = {}
        self._lock = threading.Lock()
        self._started = False

    def start(self, session) -> None:
        with self._lock:
            if self._started:
                return
            self._started = True
            selected = [
                item.callspec.params["pair"]
                for item in session.items
                if getattr(item, "originalname", None) == self.test_name
                and hasattr(item, "callspec")
                and "pair" in item.callspec.params
            ]
            if not selected:
                return
            pool = ThreadPoolExecutor(max_workers=self.workers)
            for p in selected:
                self._futures.setdefault(p.name, pool.submit(self.verify, p))
            pool.shutdown(wait=False)

    def get(self, request, pair: Pair) -> list:
        self.start(request.session)
        with self._lock:
            future = self._futures.get(pair.name)
        return future.result() if future is not None else self.verify(pair)


# =========================================================================== LibCST's runner


def run_libcst_codemod(codemod: str, source: str, workdir: Path, filename: str = "kernel.py") -> str:
    """Run `python -m libcst.tool codemod -x <codemod>` on a copy of `source`; the file's new text.

    `--no-format`: LibCST would otherwise pipe the result through black, which is not what the
    CLI does.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    target = workdir / filename
    target.write_text(source, encoding="utf-8")
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("JAX_PLATFORMS", "cpu")
    proc = subprocess.run(
        [sys.executable, "-m", "libcst.tool", "codemod", "-x", codemod, "--no-format", "--hide-progress", filename],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, f"libcst.tool exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return target.read_text(encoding="utf-8")
