"""Language-server latency: diagnostics for a ~2,000-line kernel file vs. a bare LibCST parse.

    .venv/bin/python benchmarks/bench_lsp.py [--lines 2000] [--repeat 5] [--profile]

Two files of ``--lines`` lines each:

* ``kernels``: nothing but kernels: those of ``tests/fixtures/lsp``, repeated with every
  module-level name renamed (so no two kernels are the same text); about one finding per 18 lines;
* ``typical``: one copy of those kernels among ordinary Python (classes, helpers, loops).

For each, measured side by side in one run, best of ``--repeat``:

* baseline: ``libcst.parse_module`` of the text;
* analysis: what the server does between receiving a text and publishing, in process
  (``snapshot.analyse`` + ``diagnostics``: parse, discovery, detection, rules, planners,
  positions, conversion to protocol diagnostics): a full analysis, and the incremental analyses
  the server makes after an edit from the last version's snapshot (an edit outside every kernel,
  an edit inside the kernel in the middle of the file; see ``frontends/lsp/incremental/reanalysis.py``);
* protocol: a real ``pallas-fix lsp`` process (debounce 0): from sending ``didChange`` to receiving
  that version's ``publishDiagnostics``, and to its last republish (the server republishes as it
  computes the fixes' edits for ``data``, for up to 3 s; the rest are computed on request).

Ratios are against the baseline; the target for "analysis" and "protocol" is about 1.2x. The
in-process lines also give CPU time, which other processes on a shared machine do not stretch.
``--profile`` adds a cProfile of one analysis (top functions by own time).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import io
import pstats
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import libcst as cst  # noqa: E402
from lsprotocol import types  # noqa: E402
from pygls.lsp.client import LanguageClient  # noqa: E402

from pallas_fix.core.config import Config  # noqa: E402
from pallas_fix.frontends.lsp.snapshot import analyse, diagnostics  # noqa: E402

FIXTURES = ["two_kernels.py", "traced_constant.py", "loop_kernel.py"]
HEADER = "import jax\nimport jax.numpy as jnp\nfrom jax import lax\nfrom jax.experimental import pallas as pl\n\n"


FILLER = '''

class Settings{k}:
    """Settings block {k}."""

    def __init__(self, size: int = {k}, name: str = "cfg{k}") -> None:
        self.size = size
        self.name = name
        self.items = [i * {k} for i in range(size) if i % 3]

    def total(self) -> int:
        acc = 0
        for i, item in enumerate(self.items):
            if item > 10 and i % 2 == 0:
                acc += item // 2
            else:
                acc -= 1
        return acc


def helper_{k}(xs, *, scale=1.0):
    out = {{}}
    for key, value in sorted(xs.items()):
        out[key] = [v * scale for v in value]
    return out
'''


def make_typical(lines: int) -> str:
    text = make_source(0, copies=1)
    k = 0
    while text.count("\n") < lines:
        text += FILLER.format(k=k)
        k += 1
    return text


def make_source(lines: int, copies: int = 0) -> str:
    bodies = []
    for name in FIXTURES:
        text = (ROOT / "tests" / "fixtures" / "lsp" / name).read_text()
        body = text[text.index("\n\n", text.index("from jax.experimental")) :]
        bodies.append(body)
    parts, k = [HEADER], 0
    while sum(p.count("\n") for p in parts) < lines or k < copies:
        for body in bodies:
            names = set(re.findall(r"^def (\w+)", body, re.M)) | set(re.findall(r"^([A-Z_]+) = ", body, re.M))
            renamed = body
            for n in sorted(names, key=len, reverse=True):
                renamed = re.sub(rf"\b{n}\b", f"{n}_{k}", renamed)
            parts.append(renamed)
        k += 1
    return "".join(parts)


def timed(fn) -> tuple[float, float]:
    """(wall, CPU) seconds of one call: other processes on a shared machine stretch the first.
    The garbage of earlier calls is collected first: a full analysis leaves cycles (a tree and
    its indexes) that the collector would otherwise free during whatever is timed next."""
    gc.collect()
    t, c = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - t, time.process_time() - c


def edit_one_kernel(source: str) -> str:
    """The text with one statement added to the body of the kernel in the middle of the file."""
    lines = source.split("\n")
    defs = [k for k, line in enumerate(lines) if line.startswith("def ") and "kernel" in line]
    at = defs[len(defs) // 2]
    return "\n".join(lines[: at + 1] + ["    extra = 1"] + lines[at + 1 :])


# What the server analyses after an edit, from the last version's snapshot (`previous=`): an edit
# outside every kernel (a comment appended) and an edit inside one kernel.
EDITS = {"edit outside kernels": lambda s: s + "\n# edit\n", "edit one kernel": edit_one_kernel}


def in_process(source: str, repeat: int) -> tuple[tuple[float, float], dict[str, tuple[float, float]], int]:
    """Best (wall, CPU) of the parse, of the full analysis and of each incremental one, and the
    number of diagnostics."""
    config = Config()
    path = str(ROOT / "bench_lsp_generated.py")

    def analysis(text=source, previous=None):
        snap = analyse("file:///bench.py", path, 1, text, config, previous=previous)
        diagnostics(snap)
        return snap

    first = analysis()  # imports, planner registration
    parse_times, times = [], {"full analysis": []}
    for _ in range(repeat):  # interleaved, so all see the same machine load
        parse_times.append(timed(lambda: cst.parse_module(source)))
        times["full analysis"].append(timed(analysis))
        for label, change in EDITS.items():
            edited = change(source)
            times.setdefault(label, []).append(timed(lambda: analysis(edited, first)))
    best_of = lambda ts: (min(t[0] for t in ts), min(t[1] for t in ts))  # noqa: E731
    return best_of(parse_times), {k: best_of(v) for k, v in times.items()}, len(diagnostics(first))


async def over_protocol(source: str, repeat: int) -> tuple[float, float, tuple[int, int]]:
    client = LanguageClient("bench", "0")
    published: dict[int, list] = {}
    event = asyncio.Event()

    @client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    def _on(params):
        published.setdefault(params.version, []).append((time.perf_counter(), params.diagnostics))
        event.set()

    exe = Path(sys.executable).parent / "pallas-fix"
    await client.start_io(str(exe), "lsp")
    await client.initialize_async(
        types.InitializeParams(capabilities=types.ClientCapabilities(), initialization_options={"debounceMs": 0})
    )
    client.initialized(types.InitializedParams())
    uri = "file:///tmp/bench_lsp_generated.py"
    client.text_document_did_open(types.DidOpenTextDocumentParams(types.TextDocumentItem(uri, "python", 1, source)))

    async def first(version: int) -> float:
        while not published.get(version):
            event.clear()
            await asyncio.wait_for(event.wait(), 600)
        return published[version][0][0]

    async def last(version: int, quiet: float = 2.0) -> tuple[float, list]:
        """The last publish for `version`: the server republishes as fix edits are computed."""
        while True:
            count = len(published.get(version, []))
            event.clear()
            try:
                await asyncio.wait_for(event.wait(), quiet)
            except asyncio.TimeoutError:
                if len(published.get(version, [])) == count:
                    return published[version][-1]

    await first(1)
    await last(1)
    t_first, t_last, carried = [], [], (0, 0)
    for n in range(repeat):
        version = n + 2
        text = source + f"\n# edit {n}\n"
        t0 = time.perf_counter()
        client.text_document_did_change(
            types.DidChangeTextDocumentParams(
                types.VersionedTextDocumentIdentifier(version=version, uri=uri),
                [types.TextDocumentContentChangeWholeDocument(text)],
            )
        )
        t_first.append(await first(version) - t0)
        stamp, diags = await last(version)
        t_last.append(stamp - t0)
        fixes = [d.data["fix"] for d in diags if isinstance(d.data, dict) and d.data.get("fix")]
        carried = (sum(1 for f in fixes if f.get("edits") is not None), len(fixes))
    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()
    return min(t_first), min(t_last), carried


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lines", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--no-protocol", action="store_true", help="skip the subprocess measurement")
    args = ap.parse_args()

    for label, source in (("kernels", make_source(args.lines)), ("typical", make_typical(args.lines))):
        print(f"== {label}: {source.count(chr(10))} lines, {len(source)} characters")
        (t_parse, c_parse), analyses, n_diag = in_process(source, args.repeat)
        protocol = None if args.no_protocol else asyncio.run(over_protocol(source, args.repeat))
        # The parse is timed again afterwards: the best of all runs is the baseline for every ratio.
        again = [timed(lambda: cst.parse_module(source)) for _ in range(args.repeat)]
        base, c_base = min([t_parse] + [t[0] for t in again]), min([c_parse] + [t[1] for t in again])
        print(f"baseline  libcst.parse_module          {base * 1000:8.1f} ms   (CPU {c_base * 1000:.1f} ms)")
        for label, (t_analysis, c_analysis) in analyses.items():
            print(
                f"analysis  {label:<28} {t_analysis * 1000:8.1f} ms   ratio {t_analysis / base:5.2f}x   "
                f"(CPU {c_analysis * 1000:.1f} ms, {c_analysis / c_base:.2f}x; {n_diag} diagnostics)"
            )
        if protocol is not None:
            t_first, t_full, (with_edits, fixable) = protocol
            print(f"protocol  didChange -> diagnostics     {t_first * 1000:8.1f} ms   ratio {t_first / base:5.2f}x")
            print(
                f"protocol  didChange -> last republish  {t_full * 1000:8.1f} ms   ratio {t_full / base:5.2f}x"
                f"   ({with_edits} of {fixable} fixes carry their edits; the rest on request)"
            )
    if args.profile:
        source = make_source(args.lines)
        prof = cProfile.Profile()
        prof.enable()
        analyse("file:///bench.py", "bench.py", 1, source, Config())
        prof.disable()
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(25)
        print(out.getvalue())


if __name__ == "__main__":
    main()
