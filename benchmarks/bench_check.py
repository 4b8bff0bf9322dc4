"""Cost of `pallas-fix` analysis over a source tree vs. just parsing its kernel files with LibCST.

    .venv/bin/python benchmarks/bench_check.py [--files 2000] [--kernel-share 0.1] [--repeat 3]
    .venv/bin/python benchmarks/bench_check.py --profile      # cProfile of the in-process check
    .venv/bin/python benchmarks/bench_check.py --jax          # over the installed jax's Pallas sources
    .venv/bin/python benchmarks/bench_check.py --tree DIR     # over a copy of any source tree

A tree of ``--files`` modules is generated under a temporary directory: ``--kernel-share`` of them
are the kernel fixtures of ``tests/fixtures/detect`` with every module-level name renamed (so no
two files are the same text), the rest are ordinary Python modules of similar size that never
mention ``pallas_call``. Everything is measured in one run, side by side:

* baseline: read + ``libcst.parse_module`` of the kernel files only, in this process;
* ``analyze_source`` over the kernel texts (analysis alone, no file access);
* ``run_check`` over the whole tree in this process (walk, read, skip non-kernels, analyse,
  render JSON), with 1 and 2 workers;
* the ``pallas-fix`` console script over the whole tree, with ``-j 1`` and ``-j 2``, including
  interpreter start-up and imports.

Times are the best of ``--repeat`` rounds (each round runs every measurement once), wall and
CPU time side by side. Ratios are against the parse baseline; the worker ratio
is the 1-worker time divided by the 2-worker time (above 1 means two workers help).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import io
import os
import random
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "detect"
sys.path.insert(0, str(ROOT))


# -- the tree --------------------------------------------------------------------------------------
def _module_names(source: str) -> list[str]:
    """Names a module defines at top level: renaming them all keeps the module consistent."""
    names = []
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                for n in ast.walk(target):
                    if isinstance(n, ast.Name):
                        names.append(n.id)
    return names


def kernel_variant(source: str, n: int) -> str:
    for name in sorted(set(_module_names(source)), key=len, reverse=True):
        source = re.sub(rf"\b{re.escape(name)}\b", f"{name}_v{n}", source)
    return source


_PLAIN_TEMPLATE = '''"""Helpers for {topic} ({n})."""

import dataclasses
import math
from typing import Iterable, Optional

{const} = {value}


@dataclasses.dataclass
class {cls}:
    name: str
    weight: float = 1.0
    tags: tuple[str, ...] = ()

    def scaled(self, factor: float) -> "{cls}":
        return dataclasses.replace(self, weight=self.weight * factor)

    def describe(self) -> str:
        return f"{{self.name}} ({{self.weight:.3f}}) [{{', '.join(self.tags)}}]"


def {fn}_totals(items: Iterable[{cls}], limit: Optional[int] = None) -> dict[str, float]:
    totals: dict[str, float] = {{}}
    for i, item in enumerate(items):
        if limit is not None and i >= limit:
            break
        for tag in item.tags or ("untagged",):
            totals[tag] = totals.get(tag, 0.0) + item.weight
    return totals


def {fn}_window(values: list[float], start: int, size: int = {const}) -> list[float]:
    # Plain list slicing with computed bounds, the shape a kernel slice has.
    chunk = values[start * size:(start + 1) * size]
    return [v / max(1.0, math.fsum(chunk)) for v in chunk]


def {fn}_blocks(values: list[float]) -> list[list[float]]:
    out = []
    for i in range(len(values) // {const}):
        out.append({fn}_window(values, i))
    while len(out) > {value} and not out[-1]:
        out.pop()
    return out


class {cls}Registry:
    def __init__(self) -> None:
        self._items: dict[str, {cls}] = {{}}

    def add(self, item: {cls}) -> None:
        if item.name in self._items:
            raise KeyError(f"duplicate {{item.name!r}}")
        self._items[item.name] = item

    def heaviest(self, k: int = 3) -> list[{cls}]:
        return sorted(self._items.values(), key=lambda it: -it.weight)[:k]

    def __len__(self) -> int:
        return len(self._items)
'''


def plain_module(n: int, rng: random.Random) -> str:
    topic = rng.choice(["billing", "routing", "caching", "imaging", "parsing", "telemetry"])
    return _PLAIN_TEMPLATE.format(
        topic=topic,
        n=n,
        const=f"BLOCK_{n}",
        value=rng.randint(2, 64),
        cls=f"{topic.capitalize()}Item{n}",
        fn=f"{topic}_{n}",
    )


def build_tree(root: Path, files: int, kernel_share: float, seed: int = 0) -> list[Path]:
    """Write the tree; return the kernel files (the baseline parses those)."""
    rng = random.Random(seed)
    kernels = sorted(p for p in FIXTURES.glob("*.py") if "pallas_call" in p.read_text())
    n_kernels = round(files * kernel_share)
    kernel_paths = []
    for n in range(files):
        folder = root / f"pkg{n % 20:02d}" / f"sub{n % 7}"
        folder.mkdir(parents=True, exist_ok=True)
        # Kernel files are spread through the tree rather than grouped, as in a real code base.
        if n % max(1, files // max(1, n_kernels)) == 0 and len(kernel_paths) < n_kernels:
            src = kernels[len(kernel_paths) % len(kernels)]
            path = folder / f"kernel_{n}.py"
            path.write_text(kernel_variant(src.read_text(), n))
            kernel_paths.append(path)
        else:
            (folder / f"module_{n}.py").write_text(plain_module(n, rng))
    return kernel_paths


def jax_pallas_dirs() -> list[Path]:
    import jax

    root = Path(jax.__file__).parent
    return [root / "_src" / "pallas", root / "experimental" / "pallas"]


def copy_tree(root: Path, sources: list[Path]) -> list[Path]:
    """Copy the .py files of `sources` under `root`; return those that mention pallas_call (the
    files the baseline parses, as the check analyses only them)."""
    kernel_paths = []
    for n, source in enumerate(sources):
        for p in sorted(source.rglob("*.py")):
            dest = root / f"src{n}" / p.relative_to(source)
            dest.parent.mkdir(parents=True, exist_ok=True)
            text = p.read_text(encoding="utf-8")
            dest.write_text(text, encoding="utf-8")
            if "pallas_call" in text:
                kernel_paths.append(dest)
    return kernel_paths


# -- measurements ----------------------------------------------------------------------------------
def _cpu() -> float:
    """CPU seconds of this process and of every child it has waited for (workers, subprocesses)."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def best_of(repeat: int, measurements: dict) -> dict[str, tuple[float, float]]:
    """name -> (wall, cpu) seconds, each the smallest over `repeat` rounds.

    Every round runs every measurement once, so a change in the machine's load during the run
    affects all of them alike rather than whichever happened to run then. CPU time is reported
    beside wall time because the machines this runs on are often shared: other processes stretch
    wall time but not CPU time (which, with workers, is the sum over processes, so it says nothing
    about parallel speed-up).
    """
    walls: dict[str, list[float]] = {name: [] for name in measurements}
    cpus: dict[str, list[float]] = {name: [] for name in measurements}
    for _ in range(repeat):
        for name, fn in measurements.items():
            c0, t0 = _cpu(), time.perf_counter()
            fn()
            walls[name].append(time.perf_counter() - t0)
            cpus[name].append(_cpu() - c0)
    return {name: (min(walls[name]), min(cpus[name])) for name in measurements}


def parse_baseline(kernel_paths: list[Path]) -> None:
    import libcst

    for p in kernel_paths:
        libcst.parse_module(p.read_text(encoding="utf-8"))


def analyse_only(texts: list[tuple[str, str]], reach: bool = True) -> int:
    """The findings of every text: with `reach`, as the check analyses (`analysis.discovery.reachable`),
    without it, the whole tree of each file, as a fix needs."""
    from pallas_fix.engine import analyze_source

    return sum(len(analyze_source(text, path, reach=reach).findings) for path, text in texts)


def check_in_process(root: Path, workers: int) -> int:
    from pallas_fix.frontends.cli.app import Format, Options, run_check

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return run_check([str(root)], Options(), Format.json, workers, False, False)


def check_console(root: Path, workers: int) -> None:
    exe = Path(sys.executable).with_name("pallas-fix")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "pallas_fix"]
    proc = subprocess.run(cmd + ["--format", "json", "-j", str(workers), str(root)], capture_output=True, text=True)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"pallas-fix exited {proc.returncode}:\n{proc.stderr[-2000:]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--kernel-share", type=float, default=0.1)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--profile", action="store_true", help="cProfile one in-process check and print the top entries")
    ap.add_argument("--keep", action="store_true", help="keep the generated tree and print its path")
    ap.add_argument("--tree", type=Path, help="measure over a copy of this source tree instead of a generated one")
    ap.add_argument("--jax", action="store_true", help="measure over the installed jax package's Pallas sources")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="pallas-fix-bench-"))
    try:
        if args.tree or args.jax:
            kernel_paths = copy_tree(tmp, [args.tree] if args.tree else jax_pallas_dirs())
        else:
            kernel_paths = build_tree(tmp, args.files, args.kernel_share)
        total_bytes = sum(p.stat().st_size for p in tmp.rglob("*.py"))
        kernel_bytes = sum(p.stat().st_size for p in kernel_paths)
        n_files = sum(1 for _ in tmp.rglob("*.py"))
        print(
            f"tree: {n_files} files ({total_bytes / 1e6:.1f} MB), {len(kernel_paths)} with kernels "
            f"({kernel_bytes / 1e6:.2f} MB); best of {args.repeat}; {os.cpu_count()} CPUs"
        )
        if args.profile:
            _profile(tmp)
            return
        texts = [(str(p), p.read_text(encoding="utf-8")) for p in kernel_paths]
        # Warm-up: imports and LibCST's parser initialisation are not what is being compared.
        parse_baseline(kernel_paths[:3])
        analyse_only(texts[:3])

        load_before = os.getloadavg()[0]
        findings = analyse_only(texts)
        labels = {
            "parse": "libcst.parse_module, kernel files only (baseline)",
            "analyse": "analyze_source, kernel texts, reached part",
            "whole": "analyze_source, kernel texts, whole trees",
            "in1": "run_check in process, whole tree, 1 worker",
            "in2": "run_check in process, whole tree, 2 workers",
            "cli1": "pallas-fix console script, whole tree, -j 1",
            "cli2": "pallas-fix console script, whole tree, -j 2",
        }
        rows = best_of(
            args.repeat,
            {
                "parse": lambda: parse_baseline(kernel_paths),
                "analyse": lambda: analyse_only(texts),
                "whole": lambda: analyse_only(texts, reach=False),
                "in1": lambda: check_in_process(tmp, 1),
                "in2": lambda: check_in_process(tmp, 2),
                "cli1": lambda: check_console(tmp, 1),
                "cli2": lambda: check_console(tmp, 2),
            },
        )
        parse = rows["parse"]
        print(f"findings in the tree: {findings}")
        print(f"load average (1 min) before: {load_before:.2f}, after: {os.getloadavg()[0]:.2f}")
        print(f"{'measurement':52s} {'wall s':>8s} {'x parse':>8s} {'cpu s':>8s} {'x parse':>8s}")
        for key, (wall, cpu) in rows.items():
            print(f"{labels[key]:52s} {wall:8.3f} {wall / parse[0]:8.2f} {cpu:8.3f} {cpu / parse[1]:8.2f}")
        print(
            f"wall time, 1 worker / 2 workers: in process {rows['in1'][0] / rows['in2'][0]:.2f}, "
            f"console script {rows['cli1'][0] / rows['cli2'][0]:.2f} (above 1: two workers are faster)"
        )
    finally:
        if args.keep:
            print(f"tree kept at {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def _profile(root: Path) -> None:
    import cProfile
    import pstats

    check_in_process(root, 1)  # warm-up
    prof = cProfile.Profile()
    prof.enable()
    check_in_process(root, 1)
    prof.disable()
    stats = pstats.Stats(prof)
    stats.sort_stats("cumulative").print_stats(30)
    stats.sort_stats("tottime").print_stats(20)


if __name__ == "__main__":
    main()
