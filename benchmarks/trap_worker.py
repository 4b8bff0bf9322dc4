"""Comparison worker for benchmarks/bench_traps.py, run as a subprocess: `python trap_worker.py SPEC.json`.

SPEC names the original trap, its rewrites, the example calls, the seeds and the int range. The worker imports
every module from its path (importlib), calls the entries on the same random inputs and writes, per rewrite,
`rewritten-equal` / `WRONG` / `rewrite-fails-to-run` with how, plus a race check in TPU interpret mode.
Stdlib, numpy and jax only; pallas_fix is never imported.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import sys
from pathlib import Path

WIDE_INTS = (-(2**24), 2**24)
FLOAT_SCALES = (1.0, 10.0, 1000.0)
TOLERANCE = {"float32": (1e-5, 1e-6), "bfloat16": (1e-2, 1e-2), "float16": (1e-2, 1e-2)}
RACE_INTERPRET = "interpret=_pltpu_race_check.InterpretParams(detect_races=True, num_cores_or_threads=2)"
RACE_IMPORT = "from jax.experimental.pallas import tpu as _pltpu_race_check\n"


# ---------------------------------------------------------------- example calls (pallas-fix's grammar)


def split_top_level(text: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += ch in "([{"
        depth -= ch in ")]}"
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return parts + ([cur.strip()] if cur.strip() else [])


def parse_example(call: str) -> dict:
    """`entry(f32[64, 128], i32[8], block=16)` -> {'entry', 'args': [...], 'kwargs': {...}}."""
    m = re.fullmatch(r"\s*([A-Za-z_]\w*)\s*\((.*)\)\s*", call)
    if not m:
        raise ValueError(f"bad example call: {call!r}")
    args, kwargs = [], {}
    for part in split_top_level(m[2]):
        kw = re.fullmatch(r"([A-Za-z_]\w*)\s*=\s*(.+)", part)
        value = parse_value(kw[2] if kw else part)
        if kw:
            kwargs[kw[1]] = value
        else:
            args.append(value)
    return {"entry": m[1], "args": args, "kwargs": kwargs, "text": call}


def parse_value(text: str):
    arr = re.fullmatch(r"([a-z]+\d*)\[([\d,\s]*)\]", text.strip())
    if arr:
        return {"dtype": arr[1], "shape": [int(d) for d in arr[2].replace(" ", "").split(",") if d]}
    return {"literal": ast.literal_eval(text.strip())}



# ---------------------------------------------------------------- running and comparing


def load_module(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(Path(path).parent))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.pop(0)
    return module


def make_inputs(example: dict, seed: int, scale: float, int_range: tuple[int, int]):
    import jax
    import jax.numpy as jnp

    dtypes = {"f32": jnp.float32, "f16": jnp.float16, "bf16": jnp.bfloat16, "f64": jnp.float64, "i32": jnp.int32,
              "i16": jnp.int16, "i8": jnp.int8, "u8": jnp.uint8, "u32": jnp.uint32, "bool": jnp.bool_}
    key = jax.random.key(seed)
    args = []
    for spec in example["args"]:
        if "literal" in spec:
            args.append(spec["literal"])
            continue
        key, sub = jax.random.split(key)
        dtype, shape = dtypes[spec["dtype"]], tuple(spec["shape"])
        if jnp.issubdtype(dtype, jnp.floating):
            args.append((scale * jax.random.normal(sub, shape, jnp.float32)).astype(dtype))
        elif dtype == jnp.bool_:
            args.append(jax.random.bernoulli(sub, 0.5, shape))
        else:
            lo, hi = int_range
            info = jnp.iinfo(dtype)
            args.append(jax.random.randint(sub, shape, max(lo, info.min), min(hi, info.max), jnp.int32).astype(dtype))
    return args, {k: v["literal"] for k, v in example["kwargs"].items()}


def call_entry(module, example: dict, args, kwargs):
    import jax
    import numpy as np

    fn = getattr(module, example["entry"])
    try:
        out = fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - any failure of the kernel is a result
        return None, summarize_error(exc)
    return [np.asarray(leaf) for leaf in jax.tree.leaves(out)], None


def summarize_error(exc: Exception) -> str:
    """One line: the race report, or the innermost error of a callback traceback, or the first line."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    if any("RACE DETECTED" in ln for ln in lines):
        at = next(n for n, ln in enumerate(lines) if "RACE DETECTED" in ln)
        return "RACE DETECTED: " + " / ".join(lines[at + 1 : at + 4 : 2])[:300]
    if lines and "Traceback" in lines[0]:
        errors = [ln for ln in lines if re.match(r"\w+(Error|Exception)\b", ln)]
        return (errors[-1] if errors else lines[-1])[:300]
    return f"{type(exc).__name__}: {lines[0][:300] if lines else ''}"


def compare(ref: list, got: list) -> str | None:
    import numpy as np

    if len(ref) != len(got):
        return f"{len(got)} outputs, expected {len(ref)}"
    for n, (r, g) in enumerate(zip(ref, got)):
        if r.shape != g.shape or r.dtype != g.dtype:
            return f"output {n}: {g.dtype}{list(g.shape)}, expected {r.dtype}{list(r.shape)}"
        if r.dtype.kind in "iub":
            bad = r != g
            if bad.any():
                return f"output {n}: {int(bad.sum())}/{r.size} ints differ (max |diff| {int(np.max(np.abs(r.astype(np.int64) - g.astype(np.int64))))})"
            continue
        rtol, atol = TOLERANCE.get(str(r.dtype), (1e-5, 1e-6))
        r64, g64 = r.astype(np.float64), g.astype(np.float64)
        ok = np.isclose(g64, r64, rtol=rtol, atol=atol, equal_nan=True)
        if not ok.all():
            err = np.abs(np.where(np.isfinite(r64) & np.isfinite(g64), g64 - r64, np.inf))
            return (f"output {n}: {int((~ok).sum())}/{r.size} elements differ, max |diff| {float(np.nanmax(err)):.3g}"
                    f" (max |ref| {float(np.nanmax(np.abs(r64))):.3g})")
    return None


def race_copy(path: str, workdir: Path, tag: str) -> str | None:
    text = Path(path).read_text()
    if "plgpu" in text or "pltriton" in text or "interpret=True" not in text:
        return None
    lines = text.splitlines(keepends=True)
    first_import = next(n for n, ln in enumerate(lines) if ln.startswith(("import ", "from ")))
    lines.insert(first_import, RACE_IMPORT)
    out = workdir / f"race_{tag}_{Path(path).name}"
    out.write_text("".join(lines).replace("interpret=True", RACE_INTERPRET))
    return str(out)


def worker(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    examples = [parse_example(c) for c in spec["examples"]]
    lo_hi = tuple(spec["int_range"])
    variants = [(s, lo_hi) for s in FLOAT_SCALES] + [(1.0, WIDE_INTS)]
    original = load_module(spec["original"], "trap_original")
    refs = {}
    for e, ex in enumerate(examples):
        for seed in range(spec["seeds"]):
            for v, (scale, ints) in enumerate(variants):
                args, kwargs = make_inputs(ex, seed, scale, ints)
                refs[(e, seed, v)] = (args, kwargs, *call_entry(original, ex, args, kwargs))
    results = {}
    for r, path in enumerate(spec["rewrites"]):
        results[path] = check_rewrite(path, r, examples, variants, refs, spec)
    Path(spec["out"]).write_text(json.dumps(results))


def check_rewrite(path: str, r: int, examples, variants, refs, spec) -> dict:
    try:
        module = load_module(path, f"trap_rewrite_{r}")
    except Exception as exc:  # noqa: BLE001
        return {"status": "rewrite-fails-to-run", "how": f"import: {type(exc).__name__}: {exc}"}
    for (e, seed, v), (args, kwargs, ref, ref_err) in refs.items():
        ex = examples[e]
        where = f"{ex['text']}, seed {seed}, floats x{variants[v][0]:g}, ints in {list(variants[v][1])}"
        got, err = call_entry(module, ex, args, kwargs)
        if err and ref_err:
            continue  # the original fails on these inputs too
        if err:
            return {"status": "rewrite-fails-to-run", "how": f"{err} [{where}]"}
        if ref_err:
            return {"status": "WRONG", "how": f"the original fails ({ref_err}) but the rewrite runs [{where}]"}
        diff = compare(ref, got)
        if diff:
            return {"status": "WRONG", "how": f"{diff} [{where}]"}
    return {"status": "rewritten-equal", "how": "", "race": race_check(path, r, examples[0], spec)}


def race_check(path: str, r: int, example: dict, spec) -> str:
    workdir = Path(spec["out"]).parent
    orig, new = race_copy(spec["original"], workdir, "orig"), race_copy(path, workdir, f"new{r}")
    if not orig or not new:
        return "n/a (not a TPU-style interpret=True kernel)"
    args, kwargs = make_inputs(example, 0, 1.0, tuple(spec["int_range"]))
    ref, err = call_entry(load_module(orig, f"trap_race_orig_{r}"), example, args, kwargs)
    if err:
        return f"n/a (the original fails in TPU interpret mode: {err})"
    got, err = call_entry(load_module(new, f"trap_race_new_{r}"), example, args, kwargs)
    if err:
        return f"FAIL ({err})"
    diff = compare(ref, got)
    return f"FAIL (outputs differ on 2 cores: {diff})" if diff else "ok"


if __name__ == "__main__":
    worker(sys.argv[1])
