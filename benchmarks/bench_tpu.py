"""Original kernels against pallas-fix's rewrites of them, compiled and timed on a TPU.

    python benchmarks/bench_tpu.py [--pair NAME ...] [--size prod|vmem ...] [--repeat 10] [--json FILE]
    python benchmarks/bench_tpu.py --table-from FILE      # the table of a saved run again

The originals are the user kernels in ``benchmarks/tpu_pairs/`` (each with an in-kernel dynamic
``pl.ds`` loop or program-id window). Their rewrites are made here, at benchmark time, by the
product: :func:`pallas_fix.engine.fix_source` with the default ``Config()``, as ``pallas-fix
--apply`` does. ``--apply`` calls it once with safe fixes only and, for a kernel an example call
reaches, once more with unsafe fixes too (``pallas_fix/frontends/kernel_rewrites.py``), and writes
the second once interpret-mode verification passes. Each pair file carries such an example, so
the rewrite timed here is the second; the ``fix`` column says whether the safe fixes alone make
it (``safe``), whether it needed the verified unsafe ones (``unsafe``), or whether there was none.

For every (pair, dtype, size): does each side compile, how far the rewrite's output is from the
original's (max |a - b| / max |b|; from XLA's where the original did not run), the time of one
call (the median of ``--repeat`` timed loops of calls after a warm-up: ``pallas_fix/verify/device/timing.py``), the
speed ratio (original time / rewrite time: above 1 the rewrite is faster), the bytes one grid step holds on chip (``pallas_fix/verify/judge/footprint.py``,
read off the traced calls) and, where one exists, JAX's hand-written kernel
(``jax.experimental.pallas.ops.tpu``) and XLA at the same sizes, and what plain ``--apply`` does
with the rewrite at that case's shapes: writes it, or holds it back as a lift that only trades
speed for memory (the CLI's own rule, ``frontends.kernel_rewrites.memory_trade`` over
``verify.judge.lift_cost`` records of the traced calls; ``--lift-for-memory`` writes it). At the
end: the geometric mean and the lowest of the ratios over the cases ``--apply`` writes whose
original runs, the VMEM rescues, the held-back cases apart, the chip, the jax version and the date.
``--table-from`` a run saved before the ``--apply`` column existed decides it again from the
current tree (traced at each case's shapes; nothing is compiled).

Off a TPU (JAX's default backend is not ``tpu``) it says so and instead checks, at a small size
in TPU interpret mode, that every pair gets its rewrite and that the rewrite agrees with the
original: a CPU smoke test that exits 1 when a check fails.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import math
import sys
import types
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PAIR_DIR = HERE / "tpu_pairs"
# The order of the table: map loops, K loops, attention, norms, program id, scalar prefetch.
PAIRS = ("map_silu", "matmul_kloop", "matmul_tiled", "flash_attention", "flash_attention_causal",
         "rms_norm", "layer_norm", "bias_gelu_tiles", "batch_rows_gate", "row_chunks", "embedding_rows", "gather_blocks", "momentum_inplace",
         "decode_attention_helper", "decode_slice_tiles")
# Agreement of rewrite and original (same arithmetic, so tight), and of either with XLA (whose
# f32 matmuls use bf16 passes on TPU at default precision, and whose op order differs).
TOL_SAME = {"float32": 1e-5, "bfloat16": 2e-2}
TOL_XLA = {"float32": 2e-2, "bfloat16": 5e-2}
for _p in (ROOT, HERE):  # the product next to this script
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from pallas_fix.rewrite.reduction.lanes import lane_dense_kernels  # noqa: E402
from pallas_fix.rewrite.reduction.strip import one_window_per_step  # noqa: E402
from pallas_fix.verify.device.timing import classify_error, dispatch_floor, looped, time_per_call  # noqa: E402


@dataclass
class Rewrite:
    source: Optional[str]  # None when no fix applies
    fix: str  # safe | unsafe | none | error
    applied: list = field(default_factory=list)
    error: str = ""
    one_window: Optional[types.ModuleType] = None  # a strip-mined rewrite walking one window per step
    lane_dense: frozenset = frozenset()  # its kernels that keep softmax statistics lane-dense


@dataclass
class Side:
    """One kernel (original, rewrite, hand-written or XLA) at one case."""

    ran: bool = False
    ms: Optional[float] = None
    error: str = ""  # the kind of failure (VMEM OOM, tiling, alignment, ...) and its first line
    on_chip: Optional[int] = None  # bytes per grid step, the largest over the entry's calls


@dataclass
class Case:
    pair: str
    dtype: str
    size: str
    shapes: str
    fix: str
    original: Side
    rewrite: Side
    hand: Optional[Side] = None
    xla: Optional[Side] = None
    err: Optional[float] = None  # max rel. err of the rewrite against the original (or XLA)
    err_against: str = ""  # original | xla
    agrees: Optional[bool] = None
    apply: str = ""  # what plain --apply does at these shapes: writes | holds back | none | unknown
    apply_why: str = ""  # why it holds the rewrite back (the intent gate's words), or why unknown

    @property
    def ratio(self) -> Optional[float]:
        o, r = self.original.ms, self.rewrite.ms
        return o / r if o and r else None


def load_module(name: str, source: str, path: str) -> types.ModuleType:
    """Execute a kernel file's text as a fresh module (the original and its rewrite side by side)."""
    mod = types.ModuleType(name)
    mod.__file__ = path
    sys.modules[name] = mod  # dataclasses and pickling look modules up by name
    exec(compile(source, path, "exec"), mod.__dict__)
    return mod


def make_rewrite(source: str, path: str) -> Rewrite:
    """What plain ``pallas-fix --apply`` writes for a one-kernel file with an example call."""
    from pallas_fix.core.config import Config
    from pallas_fix.engine import fix_source

    safe = fix_source(source, path, Config())
    full = fix_source(source, path, Config(), unsafe=True)
    for result in (safe, full):
        if result.error:
            return Rewrite(None, "error", error=result.error)
    if full.source == source:
        return Rewrite(None, "none")
    return Rewrite(full.source, "safe" if safe.source == full.source else "unsafe", list(full.applied))


def max_rel_err(a, b) -> float:
    import numpy as np

    a = np.asarray(a, np.float32)
    b = np.asarray(b, np.float32)
    scale = float(np.max(np.abs(b))) or 1.0
    return float(np.max(np.abs(a - b))) / scale


def run_side(fn, args, kwargs, repeat: int):
    """(output, Side): compile and run once inside the timing loop, then time it (ms per call)."""
    import jax

    side = Side()
    run = looped(fn, kwargs)
    try:
        out = jax.block_until_ready(run(1, *args))[1]
    except Exception as exc:  # a compile failure is a result, not a crash of the benchmark
        side.error = classify_error(exc)
        return None, side
    side.ran = True
    side.ms = time_per_call(run, args, repeat)
    return out, side


def traced_calls(fn, args, kwargs) -> Optional[list[dict]]:
    """The entry's pallas_calls as verification describes them (grid steps, blocks, bytes on
    chip), traced at these shapes; None when tracing fails (not worth failing a case over)."""
    import jax

    from pallas_fix.verify.worker.kernel_survey import pallas_call_infos

    try:
        structs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in args]
        return pallas_call_infos(jax.make_jaxpr(functools.partial(fn, **kwargs))(*structs))
    except Exception:
        return None


def on_chip_bytes(calls: Optional[list[dict]]) -> Optional[int]:
    """Bytes one grid step holds on chip (the largest among the entry's pallas_calls)."""
    from pallas_fix.verify.judge.footprint import entry_bytes

    return None if calls is None else entry_bytes(calls)


def apply_decision(rewrite: Rewrite, before, after, example: str, one=None) -> tuple[str, str]:
    """(what plain ``pallas-fix --apply`` does with the rewrite at these shapes, why): "writes", or
    "holds back" a lift that only trades speed for memory, by the CLI's own rule over the traced
    calls of both sides (`one`: those of a strip-mined rewrite walking one window per step);
    "none" without a rewrite, "unknown" when a side did not trace."""
    from pallas_fix.core.config import Config
    from pallas_fix.core.speed import OPTION
    from pallas_fix.frontends.kernel_rewrites import memory_trade
    from pallas_fix.verify.judge.lift_cost import lift_costs, with_windows

    if rewrite.source is None:
        return "none", rewrite.error
    if before is None or after is None:
        return "unknown", "a side did not trace at these shapes"
    records = lift_costs(before, after)
    if one is not None:  # a strip-mined rewrite: its windows per step, as verification reads them
        records = with_windows(records, lift_costs(before, one), rewrite.lane_dense)
    held, note = memory_trade([(r, example) for r in records])
    if held is None or Config().lift_for_memory:
        return "writes", ""
    return "holds back", f"{note}; {OPTION}"


def shapes_of(args, kwargs) -> str:
    shapes = ["x".join(map(str, a.shape)) for a in args if getattr(a, "ndim", 0) > 1]
    dims = " ".join(dict.fromkeys(f"{shapes.count(d)} x {d}" if shapes.count(d) > 1 else d for d in shapes))
    blocks = ",".join(f"{k}={v}" for k, v in kwargs.items())
    return f"{dims} {blocks}".strip()


def load_pair(name: str):
    """(original module, rewrite module or None, Rewrite)."""
    path = PAIR_DIR / f"{name}.py"
    source = path.read_text()
    rewrite = make_rewrite(source, str(path))
    original = load_module(f"tpu_pairs_{name}_original", source, str(path))
    rewritten = load_module(f"tpu_pairs_{name}_rewrite", rewrite.source, str(path)) if rewrite.source else None
    one = one_window_per_step(source, rewrite.source) if rewrite.source else None
    if one is not None:
        rewrite.one_window = load_module(f"tpu_pairs_{name}_one_window", one, str(path))
        rewrite.lane_dense = lane_dense_kernels(source, rewrite.source)
    return original, rewritten, rewrite


def traced_one_window(rewrite: Rewrite, entry: str, args, kwargs):
    """The calls of a strip-mined rewrite walking one window per step (None for another rewrite)."""
    return traced_calls(getattr(rewrite.one_window, entry), args, kwargs) if rewrite.one_window is not None else None


def bench_case(name, original, rewritten, rewrite: Rewrite, size, dtype, repeat) -> Case:
    import jax
    import jax.numpy as jnp

    args, kwargs = original.make_inputs(size, jnp.dtype(dtype), jax.random.key(0))
    entry = original.ENTRY
    case = Case(name, dtype, size, shapes_of(args, kwargs), rewrite.fix, Side(), Side())
    out_o, case.original = run_side(getattr(original, entry), args, kwargs, repeat)
    before = traced_calls(getattr(original, entry), args, kwargs)
    case.original.on_chip = on_chip_bytes(before)
    out_r, after = None, None
    if rewritten is not None:
        out_r, case.rewrite = run_side(getattr(rewritten, entry), args, kwargs, repeat)
        after = traced_calls(getattr(rewritten, entry), args, kwargs)
        case.rewrite.on_chip = on_chip_bytes(after)
    one = traced_one_window(rewrite, entry, args, kwargs)
    case.apply, case.apply_why = apply_decision(rewrite, before, after, f"{entry}({case.shapes})", one)
    out_x = None
    if hasattr(original, "xla"):
        out_x, case.xla = run_side(jax.jit(functools.partial(original.xla, **kwargs)), args, {}, repeat)
    if hasattr(original, "hand"):
        _, case.hand = run_side(jax.jit(functools.partial(original.hand, **kwargs)), args, {}, repeat)
    reference, case.err_against = (out_o, "original") if out_o is not None else (out_x, "xla")
    if out_r is not None and reference is not None:
        case.err = max_rel_err(out_r, reference)
        tol = (TOL_SAME if case.err_against == "original" else TOL_XLA)[dtype]
        case.agrees = case.err <= tol
    return case


# --- printing --------------------------------------------------------------------------------

def _mib(n: Optional[int]) -> str:
    return "-" if n is None else f"{n / 2**20:.1f}"


def _ms(side: Optional[Side]) -> str:
    if side is None:
        return "-"
    if not side.ran:
        return "fails" if side.error else "-"
    return f"{side.ms:.3g}" if side.ms is not None else "ran"


def _compiles(side: Side, present: bool) -> str:
    if not present:
        return "-"
    if side.ran:
        return "yes"
    return side.error.split(":", 1)[0] if side.error else "no"


HEADER = ("| pair | dtype | size | shapes, blocks | fix | plain --apply | compiles (orig / rewrite) | max rel err | "
          "ms orig -> rewrite | speed ratio | MiB/step orig -> rewrite | JAX hand-written ms | XLA ms |")


def table_row(c: Case) -> str:
    present = c.fix in ("safe", "unsafe")
    err = "-" if c.err is None else f"{c.err:.1e}{'' if c.err_against == 'original' else ' (vs XLA)'}{'' if c.agrees else ' DIFFERS'}"
    ratio = "-" if c.ratio is None else f"{c.ratio:.2f}x"
    return (f"| {c.pair} | {c.dtype} | {c.size} | {c.shapes} | {c.fix} | {c.apply or '?'} | {_compiles(c.original, True)} / "
            f"{_compiles(c.rewrite, present)} | {err} | {_ms(c.original)} -> {_ms(c.rewrite) if present else '-'} | "
            f"{ratio} | {_mib(c.original.on_chip)} -> {_mib(c.rewrite.on_chip) if present else '-'} | "
            f"{_ms(c.hand)} | {_ms(c.xla)} |")


def _speeds(cases: list[Case]) -> Optional[tuple[float, float, int]]:
    """(geometric mean, lowest, count) of the speed ratios of the cases whose original ran."""
    ratios = [c.ratio for c in cases if c.ratio]
    if not ratios:
        return None
    return math.exp(sum(math.log(r) for r in ratios) / len(ratios)), min(ratios), len(ratios)


def _speed_line(what: str, cases: list[Case]) -> str:
    speeds = _speeds(cases)
    if speeds is None:
        return f"{what}: no case whose original fits"
    geo, low, n = speeds
    slow = [c for c in cases if c.ratio and c.ratio < 0.95]
    return (f"{what}: geometric mean speed ratio {geo:.2f}x over {n} cases whose original fits, "
            f"lowest {low:.2f}x, {len(slow)} below 0.95x")


def print_bars(cases: list[Case], broke: list[Case], oom: list[Case], rescued: list[Case]) -> None:
    """Issue 27's bars, each met or not, on these cases."""
    def verdict(ok: bool) -> str:
        return "met" if ok else "NOT met"

    fixable = [c for c in oom if c.fix in ("safe", "unsafe")]
    speeds = _speeds([c for c in cases if c.apply == "writes"])
    print("\nissue 27's bars:")
    print(f"  0 rewrites failing to compile where the original compiled: {len(broke)}, {verdict(not broke)}")
    print(f"  every out-of-VMEM original with a fix runs after it: {len(rescued)} of {len(fixable)}, "
          f"{verdict(len(rescued) == len(fixable))}")
    if speeds is not None:
        geo, low, _ = speeds
        print(f"  what plain --apply writes where the original fits: geometric mean {geo:.2f}x (bar 1.0), "
              f"lowest {low:.2f}x (bar 0.95), {verdict(geo >= 1.0 and low >= 0.95)}")
    for c in cases:
        if c.pair.startswith("flash_attention") and c.hand and c.hand.ms and c.rewrite.ms:
            vs = c.hand.ms / c.rewrite.ms
            print(f"  {c.pair} {c.dtype} {c.size}: the rewrite at {vs:.2f}x the speed of JAX's kernel at the same "
                  f"blocks (bar 0.9), {verdict(vs >= 0.9)}{'; plain --apply holds it back' if c.apply == 'holds back' else ''}")


def print_summary(cases: list[Case]) -> None:
    written = [c for c in cases if c.apply == "writes"]
    held = [c for c in cases if c.apply == "holds back"]
    print("\n" + _speed_line("rewrites plain --apply writes", written))
    print(_speed_line("every rewrite fix_source makes (--lift-for-memory writes them all)", cases))
    oom = [c for c in cases if not c.original.ran and "VMEM" in c.original.error]
    rescued = [c for c in oom if c.rewrite.ran and c.agrees and c.apply == "writes"]
    print(f"originals out of VMEM: {len(oom)}; running (and agreeing) after the rewrite plain --apply writes: {len(rescued)}")
    if held:
        print(f"held back by plain --apply (memory-only lifts; --lift-for-memory writes them): {len(held)}")
        for c in held:
            ratio = "-" if c.ratio is None else f"{c.ratio:.2f}x"
            print(f"  {c.pair} {c.dtype} {c.size} ({ratio}): {c.apply_why}")
    unknown = [c for c in cases if c.apply not in ("writes", "holds back", "none")]
    if unknown:
        print(f"plain --apply's decision unknown: {len(unknown)} ({'; '.join(f'{c.pair} {c.dtype} {c.size}' for c in unknown)})")
    broke = [c for c in cases if c.original.ran and c.fix in ("safe", "unsafe") and not c.rewrite.ran]
    print(f"rewrites that fail where the original compiled: {len(broke)}")
    differ = [c for c in cases if c.agrees is False]
    print(f"rewrites whose output differs: {len(differ)}")
    print_bars(cases, broke, oom, rescued)
    errors = [(c, who, s.error) for c in cases for who, s in (("original", c.original), ("rewrite", c.rewrite),
                                                                  ("hand", c.hand), ("xla", c.xla)) if s and s.error]
    if errors:
        print("\nfailures:")
        for c, who, e in errors:
            print(f"  {c.pair} {c.dtype} {c.size} {who}: {e}")


# --- off a TPU: the smoke test ---------------------------------------------------------------

def smoke(names, dtypes=("float32",)) -> list[dict]:
    """Each pair's rewrite made and run against the original at the small size in TPU interpret
    mode: one record per (pair, dtype) with ``ok`` and what went wrong."""
    import jax
    import jax.numpy as jnp
    from jax.experimental.pallas import tpu as pltpu

    from pallas_fix.verify.worker.interpret_mode import forced_interpreter

    results = []
    for name in names:
        original, rewritten, rewrite = load_pair(name)
        for dtype in dtypes:
            rec = {"pair": name, "dtype": dtype, "fix": rewrite.fix, "ok": False, "err": None, "problem": ""}
            results.append(rec)
            if rewritten is None:
                rec["problem"] = rewrite.error or "no rewrite produced"
                continue
            args, kwargs = original.make_inputs("small", jnp.dtype(dtype), jax.random.key(0))
            try:
                with forced_interpreter(pltpu.InterpretParams()):
                    want = jax.block_until_ready(getattr(original, original.ENTRY)(*args, **kwargs))
                    got = jax.block_until_ready(getattr(rewritten, original.ENTRY)(*args, **kwargs))
            except Exception as exc:
                rec["problem"] = classify_error(exc)
                continue
            rec["err"] = max_rel_err(got, want)
            rec["ok"] = rec["err"] <= TOL_SAME[dtype]
            rec["problem"] = "" if rec["ok"] else f"outputs differ (max rel err {rec['err']:.1e})"
    return results


def run_smoke(names) -> int:
    import jax

    print(f"JAX's default backend is {jax.default_backend()}, not a TPU: nothing is timed. Checking that "
          "every pair gets its rewrite and that it agrees with the original in TPU interpret mode, small size.")
    results = smoke(names)
    for r in results:
        err = "-" if r["err"] is None else f"{r['err']:.1e}"
        print(f"  {r['pair']:<24} {r['dtype']:<9} fix={r['fix']:<7} max rel err {err:<8} "
              f"{'ok' if r['ok'] else 'FAILED: ' + r['problem']}")
    print("What plain --apply does with each rewrite at the timed cases' shapes (traced, not run):")
    for name in names:
        pair = load_pair(name)
        for size, dtype in pair[0].CASES:
            what, why = decide(*pair, size, dtype)
            print(f"  {name:<24} {dtype:<9} {size:<5} {what}{': ' + why if why else ''}")
    return 0 if all(r["ok"] for r in results) else 1


# --- on a TPU --------------------------------------------------------------------------------

def run_tpu(names, sizes, repeat: int, json_path: Optional[str], interpret: bool = False) -> int:
    """The table. With `interpret` (off a TPU, to check this script) every case runs at the small
    size in the HLO interpreter: the times mean nothing there."""
    import jax

    dev = jax.devices()[0]
    print(f"chip: {dev.device_kind} ({jax.device_count()} device(s)); jax {jax.__version__}; "
          f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; median of {repeat} timed loops"
          + ("; INTERPRET MODE at the small size, times meaningless" if interpret else ""))
    call_ms, loop_ms = dispatch_floor(repeat)
    print(f"times: ms per call inside a jitted loop of calls (a trivial op: {loop_ms * 1e3:.1f} us there; "
          f"{call_ms:.3f} ms as a plain call from Python, dispatch and sync)")
    if interpret:
        from pallas_fix.verify.worker.interpret_mode import forced_interpreter

        with forced_interpreter(True):
            return _table(names, {"small"}, repeat, json_path, small=True)
    return _table(names, sizes, repeat, json_path)


def _table(names, sizes, repeat: int, json_path: Optional[str], small: bool = False) -> int:
    cases: list[Case] = []
    print(HEADER)
    print("|" + " --- |" * HEADER.count(" | ") + " --- |")
    for name in names:
        original, rewritten, rewrite = load_pair(name)
        todo = sorted({("small", d) for _, d in original.CASES}) if small else original.CASES
        for size, dtype in todo:
            if size not in sizes:
                continue
            case = bench_case(name, original, rewritten, rewrite, size, dtype, repeat)
            cases.append(case)
            print(table_row(case), flush=True)
            if json_path:  # written after every case: a run stopped at its limit keeps what it did
                Path(json_path).write_text(json.dumps([asdict(c) | {"ratio": c.ratio} for c in cases], indent=1))
    print_summary(cases)
    return 0


def case_from_json(d: dict) -> Case:
    sides = {k: Side(**d[k]) if d.get(k) else None for k in ("original", "rewrite", "hand", "xla")}
    return Case(**{k: v for k, v in d.items() if k != "ratio"} | sides)


def decide(original, rewritten, rewrite: Rewrite, size: str, dtype: str) -> tuple[str, str]:
    """apply_decision at a case's shapes, traced only: no array is made, nothing compiled."""
    import jax
    import jax.numpy as jnp

    kwargs: dict = {}

    def shapes(key):
        args, kw = original.make_inputs(size, jnp.dtype(dtype), key)
        kwargs.update(kw)
        return args

    args = jax.eval_shape(shapes, jax.random.key(0))
    entry = original.ENTRY
    before = traced_calls(getattr(original, entry), args, kwargs)
    after = traced_calls(getattr(rewritten, entry), args, kwargs) if rewritten is not None else None
    one = traced_one_window(rewrite, entry, args, kwargs)
    return apply_decision(rewrite, before, after, f"{entry}({shapes_of(args, kwargs)})", one)


def decide_again(cases: list[Case]) -> None:
    """Plain --apply's decision for cases saved without one (a run older than that column): the
    current tree's rewrite of each pair, decided at the case's shapes."""
    pairs: dict = {}
    for c in cases:
        if c.apply:
            continue
        if c.pair not in pairs:
            pairs[c.pair] = load_pair(c.pair)
        c.apply, c.apply_why = decide(*pairs[c.pair], c.size, c.dtype)
    if pairs:
        print(f"(plain --apply column decided again by this tree for {', '.join(pairs)}: the saved run predates it)")


def print_saved(path: str) -> int:
    """The table and summary again, from the cases a run wrote with --json."""
    cases = [case_from_json(d) for d in json.loads(Path(path).read_text())]
    decide_again(cases)
    print(HEADER)
    print("|" + " --- |" * HEADER.count(" | ") + " --- |")
    for case in cases:
        print(table_row(case))
    print_summary(cases)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pair", action="append", choices=PAIRS, help="only these pairs (repeatable)")
    ap.add_argument("--size", action="append", choices=("prod", "vmem", "long"), help="only these sizes (repeatable; long: the strip-mined lifts' longer loops, run only when named)")
    ap.add_argument("--repeat", type=int, default=10, help="timed loops of calls per kernel (median)")
    ap.add_argument("--json", help="also write the cases to this file")
    ap.add_argument("--interpret", action="store_true",
                    help="off a TPU: print the table anyway, small sizes in the HLO interpreter (checks this script)")
    ap.add_argument("--table-from", metavar="FILE", help="print the table of a run saved with --json, and exit")
    args = ap.parse_args(argv)
    if args.table_from:
        return print_saved(args.table_from)
    names = args.pair or list(PAIRS)
    import jax

    if jax.default_backend() != "tpu":
        if args.interpret:
            return run_tpu(names, set(), max(1, args.repeat), args.json, interpret=True)
        return run_smoke(names)
    return run_tpu(names, set(args.size or ("prod", "vmem")), max(1, args.repeat), args.json)


if __name__ == "__main__":
    sys.exit(main())
