"""Verification worker: ``python -m pallas_fix.verify.worker --job JOB.json --out RESULTS.jsonl``.

Runs in its own process (started by :mod:`pallas_fix.verify.runner`, which enforces the time
limit). It imports the original and the rewritten source as two in-memory modules, forces
interpret mode on every ``pallas_call``, runs each example through the reference (original,
HLO interpreter) and the candidates (rewrite, under each chosen interpreter), compares outputs
and writes one JSON object per line to ``--out`` (``-`` = the real stdout):

    {"type": "start", "pid": ...}
    {"type": "verdict", "index": i, ...Verdict fields..., "details": {...}}   one per example
    {"type": "done"}                              (or {"type": "fatal", "message": ...})

Everything else the process prints (user ``print``s, jax warnings) goes to stderr: file
descriptor 1 is pointed at stderr before any user code runs.

Job file: ``{"original": {"source", "path"}, "rewritten": {"source", "path"}, "examples":
[example_to_json...], "seeds": [0, 1, 2], "gpu_interpret": false, "tpu_interpret": null,
"max_cores": 16, "tmpdir": "..."}``.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import re
import logging
import os
import sys
import time
import traceback
import types
from typing import Any, Callable, Optional

from pallas_fix.core.examples import ArgSpec, Example, example_from_json

# Interpreter names as reported in Verdict.interpreters.
HLO = "interpret"
TPU = "tpu-interpret"
GPU = "gpu-interpret"
MAX_CORES = 16

_MODULE_NAMES = {"original": "_pallas_fix_verify_original", "rewritten": "_pallas_fix_verify_rewritten"}


# --------------------------------------------------------------------------- forcing interpret mode


class _Mode:
    """The interpreter every pallas_call is forced to while a run is traced."""

    value: Any = True


_MODE = _Mode()
_PATCHED = False


# The errors a non-integer-scalar slice start raises (see PF107 and pallas-notes.md).
_NON_SCALAR_START = re.compile(
    r"start_indices arguments to dynamic_slice must be scalars|Dynamic indexing not supported in GPU interpret mode"
    r"|Advanced indexers are not supported"
)


def interpret_gpu_params():
    """`plgpu.InterpretGPUParams()`; jax 0.10.2 does not export it from `mosaic_gpu` yet."""
    try:
        from jax.experimental.pallas import mosaic_gpu as plgpu

        return plgpu.InterpretGPUParams()
    except AttributeError:
        from jax._src.pallas.mosaic_gpu.interpret.params import InterpretGPUParams

        return InterpretGPUParams()


def install_patches() -> None:
    """Patch ``pallas_call`` before any user module runs (idempotent).

    Three places: ``jax._src.pallas.pallas_call.pallas_call``, ``jax.experimental.pallas.pallas_call``
    (what ``pl.pallas_call`` and ``from jax.experimental.pallas import pallas_call`` resolve to)
    and, for callers that captured the original earlier (jax's own helpers, ``pl.kernel``,
    ``core_map``), jax's ``pallas_tpu_interpret_mode_context_manager`` config, which ``_pallas_call``
    consults first (see :func:`forced_interpreter`). The patched function builds the real
    pallas_call lazily at call (trace) time, so a call object constructed at import time, or via
    ``functools.partial(pl.pallas_call, ...)`` as a decorator, still gets the interpreter chosen for
    the current run, not the one current at import.
    """
    global _PATCHED
    if _PATCHED:
        return
    import jax._src.pallas.pallas_call as ppc
    import jax.experimental.pallas as pl_mod

    orig = ppc.pallas_call

    @functools.wraps(orig)
    def pallas_call(kernel, *args, **kwargs):
        def invoke(*call_args, **call_kwargs):
            kw = dict(kwargs)
            kw["interpret"] = _MODE.value
            return orig(kernel, *args, **kw)(*call_args, **call_kwargs)

        functools.update_wrapper(invoke, kernel, updated=())
        return invoke

    pallas_call.__pallas_fix_original__ = orig  # type: ignore[attr-defined]
    ppc.pallas_call = pallas_call
    pl_mod.pallas_call = pallas_call
    _PATCHED = True


@contextlib.contextmanager
def forced_interpreter(value: Any):
    """Run traced code with every pallas_call interpreted by ``value``.

    Sets both the patch's mode and jax's config override. The config is part of jax's jit cache
    key, so a user's own ``@jax.jit`` entry is re-traced per interpreter rather than reusing a
    trace made for another interpreter.
    """
    from jax._src import config

    prev_mode = _MODE.value
    _MODE.value = value
    prev = config.pallas_tpu_interpret_mode_context_manager.swap_local(value)
    try:
        yield
    finally:
        config.pallas_tpu_interpret_mode_context_manager.set_local(prev)
        _MODE.value = prev_mode


# --------------------------------------------------------------------------- races


class _RaceLog(logging.Handler):
    """Collects TPU interpret mode's "RACE DETECTED" log records (on_race="warn")."""

    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            msg = record.getMessage()
        except Exception:  # pragma: no cover
            return
        if "RACE DETECTED" in msg:
            self.messages.append(msg)


_RACES = _RaceLog()


def _races_found_flag() -> bool:
    try:
        from jax._src.pallas.mosaic.interpret import interpret_pallas_call as ipc
    except ImportError:  # pragma: no cover
        return False
    return bool(ipc.races is not None and ipc.races.races_found)


def _reset_interpreters() -> None:
    with contextlib.suppress(Exception):
        from jax.experimental.pallas import tpu as pltpu

        pltpu.reset_tpu_interpret_mode_state()
    with contextlib.suppress(Exception):
        from jax._src.pallas.mosaic_gpu.interpret import interpret_pallas_call as gi

        gi.reset_gpu_interpret_mode_state()


def _summarize_race(msg: str) -> str:
    lines = [ln.strip() for ln in msg.strip().splitlines() if ln.strip() and not ln.strip().startswith("clock:")]
    return " / ".join(lines[:3])


# --------------------------------------------------------------------------- modules


def load_module(kind: str, source: str, path: str, tmpdir: str) -> types.ModuleType:
    """Exec ``source`` as a fresh module. The code's file name is a copy under ``tmpdir`` (so
    tracebacks and source lines show this source); ``__file__`` is the user's path when it exists
    (so ``Path(__file__).parent / "data"`` keeps working); the user's directory is on sys.path."""
    name = _MODULE_NAMES[kind]
    base = os.path.basename(path) if path and not path.startswith("<") else "kernel.py"
    if not base.endswith(".py"):
        base += ".py"
    d = os.path.join(tmpdir, kind)
    os.makedirs(d, exist_ok=True)
    code_file = os.path.join(d, base)
    with open(code_file, "w", encoding="utf-8") as f:
        f.write(source)
    user_file = os.path.abspath(path) if path and os.path.exists(path) else code_file
    user_dir = os.path.dirname(user_file)
    if user_dir not in sys.path:
        sys.path.insert(0, user_dir)
    mod = types.ModuleType(name)
    mod.__file__ = user_file
    mod.__dict__["__pallas_fix_source_file__"] = code_file
    sys.modules[name] = mod
    code = compile(source, code_file, "exec", dont_inherit=True)
    exec(code, mod.__dict__)
    return mod


def resolve_entry(mod: types.ModuleType, entry: str) -> Callable:
    obj: Any = mod
    for part in entry.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise LookupError(f"entry point {entry!r} not found in the module (no attribute {part!r})") from None
    if not callable(obj):
        raise LookupError(f"entry point {entry!r} is not callable ({type(obj).__name__})")
    return obj


# --------------------------------------------------------------------------- inputs


def _contains_array(v: Any) -> bool:
    if isinstance(v, ArgSpec):
        return True
    if isinstance(v, (tuple, list)):
        return any(_contains_array(x) for x in v)
    return False


def _np_dtype(spec: ArgSpec):
    import numpy as np

    if spec.dtype == "bf16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(spec.numpy_dtype)


def _random_array(spec: ArgSpec, rng):
    """floats ~ N(0, 1); signed ints in [-4, 4]; unsigned ints in [0, 4]; bools fair coins."""
    import numpy as np

    dt = _np_dtype(spec)
    shape = tuple(spec.shape)
    if spec.dtype == "bool":
        return rng.random(shape) < 0.5
    if dt.kind == "i":
        return rng.integers(-4, 5, size=shape).astype(dt)
    if dt.kind == "u":
        return rng.integers(0, 5, size=shape).astype(dt)
    return rng.standard_normal(shape).astype(np.float64).astype(dt)


def _fill(v: Any, rng) -> Any:
    if isinstance(v, ArgSpec):
        return _random_array(v, rng)
    if isinstance(v, tuple):
        return tuple(_fill(x, rng) for x in v)
    if isinstance(v, list):
        return [_fill(x, rng) for x in v]
    return v


def _sds(v: Any) -> Any:
    import jax

    if isinstance(v, ArgSpec):
        return jax.ShapeDtypeStruct(tuple(v.shape), _np_dtype(v))
    if isinstance(v, tuple):
        return tuple(_sds(x) for x in v)
    if isinstance(v, list):
        return [_sds(x) for x in v]
    return v


class Call:
    """An example split into dynamic (array) and static arguments, bound to an entry."""

    def __init__(self, ex: Example):
        self.ex = ex
        self.dyn_pos = [i for i, a in enumerate(ex.args) if _contains_array(a)]
        self.dyn_kw = [k for k, v in ex.kwargs.items() if _contains_array(v)]

    def dynamic_values(self) -> list:
        return [self.ex.args[i] for i in self.dyn_pos] + [self.ex.kwargs[k] for k in self.dyn_kw]

    def inputs(self, seed: int) -> list:
        import numpy as np

        rng = np.random.default_rng(seed)
        return [_fill(v, rng) for v in self.dynamic_values()]

    def shape_structs(self) -> list:
        return [_sds(v) for v in self.dynamic_values()]

    def bind(self, fn: Callable) -> Callable:
        """A fresh function of the dynamic values only (statics closed over)."""
        ex, dyn_pos, dyn_kw = self.ex, self.dyn_pos, self.dyn_kw
        n_pos = len(dyn_pos)

        def call(*dyn):
            args = list(ex.args)
            for i, v in zip(dyn_pos, dyn[:n_pos]):
                args[i] = v
            kwargs = dict(ex.kwargs)
            for k, v in zip(dyn_kw, dyn[n_pos:]):
                kwargs[k] = v
            return fn(*args, **kwargs)

        with contextlib.suppress(Exception):
            functools.update_wrapper(call, fn, updated=())
            call.__wrapped__ = fn  # type: ignore[attr-defined]
        return call


class Runner:
    """jit once per (module, interpreter); reuse across seeds. Falls back to eager calls when the
    entry cannot be traced as a whole (e.g. it converts a traced value to a Python number)."""

    def __init__(self, fn: Callable, call: Call, interp: Any):
        import jax

        self.interp = interp
        self.bound = call.bind(fn)
        self.jitted = jax.jit(self.bound)
        self.eager = False

    def __call__(self, inputs: list):
        import jax

        with forced_interpreter(self.interp):
            if not self.eager:
                try:
                    out = self.jitted(*inputs)
                except jax.errors.ConcretizationTypeError:
                    self.eager = True
                else:
                    return jax.block_until_ready(out)
            return jax.block_until_ready(self.bound(*inputs))


def _leaves(out: Any) -> list[tuple[str, Any]]:
    import jax
    import numpy as np

    flat, _ = jax.tree_util.tree_flatten_with_path(out)
    return [(jax.tree_util.keystr(p), np.asarray(jax.device_get(v))) for p, v in flat]


# --------------------------------------------------------------------------- kernel inspection


def _sub_jaxprs(v: Any):
    from jax._src import core as jcore

    if isinstance(v, jcore.Jaxpr):
        yield v
    elif hasattr(v, "jaxpr") and isinstance(getattr(v, "jaxpr", None), jcore.Jaxpr):
        yield v.jaxpr
    elif isinstance(v, (list, tuple)):
        for x in v:
            yield from _sub_jaxprs(x)


def trace(fn: Callable, structs: list):
    """``jax.make_jaxpr`` under the HLO interpreter setting (nothing runs)."""
    import jax

    with forced_interpreter(True):
        return jax.make_jaxpr(fn)(*structs)


def pallas_call_infos(jaxpr) -> list[dict]:
    """Describe every pallas_call / core_map of a traced entry: backend, grid, semantics."""
    top = jaxpr.jaxpr if hasattr(jaxpr, "jaxpr") else jaxpr
    infos: list[dict] = []
    seen: set[int] = set()

    def walk(j):
        if id(j) in seen:
            return
        seen.add(id(j))
        for eqn in j.eqns:
            if eqn.primitive.name == "pallas_call":
                infos.append(_describe_pallas_call(eqn))
            elif eqn.primitive.name in ("core_map", "mpmd_map"):
                infos.append(_describe_core_map(eqn))
            for p in eqn.params.values():
                for sub in _sub_jaxprs(p):
                    walk(sub)

    walk(top)
    return infos


def _describe_pallas_call(eqn) -> dict:
    cp = eqn.params.get("compiler_params")
    gm = eqn.params.get("grid_mapping")
    kjaxpr = eqn.params.get("jaxpr")
    markers: list[str] = []
    backend = "generic"
    if cp is not None:
        mod = type(cp).__module__
        if "mosaic_gpu" in mod:
            backend, markers = "mosaic_gpu", [f"{type(cp).__name__} from {mod}"]
        elif "triton" in mod:
            backend, markers = "triton", [f"{type(cp).__name__} from {mod}"]
        elif "mosaic" in mod:
            backend = "tpu"
    spaces = []
    if kjaxpr is not None:
        for v in kjaxpr.invars:
            ms = getattr(getattr(v, "aval", None), "memory_space", None)
            if ms is None:
                continue
            spaces.append(ms)
            mod = type(ms).__module__
            if "mosaic_gpu" in mod:
                backend = "mosaic_gpu"
                markers.append(f"memory space {ms}")
            elif "mosaic" in mod and backend == "generic":
                backend = "tpu"
    grid = tuple(getattr(gm, "grid", ()) or ())
    sem = tuple(getattr(cp, "dimension_semantics", None) or ()) if backend == "tpu" else ()
    parallel = [str(s).lower().endswith("parallel") and "core" not in str(s).lower() and "sub" not in str(s).lower()
                for s in sem]
    # parallel prefix size: how many grid points the interpreter may spread over cores
    points = 1
    for d, is_par in zip(grid, parallel):
        if not is_par:
            break
        points *= d if isinstance(d, int) else 1
    return {
        "backend": backend,
        "markers": markers,
        "grid": [d if isinstance(d, int) else None for d in grid],
        "dimension_semantics": [str(s) for s in sem],
        "parallel_points": points,
        "num_scalar_prefetch": getattr(gm, "num_scalar_prefetch", 0),
    }


def _describe_core_map(eqn) -> dict:
    """``pl.kernel`` / ``pl.core_map`` / ``plgpu.kernel``: the backend follows the mesh."""
    mesh = eqn.params.get("mesh")
    mod = type(mesh).__module__ if mesh is not None else ""
    if eqn.primitive.name == "mpmd_map" or "mosaic_gpu" in mod:
        backend, markers = "mosaic_gpu", [f"{eqn.primitive.name} over {type(mesh).__name__ if mesh is not None else 'a GPU mesh'}"]
    elif "mosaic" in mod:
        backend, markers = "tpu", []
    else:
        backend, markers = "generic", []
    return {"backend": backend, "markers": markers, "grid": [], "dimension_semantics": [],
            "parallel_points": 1, "num_scalar_prefetch": 0, "primitive": eqn.primitive.name}


def plan_interpreters(infos: list[dict], *, tpu_interpret: Optional[bool], gpu_interpret: bool,
                      max_cores: int = MAX_CORES) -> tuple[list[tuple[str, Any]], list[str]]:
    """Candidate interpreters for the rewrite (besides HLO ``interpret``) and skip notes."""
    from jax.experimental.pallas import tpu as pltpu

    plan: list[tuple[str, Any]] = []
    notes: list[str] = []
    backends = {i["backend"] for i in infos}
    run_tpu = tpu_interpret
    if run_tpu is None:
        if "mosaic_gpu" in backends:
            marker = next((m for i in infos for m in i["markers"] if i["backend"] == "mosaic_gpu"), "")
            notes.append(f"tpu-interpret skipped: Mosaic GPU kernel ({marker}); TPU interpret mode rejects it")
            run_tpu = False
        elif "triton" in backends:
            notes.append("tpu-interpret skipped: Triton kernel (no dimension semantics to check)")
            run_tpu = False
        elif not infos:
            notes.append("tpu-interpret skipped: no pallas_call traced")
            run_tpu = False
        else:
            run_tpu = True
    if run_tpu:
        # uninitialized_memory="nan" (the jax 0.12 default, made explicit): a missing scratch
        # init then shows up as NaNs; with "zero" a zero-initialised accumulator would pass.
        plan.append((TPU, pltpu.InterpretParams(detect_races=True, on_race="warn",
                                                uninitialized_memory="nan")))
        points = max((i["parallel_points"] for i in infos if i["backend"] == "tpu"), default=1)
        if points > 1:
            cores = max(2, min(points, max_cores))
            plan.append((f"{TPU}-{cores}cores",
                         pltpu.InterpretParams(detect_races=True, on_race="warn",
                                               uninitialized_memory="nan",
                                               num_cores_or_threads=cores, random_seed=1)))
    if gpu_interpret:
        import jax

        from pallas_fix.rules.gpu_hazards import verification_note

        plan.append((GPU, interpret_gpu_params()))
        notes.append(verification_note(jax.__version__))
    return plan, notes


# --------------------------------------------------------------------------- one example


def _summarize_exc(e: BaseException) -> str:
    text = str(e).strip()
    if "Traceback (most recent call last)" in text or len(text.splitlines()) > 6:
        lines = [ln for ln in text.splitlines() if ln.strip()]
        import re

        errs = [ln.strip() for ln in lines if re.match(r"^\s*[A-Za-z_.]*(Error|Exception|Warning)\b:?", ln)]
        race = [ln for ln in lines if "RACE DETECTED" in ln]
        if race:
            return "race detected: " + _summarize_race("\n".join(lines[lines.index(race[0]):]))
        if errs:
            text = errs[-1]
        else:
            text = lines[-1] if lines else text
    text = text if len(text) < 600 else text[:600] + "..."
    if not text:
        # a bare `assert`: say where it fired and show the asserted line
        tb = traceback.extract_tb(e.__traceback__)
        if tb:
            fr = tb[-1]
            parts = fr.filename.replace(os.sep, "/").split("/")
            short = "/".join(parts[parts.index("jax"):]) if "jax" in parts else os.path.basename(fr.filename)
            text = f"at {short}:{fr.lineno}" + (f": `{fr.line.strip()}`" if fr.line else "")
    return f"{type(e).__name__}: {text}"


def _user_frame(e: BaseException) -> str:
    tb = traceback.extract_tb(e.__traceback__)
    for fr in reversed(tb):
        if "_pallas_fix_verify_" in fr.filename or "/original/" in fr.filename or "/rewritten/" in fr.filename:
            return f" (at {os.path.basename(fr.filename)}:{fr.lineno})"
    return ""


def _count_dynamic_slices(fn: Callable, structs: list, jaxpr=None) -> tuple[Optional[int], Optional[str]]:
    """Dynamic slices per the oracle (``pallas_fix.oracle``); reuses ``jaxpr`` when given."""
    try:
        from pallas_fix.verify import oracle
    except Exception as e:  # the oracle is optional for verification itself
        return None, f"dynamic slices not counted (pallas_fix.oracle unavailable: {type(e).__name__})"
    try:
        if jaxpr is not None and hasattr(oracle, "report_from_jaxpr"):
            report = oracle.report_from_jaxpr(jaxpr)
        else:
            with forced_interpreter(True):
                report = oracle.trace_report(fn, *structs)
        return len(list(report.dynamic_slices())), None
    except Exception as e:
        return None, f"dynamic slices not counted ({_summarize_exc(e)})"


def verify_example(orig_mod, rew_mod, ex: Example, *, seeds: list[int], tpu_interpret: Optional[bool],
                   gpu_interpret: bool, max_cores: int, backend_seeds: Optional[int] = 1) -> dict:
    """Verify one example. The HLO candidate runs every seed; the backend interpreters (TPU / GPU
    interpret mode: races, out-of-bounds blocks, dimension semantics, uninitialised memory, which
    do not depend on the input values) run the first ``backend_seeds`` seeds (None = all)."""
    from pallas_fix.verify.compare import compare_leaves

    t0 = time.perf_counter()
    v: dict[str, Any] = {
        "entry": ex.entry, "status": "error", "max_abs_err": None, "max_rel_err": None,
        "seeds": list(seeds), "interpreters": [], "dynamic_slices_before": None,
        "dynamic_slices_after": None, "seconds": 0.0, "message": "",
        "details": {"example": ex.text, "timings": {}, "outcomes": {}, "notes": []},
    }
    notes: list[str] = v["details"]["notes"]

    def finish(status: str, message: str) -> dict:  # noqa: D401
        v["status"] = status
        v["message"] = message
        v["seconds"] = round(time.perf_counter() - t0, 3)
        return v

    call = Call(ex)
    try:
        f_orig = resolve_entry(orig_mod, ex.entry)
        f_rew = resolve_entry(rew_mod, ex.entry)
    except LookupError as e:
        return finish("error", str(e))
    structs = call.shape_structs()

    try:
        jaxpr_rew = trace(call.bind(f_rew), structs)
        infos = pallas_call_infos(jaxpr_rew)
    except Exception as e:
        jaxpr_rew, infos = None, None
        trace_error = e
    before, note = _count_dynamic_slices(call.bind(f_orig), structs)
    v["dynamic_slices_before"] = before
    if note:
        notes.append(note)
    if infos is None:
        e = trace_error
        return finish("error", f"tracing the rewrite failed: {_summarize_exc(e)}{_user_frame(e)}")
    after, note = _count_dynamic_slices(call.bind(f_rew), structs, jaxpr_rew)
    v["dynamic_slices_after"] = after
    if note and note not in notes:
        notes.append(note)
    v["details"]["pallas_calls"] = infos
    plan, skip_notes = plan_interpreters(infos, tpu_interpret=tpu_interpret, gpu_interpret=gpu_interpret,
                                         max_cores=max_cores)
    notes += skip_notes

    # reference: original under the HLO interpreter
    ref_runner = Runner(f_orig, call, True)
    refs = []
    ts = time.perf_counter()
    original_broken: Optional[str] = None
    for seed in seeds:
        try:
            refs.append(_leaves(ref_runner(call.inputs(seed))))
        except Exception as e:
            summary = _summarize_exc(e)
            if not _NON_SCALAR_START.search(summary):
                return finish("error", f"the original failed under interpret (seed {seed}): "
                                       f"{summary}{_user_frame(e)}")
            # A start that is not an integer scalar (PF107) fails in every interpreter: there is
            # no reference. The rewrite can still be run everywhere and checked for agreement.
            original_broken = summary
            break
    if original_broken is not None:
        refs = []
        rew_ref = Runner(f_rew, call, True)
        for seed in seeds:
            try:
                refs.append(_leaves(rew_ref(call.inputs(seed))))
            except Exception as e:
                return finish("error", f"the original cannot run ({original_broken}) and the rewrite failed too "
                                       f"(seed {seed}): {_summarize_exc(e)}{_user_frame(e)}")
    v["details"]["timings"]["reference"] = round(time.perf_counter() - ts, 3)

    failures: list[tuple[str, str, str]] = []  # (interpreter, status, message)
    races_seen: list[int] = []  # indices into failures; a race explains more than a mismatch
    seeds_run: dict[str, list[int]] = v["details"].setdefault("seeds_per_interpreter", {})
    max_abs = 0.0
    max_rel = 0.0
    errs_known = True
    for name, interp in [(HLO, True)] + plan:
        v["interpreters"].append(name)
        ts = time.perf_counter()
        runner = Runner(f_rew, call, interp)
        outcome = "ok"
        n = len(seeds) if (name == HLO or backend_seeds is None) else max(1, backend_seeds)
        seeds_run[name] = list(seeds[:n])
        for seed, ref in list(zip(seeds, refs))[:n]:
            _RACES.messages.clear()
            if name != HLO:
                _reset_interpreters()
            try:
                got = _leaves(runner(call.inputs(seed)))
            except Exception as e:
                _reset_interpreters()
                msg = _summarize_exc(e)
                failures.append((name, "error", f"{name} raised on seed {seed}: {msg}{_user_frame(e)}"))
                outcome = "error: " + msg
                break
            raced = bool(_RACES.messages) or (name.startswith(TPU) and _races_found_flag())
            results = compare_leaves(ref, got)
            for r in results:
                if r.abs_err is None:
                    if not r.ok:
                        errs_known = False
                else:
                    max_abs = max(max_abs, r.abs_err)
                if r.rel_err is not None:
                    max_rel = max(max_rel, r.rel_err)
            bad = [r for r in results if not r.ok]
            if raced:
                race = _summarize_race(_RACES.messages[0]) if _RACES.messages else "races_found is set"
                extra = f"; outputs also differ: {bad[0].reason}" if bad else ""
                failures.append((name, "error", f"{name} detected a data race on seed {seed}: {race}"
                                 f" (likely a grid axis marked \"parallel\" that carries a dependency, e.g. a reduction:"
                                 f" mark it \"arbitrary\"){extra}"))
                races_seen.append(len(failures) - 1)
                outcome = "race" + (" + mismatch" if bad else "")
                break
            if bad:
                failures.append((name, "mismatch", f"{name} mismatch on seed {seed}: {bad[0].reason}"))
                outcome = "mismatch: " + (bad[0].reason or "")
                break
        v["details"]["timings"][name] = round(time.perf_counter() - ts, 3)
        v["details"]["outcomes"][name] = outcome

    v["max_abs_err"] = max_abs if errs_known else None
    v["max_rel_err"] = max_rel if errs_known else None
    tail = ("; " + "; ".join(notes)) if notes else ""
    if failures:
        if races_seen:
            failures.insert(0, failures.pop(races_seen[0]))
        status, msg = failures[0][1], failures[0][2]
        also = []
        for name, st, m in failures[1:]:
            reason = m.split(": ", 1)[1] if ": " in m else m
            first_reason = msg.split(": ", 1)[1] if ": " in msg else msg
            if reason == first_reason:
                also.append(f"{name}: same")
            else:
                also.append(m if len(m) <= 300 else m[:300] + "...")
        if also:
            msg += " [also failed: " + "; ".join(also) + "]"
        return finish(status, msg + tail)
    groups: dict[str, list[str]] = {}
    for name, ss in seeds_run.items():
        groups.setdefault(str(ss), []).append(name)
    which = ", ".join(f"seeds {k} ({', '.join(names)})" for k, names in groups.items())
    if original_broken is not None:
        return finish(
            "unverified",
            f"the original cannot run in any interpreter ({original_broken}), so there is nothing to compare "
            f"against; the rewrite runs and agrees across interpreters on {which}" + tail,
        )
    return finish("verified", f"outputs match on {which}" + tail)


# --------------------------------------------------------------------------- main


def run_job(job: dict, emit: Callable[[dict], None]) -> None:
    examples = [example_from_json(e) for e in job["examples"]]
    uses_64 = any(
        isinstance(a, ArgSpec) and a.dtype in ("f64", "i64", "u64")
        for ex in examples
        for a in _walk_values(list(ex.args) + list(ex.kwargs.values()))
    )
    import jax

    if uses_64:
        jax.config.update("jax_enable_x64", True)
    root = logging.getLogger()
    if _RACES not in root.handlers:
        root.addHandler(_RACES)
    install_patches()

    tmpdir = job["tmpdir"]
    mods = {}
    for kind in ("original", "rewritten"):
        spec = job[kind]
        try:
            with forced_interpreter(True):
                mods[kind] = load_module(kind, spec["source"], spec.get("path") or "<kernel>", tmpdir)
        except BaseException as e:
            if isinstance(e, KeyboardInterrupt):
                raise
            tb = traceback.extract_tb(e.__traceback__)
            where = next((f" (line {f.lineno})" for f in reversed(tb) if f"/{kind}/" in f.filename), "")
            msg = f"importing the {kind} source failed: {_summarize_exc(e)}{where}"
            for i, ex in enumerate(examples):
                emit({"type": "verdict", "index": i, "entry": ex.entry, "status": "error",
                      "max_abs_err": None, "max_rel_err": None, "seeds": job["seeds"], "interpreters": [],
                      "dynamic_slices_before": None, "dynamic_slices_after": None, "seconds": 0.0,
                      "message": msg, "details": {"example": ex.text}})
            return
    for i, ex in enumerate(examples):
        emit({"type": "begin", "index": i, "entry": ex.entry})
        try:
            verdict = verify_example(mods["original"], mods["rewritten"], ex, seeds=list(job["seeds"]),
                                     tpu_interpret=job.get("tpu_interpret"),
                                     gpu_interpret=bool(job.get("gpu_interpret")),
                                     max_cores=int(job.get("max_cores") or MAX_CORES),
                                     backend_seeds=job.get("backend_seeds", 1))
        except Exception as e:  # a bug in the worker itself: still report per example
            verdict = {"entry": ex.entry, "status": "error", "max_abs_err": None, "max_rel_err": None,
                       "seeds": job["seeds"], "interpreters": [], "dynamic_slices_before": None,
                       "dynamic_slices_after": None, "seconds": 0.0,
                       "message": f"verification crashed: {_summarize_exc(e)}",
                       "details": {"traceback": traceback.format_exc()}}
        verdict["type"] = "verdict"
        verdict["index"] = i
        emit(verdict)


def _walk_values(vals):
    for v in vals:
        if isinstance(v, (tuple, list)):
            yield from _walk_values(v)
        else:
            yield v


def _json_safe(v: Any) -> Any:
    """Non-finite floats become None (strict JSON)."""
    if isinstance(v, float):
        return v if v == v and v not in (float("inf"), float("-inf")) else None
    if isinstance(v, dict):
        return {k: _json_safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json_safe(x) for x in v]
    return v


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pallas_fix.verify.worker")
    ap.add_argument("--job", required=True)
    ap.add_argument("--out", default="-")
    ns = ap.parse_args(argv)
    with open(ns.job, encoding="utf-8") as f:
        job = json.load(f)

    # Keep the protocol channel clean: whatever user code or jax prints goes to stderr.
    sys.stdout.flush()
    real_stdout = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    out = os.fdopen(real_stdout, "w") if ns.out == "-" else open(ns.out, "a", encoding="utf-8")

    def emit(obj: dict) -> None:
        out.write(json.dumps(_json_safe(obj), default=str, allow_nan=False) + "\n")
        out.flush()

    emit({"type": "start", "pid": os.getpid()})
    try:
        run_job(job, emit)
    except BaseException as e:  # noqa: BLE001
        emit({"type": "fatal", "message": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()})
        return 1
    emit({"type": "done"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
