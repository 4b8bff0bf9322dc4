"""Golden before/after pairs and refusal fixtures for codemod tests, and the checks they share.

The fixtures of each codemod live in tests/fixtures/codemods/<codemod module>/ (the file name of
its recipe in codemods/: lift_loop/, program_id_blocks/, lift_reduction/, traced_constant/,
scalar_start/, contiguous_window/, static_unroll/, grid_to_loop/, scalar_prefetch/); `FAMILIES` says how each folder is run
(target, unsafe fixes, refusal style, ...), and tests/test_codemod_pairs.py runs every check that
applies to every pair and refusal. A fixture folder holds

- `<name>_before.py` / `<name>_after.py`: the kernel as written and the text `fix_source` must
  turn it into. Each before-file carries an example directive
  (`# pallas-fix: example entry(f32[...])`) so that both kernels can be traced and run.
  `# pallas-fix-test: remaining N` in the before-file declares a partial rewrite: N dynamic slices
  are left in the after-file (0 when absent).
- `refuse_<name>.py`: a kernel that must come out unchanged, with
  `# pallas-fix-test: refusal <substring>` naming a fragment of the refusal reason some finding
  must carry (the "declared" style), or, in traced_constant/, scalar_start/ and contiguous_window/
  (the "marked" style), a `# refuse: <words>` comment ending every line whose finding must be refused with a
  reason containing <words>.

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

from kernel_loading import FIXTURES, abstract_args, file_flags, load_module

REPO = Path(__file__).resolve().parents[1]
CODEMOD_FIXTURES = FIXTURES / "codemods"


# =========================================================================== discovery


@dataclass(frozen=True)
class Pair:
    name: str
    before: Path
    after: Path
    family: str = ""  # the codemod folder (tests/fixtures/codemods/<family>/)

    @property
    def before_source(self) -> str:
        return self.before.read_text(encoding="utf-8")

    @property
    def after_source(self) -> str:
        return self.after.read_text(encoding="utf-8")

    @property
    def remaining(self) -> int:
        return declared_remaining(self.before_source)

    @property
    def key(self) -> str:
        """Unique across folders (names need not be)."""
        return f"{self.family}/{self.name}"

    def __str__(self) -> str:  # pytest ids
        return self.name


def pairs(folder: Path) -> list[Pair]:
    """Every `<name>_before.py` in `folder` with its after-file (which may be missing: see
    `check_fixture_set`)."""
    out = []
    for before in sorted(folder.glob("*_before.py")):
        name = before.name.removesuffix("_before.py")
        out.append(Pair(name, before, before.with_name(f"{name}_after.py"), folder.name))
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
    from pallas_fix.verify.examples.sources import collect_examples

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
    # The reasons under the same configuration as the rewrite (e.g. `--target gpu-interpret`).
    reasons = [f.refusal for f in analyze_source(src, str(path), kwargs.get("config")).findings if f.refusal]
    assert any(fragment in r for r in reasons), f"no refusal contains {fragment!r}; refusals: {reasons}"


# =========================================================================== jaxpr oracle


def trace_reports(path: Path, source: Optional[str] = None) -> list:
    """One oracle report per example of the file (the example's entry traced, nothing run)."""
    from pallas_fix.verify.judge.oracle import trace_report
    from pallas_fix.verify.examples.sources import collect_examples

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
        # A scalar lift (a squeezed dim) leaves as many slices and fewer dynamic scalar indices.
        counts = lambda rep: (len(rep.dynamic_slices()), len(rep.scalars()))
        if file_flags(pair.before_source, "walk-kept") is not None:
            # A traced walk inside the program's new block stays dynamic (program-id-blocks' offset
            # windows); tests/test_pid_offset_windows.py checks in the jaxpr that it indexes the block.
            assert counts(old) == counts(new), "a kept walk leaves as many dynamic slices as before"
            continue
        assert counts(old) > counts(new), "the before-file has no more dynamic slices (or scalar indices) than the after-file"


def check_real_kernel(path: Path) -> None:
    """A refusal fixture traces and does have dynamic slices (or scalar indices, which become
    squeezed block dims): it is refused, not just clean."""
    reports = trace_reports(path)
    assert any(r.dynamic_slices() or r.scalars() for r in reports), f"{path.name} has no dynamic index for the oracle"


# =========================================================================== interpreters


# In a before-file: its rewrite keeps the kernel's position reads under a partial last block
# (rewrite.proofs.ragged_blocks), so verification compares only examples whose blocks divide.
DIVIDED_ONLY = "# pallas-fix-test: divided-only"


def verify_pair(pair: Pair, *, timeout_s: float = 240, **kwargs) -> list:
    """Both kernels through the interpreters on the file's examples: one Verdict per example."""
    from pallas_fix.verify.examples.sources import collect_examples
    from pallas_fix.verify.runner import verify_sources

    src = pair.before_source
    examples = collect_examples(pair.before, src, pyproject=False)
    assert examples, f"{pair.before.name} has no example directive"
    if DIVIDED_ONLY in src:  # a lift the interpreters judge only where its blocks divide (core.plans.FixPlan)
        kwargs.setdefault("divided_only", True)
    return verify_sources(src, pair.after_source, examples, path=str(pair.before), timeout_s=timeout_s, **kwargs)


def check_verdicts(pair: Pair, verdicts: list) -> None:
    assert verdicts, "no verdict"
    for v in verdicts:
        assert v.status == "verified", f"{v.status}: {v.message}"
        if v.dynamic_slices_after is not None:
            assert v.dynamic_slices_after == pair.remaining, (v.dynamic_slices_before, v.dynamic_slices_after)


class VerdictPool:
    """Verdicts per pair, computed in the background a few workers at a time.

    `start(session)` launches the runs of every pair that the session's selected items of the
    tests named in `test_names` parametrize (their `pair` argument), so `-k` selections stay
    cheap; call it early (an autouse module fixture) and the worker processes overlap with the
    in-process tests. `get` waits for one pair's verdicts, verifying on demand a pair that was not
    announced. Pairs are keyed by `Pair.key`, so several tests (in several modules) asking for the
    same pair share one run.
    """

    def __init__(self, test_names, workers: int = 2, verify: Callable[[Pair], list] = verify_pair) -> None:
        self.test_names = {test_names} if isinstance(test_names, str) else set(test_names)
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
                if getattr(item, "originalname", None) in self.test_names
                and hasattr(item, "callspec")
                and isinstance(item.callspec.params.get("pair"), Pair)
            ]
            if not selected:
                return
            pool = ThreadPoolExecutor(max_workers=self.workers)
            for p in selected:
                if p.key not in self._futures:
                    self._futures[p.key] = pool.submit(self.verify, p)
            pool.shutdown(wait=False)

    def get(self, request, pair: Pair) -> list:
        self.start(request.session)
        with self._lock:
            future = self._futures.get(pair.key)
        return future.result() if future is not None else self.verify(pair)


# =========================================================================== LibCST's runner


def run_libcst_codemod(codemod: str, source: str, workdir: Path, filename: str = "kernel.py") -> str:
    """Run `python -m libcst.tool codemod -x <codemod>` on a copy of `source`; the file's new text."""
    workdir.mkdir(parents=True, exist_ok=True)
    target = workdir / filename
    target.write_text(source, encoding="utf-8")
    _libcst_tool(codemod, [filename], workdir)
    return target.read_text(encoding="utf-8")


def run_libcst_codemod_files(codemod: str, files: Iterable[Path], workdir: Path, *, pyproject: str = "") -> dict[str, str]:
    """Run `python -m libcst.tool codemod -x <codemod>` once over copies of `files` (one job, so the
    files are handled in order); {file name: new text}. `pyproject`: a [tool.pallas-fix] table to
    write next to them (the runner reads the nearest pyproject.toml)."""
    workdir.mkdir(parents=True, exist_ok=True)
    if pyproject:
        (workdir / "pyproject.toml").write_text(pyproject, encoding="utf-8")
    names = []
    for f in files:
        (workdir / f.name).write_text(f.read_text(encoding="utf-8"), encoding="utf-8")
        names.append(f.name)
    _libcst_tool(codemod, names, workdir, "-j", "1")
    return {n: (workdir / n).read_text(encoding="utf-8") for n in names}


def _libcst_tool(codemod: str, names: list[str], workdir: Path, *options: str) -> None:
    """`--no-format`: LibCST would otherwise pipe the result through black, which is not what the
    CLI does."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("JAX_PLATFORMS", "cpu")
    proc = subprocess.run(
        [sys.executable, "-m", "libcst.tool", "codemod", "-x", codemod, "--no-format", "--hide-progress", *options, *names],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, f"libcst.tool exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"


# =========================================================================== codemod families


@dataclass(frozen=True)
class Family:
    """How the fixtures of one codemod folder are run (tests/fixtures/codemods/<folder>/)."""

    folder: str
    codemod: str  # the name `fix_id` / `Plan.codemod` / `--codemod` use
    codes: frozenset  # the rule codes whose findings it fixes
    libcst: str  # its class in pallas_fix.frontends.libcst_commands
    target: Optional[str] = None  # `--target`
    unsafe: bool = False  # every rewrite needs unsafe fixes
    unsafe_pairs: frozenset = frozenset()  # the pairs that need them, when not every one does
    only: bool = False  # rewrite with this codemod alone (`codemods={codemod}`, `Config()`)
    refusal_style: str = "declared"  # "declared" (`# pallas-fix-test: refusal`) or "marked" (`# refuse:`)
    # The jaxpr check of what stays dynamic: "declared" (exactly `remaining N` dynamic slices left),
    # "fewer" (static detection agrees with the jaxpr; fewer dynamic slices), "int_starts" (static
    # detection agrees; no start left that is not an integer scalar), "windows" (static detection
    # agrees; no integer-array index left, each now a window), None (not checked).
    oracle: Optional[str] = "declared"
    min_pairs: int = 1
    min_refusals: int = 1
    real_refusals: bool = True  # the refusal fixtures have dynamic slices for the oracle
    gpu_interpret: bool = False  # verify in GPU interpret mode too
    verify_timeout_s: Optional[float] = None
    # Pairs the interpreters do not run: unsafe pairs and one-element pairs (a `def reference(`
    # stands in for an original the HLO interpreter cannot run).
    interp_skips_unsafe_and_reference: bool = False
    one_verdict: bool = False  # exactly one verdict (one example) per pair
    libcst_pairs: Optional[tuple] = None  # pairs the LibCST runner must rewrite; None: every safe pair
    libcst_refusal: bool = False  # ... and it must leave the first refusal alone
    cli_select: Optional[str] = None  # `pallas-fix --apply --no-verify --select X` must agree
    applied_within: Optional[frozenset] = None  # every applied plan is one of these codemods
    tpu_pairs: frozenset = frozenset()  # pairs checked with `--backend tpu` (Config(backend=TPU))
    # Mosaic GPU pairs whose lift GPU interpret mode cannot run: checked with `--target compiled`
    # (by default such a kernel is presumed to run in GPU interpret mode and the lift is refused).
    compiled_pairs: frozenset = frozenset()
    # pairs rewritten with `--lift-for-memory` (Config(lift_for_memory=True)): a deliberate
    # strip-mine is only lifted on request
    memory_pairs: frozenset = frozenset()

    @property
    def path(self) -> Path:
        return CODEMOD_FIXTURES / self.folder

    def pairs(self) -> list[Pair]:
        return pairs(self.path)

    def refusals(self) -> list[Path]:
        return refusals(self.path)

    def config(self, name: str = ""):
        from pallas_fix.core.config import Config
        from pallas_fix.core.model import Backend

        backend = Backend.TPU if name in self.tpu_pairs else None
        target = "compiled" if name in self.compiled_pairs else self.target
        return Config(target=target or "default", backend=backend, lift_for_memory=name in self.memory_pairs)

    def needs_unsafe(self, name: str) -> bool:
        return self.unsafe or name in self.unsafe_pairs

    def fix_kwargs(self, name: str = "", *, unsafe: Optional[bool] = None) -> dict:
        """The keyword arguments of `fix_source` the family's tests have always used."""
        out: dict = {}
        if self.only:
            out["config"] = self.config(name)
            out["codemods"] = {self.codemod}
            out["unsafe"] = self.needs_unsafe(name) if unsafe is None else unsafe
            return out
        if self.target or name in self.tpu_pairs or name in self.compiled_pairs or name in self.memory_pairs:
            out["config"] = self.config(name)
        if unsafe if unsafe is not None else self.needs_unsafe(name):
            out["unsafe"] = True
        return out

    def interpreted(self, pair: Pair) -> bool:
        if not self.interp_skips_unsafe_and_reference:
            return True
        return not self.needs_unsafe(pair.name) and "def reference(" not in pair.before_source

    def verify(self, pair: Pair) -> list:
        kwargs: dict = {}
        if self.gpu_interpret:
            kwargs["gpu_interpret"] = True
        if self.verify_timeout_s:
            kwargs["timeout_s"] = self.verify_timeout_s
        return verify_pair(pair, **kwargs)


_GPU_CODEMODS = frozenset({"static-unroll", "grid-to-loop"})

FAMILIES: dict[str, Family] = {
    f.folder: f
    for f in (
        Family("lift_loop", "lift-loop", frozenset({"PF101"}), "LiftIndependentLoop",
               min_pairs=12, min_refusals=10, libcst_pairs=("pl_loop_decorator",),
               unsafe_pairs=frozenset({"stepped_loop_unsafe", "stepped_loop_reads_position_guarded",
                                     "stepped_loop_reads_position_triton"}),
               memory_pairs=frozenset({"larger_blockspec"}),
               compiled_pairs=frozenset({"augassign_start_mgpu", "extent_squeezed_rows_mgpu", "helper_slice_named_tuple",
                                         "reverse_shifted_mgpu_bf16", "scalar_row_and_window_mgpu", "scalar_rows_softmax_mgpu",
                                         "varargs_popped_optional_mgpu", "varargs_star_inputs_mgpu"})),
        Family("program_id_blocks", "program-id-blocks", frozenset({"PF103", "PF101"}), "ProgramIdBlocks",
               min_pairs=5, min_refusals=1, libcst_pairs=("pid_rows_2d",),
               unsafe_pairs=frozenset({"pid_ragged_cdiv_relu", "pid_ragged_cdiv_triton_bf16", "pid_ragged_position_triton",
                                     "pid_ragged_position_unmasked_triton", "pid_ragged_position_tpu", "pid_residual_rms_guarded",
                                     "pid_batch_rows_guarded", "pid_branch_bound_guarded", "pid_guard_once",
                                     "pid_branch_heads_guarded", "pid_module_cdiv_guarded", "pid_named_out_shape_guarded",
                                     "pid_folded_rows_guarded_triton", "pid_ragged_lockstep_triton", "pid_defaulted_grid_triton",
                                     "pid_offset_cdiv_guarded", "pid_variants_ragged_masks_triton",
                                     "pid_variants_flat_leaves_triton", "pid_ragged_round_up_triton",
                                     "pid_ragged_round_up_position_tpu", "pid_ragged_minus_one_relu",
                                     "pid_aliased_sgd_masked_triton", "pid_variants_unpacked_layout_triton", "pid_extent_keyword_per_line_triton",
                                     "pid_masked_output_sized_by_other_triton",
                                     "pid_partial_dict_kwargs_extent_triton"})),
        Family("lift_reduction", "lift-reduction", frozenset({"PF101", "PF102"}), "LiftReduction", unsafe=True,
               min_pairs=7, min_refusals=4, libcst_pairs=("matmul_tpu",), memory_pairs=frozenset({"strip_mined_rows"}),
               compiled_pairs=frozenset({"extent_squeezed_row_sum_mgpu", "induction_plloop_mgpu", "result_method_call_mosaic_gpu"})),
        Family("traced_constant", "traced-constant", frozenset({"PF104"}), "TracedConstantToInt", only=True,
               unsafe_pairs=frozenset({"nested", "partial"}), refusal_style="marked", oracle="fewer", min_pairs=4, real_refusals=False, verify_timeout_s=300,
               interp_skips_unsafe_and_reference=True, one_verdict=True, libcst_refusal=True, cli_select="PF104"),
        Family("scalar_start", "scalar-start", frozenset({"PF107"}), "ScalarStart", only=True,
               unsafe_pairs=frozenset({"unsafe"}), refusal_style="marked", oracle="int_starts", min_pairs=5,
               real_refusals=False, gpu_interpret=True, verify_timeout_s=300, interp_skips_unsafe_and_reference=True,
               one_verdict=True, libcst_refusal=True, cli_select="PF107"),
        Family("contiguous_window", "contiguous-window", frozenset({"PF108"}), "ContiguousWindow", unsafe=True, only=True,
               refusal_style="marked", oracle="windows", min_pairs=0, libcst_pairs=("rows_iota_loop", "triton_outer_product"),
               libcst_refusal=True),
        Family("static_unroll", "static-unroll", frozenset({"PF101", "PF102"}), "StaticUnroll", target="gpu-interpret",
               oracle=None, min_pairs=3, min_refusals=4, real_refusals=False, gpu_interpret=True,
               libcst_pairs=("unroll",), applied_within=_GPU_CODEMODS),
        Family("grid_to_loop", "grid-to-loop", frozenset({"PF201", "PF103"}), "GridToLoop", target="gpu-interpret",
               oracle=None, min_pairs=3, min_refusals=2, real_refusals=False, gpu_interpret=True,
               libcst_pairs=("grid_loop",), applied_within=_GPU_CODEMODS),
        Family("scalar_prefetch", "scalar-prefetch", frozenset({"PF105"}), "ScalarPrefetch", unsafe=True,
               min_pairs=4, min_refusals=13, libcst_pairs=("map_gather", "loop_gather"), tpu_pairs=frozenset({"seed_gather"})),
    )
}


# Pairs whose golden-text test is a strict xfail naming the bug, keyed `folder/name` (see
# tests/test_codemod_pairs.py); refusals likewise, keyed `folder/refuse_name`.
BLOCKED: dict[str, str] = {}
BLOCKED_REFUSALS: dict[str, str] = {}


def family_of(pair_or_path) -> Family:
    folder = pair_or_path.family if isinstance(pair_or_path, Pair) else pair_or_path.parent.name
    return FAMILIES[folder]


def codemod_pairs() -> list[Pair]:
    return [p for f in FAMILIES.values() for p in f.pairs()]


def codemod_refusals() -> list[Path]:
    return [r for f in FAMILIES.values() for r in f.refusals()]


def verify_codemod_pair(pair: Pair) -> list:
    return family_of(pair).verify(pair)


# The interpreter runs of the codemod pairs, shared by tests/test_codemod_pairs.py and the
# codemod-specific interpreter tests that look closer at the same verdicts.
VERDICTS = VerdictPool(
    (
        "test_pair_verified_in_the_interpreters",
        "test_reduce_verdicts_cover_tpu_interpret_and_keep_the_reduction_sequential",
        "test_rewrite_matches_the_reference_in_gpu_interpret_mode",
    ),
    verify=verify_codemod_pair,
)


def refuse_markers(source: str) -> dict[int, str]:
    """{line: words} for every line ending in `# refuse: <words>`."""
    import re

    out = {}
    for n, text in enumerate(source.splitlines(), 1):
        m = re.search(r"#\s*refuse:\s*(.+?)\s*$", text)
        if m:
            out[n] = m.group(1)
    return out


def check_marked_refusal(path: Path, family: Family) -> None:
    """A "marked" refusal fixture: unchanged with and without unsafe fixes, and the family's
    findings are exactly the marked lines, each refused with a reason containing its words."""
    from pallas_fix.engine import analyze_source

    src = path.read_text(encoding="utf-8")
    markers = refuse_markers(src)
    assert markers, f"{path.name} marks no line with `# refuse: ...`"
    for unsafe in (False, True):
        result = rewrite(src, path, **family.fix_kwargs(path.stem, unsafe=unsafe))
        assert result.error is None, result.error
        assert result.source == src, "a refusal fixture was rewritten:\n" + text_diff(src, result.source, path.name)
    findings = {f.span.line: f for f in analyze_source(src, str(path)).findings if f.code in family.codes}
    assert set(findings) == set(markers), "every finding of the code is a marked refusal"
    for line, words in markers.items():
        f = findings[line]
        assert not f.fixable
        assert f.refusal and words in f.refusal, (line, f.refusal)


def check_oracle_static(pair: Pair, kind: str) -> None:
    """Static detection and the jaxpr agree on what stays dynamic after the rewrite, and the
    fixed kind of slice is gone: `fewer` dynamic slices (a traced constant is an int32 Var in the
    jaxpr), or no `int_starts` violation left (a start that is not an integer scalar)."""
    import re

    from pallas_fix.core.plans import use_key
    from pallas_fix.engine import analyze_source

    (old,) = trace_reports(pair.before)
    (new,) = trace_reports(pair.after)
    result = analyze_source(pair.after_source, str(pair.after))
    scalar = {use_key(u) for u in result.uses if u.kind == "scalar"}  # the oracle's "scalar" kind, not a window
    remaining = {f.span.line for f in result.findings if f.anchor not in scalar}
    assert new.lines(str(pair.after)) == remaining
    if kind == "fewer":
        assert len(new.dynamic_slices()) < len(old.dynamic_slices())
    elif kind == "windows":
        gathers = lambda rep: [a for a in rep.accesses if a.kind == "int_array"]
        assert gathers(old), "the original indexes a ref with an integer array"
        assert gathers(new) == [], [a.line for a in gathers(new)]
        # A gather counts once per index array (`x_ref.at[rows[:, None], k]`: two), its window once.
        assert 0 < len(new.dynamic_slices()) <= len(old.dynamic_slices()), "the gathers became windows"
    elif kind == "int_starts":
        int_scalar = re.compile(r"u?int(8|16|32|64)\[\]")
        bad = lambda rep: [a for a in rep.dynamic_slices() if a.dynamic_start and not int_scalar.fullmatch(a.start_aval or "")]
        assert bad(old), "the original has a non-integer-scalar start"
        assert bad(new) == []
    else:
        raise AssertionError(f"unknown oracle kind {kind!r}")
