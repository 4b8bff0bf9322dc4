"""What a traced entry contains: every pallas_call / core_map, its backend, grid and semantics.

The worker traces the rewrite once (nothing runs) and uses this survey to choose the backend
interpreters (:mod:`pallas_fix.verify.worker.interpreters`); it is also kept in the verdict's details.
Each pallas_call's ``"on_chip"`` record is the bytes one grid step holds on chip
(:mod:`pallas_fix.verify.judge.footprint`), or None when its grid mapping could not be read; its
``"source"`` is the line that made the call. ``"steps"`` (grid points, None when a size is
dynamic), ``"windowed"`` (blocks that move with the grid: what Pallas pipelines) and
``"scratch_bytes"`` say what a lift costs per step (:mod:`pallas_fix.verify.judge.lift_cost`);
``"blocks"`` are the blocks as Mosaic's tiling rule sees them (:mod:`pallas_fix.verify.judge.tiling`).
"""

from __future__ import annotations

import linecache
import math
import os
import re
from typing import Callable

from pallas_fix.verify.worker.block_layouts import block_records, call_layout
from pallas_fix.verify.judge.footprint import CallLayout, step_bytes
from pallas_fix.verify.worker.interpret_mode import forced_interpreter
from pallas_fix.verify.judge.jaxprs import as_jaxprs, open_jaxpr


def trace(fn: Callable, structs: list):
    """``jax.make_jaxpr`` under the HLO interpreter setting (nothing runs)."""
    import jax

    with forced_interpreter(True):
        return jax.make_jaxpr(fn)(*structs)


def pallas_call_infos(jaxpr) -> list[dict]:
    """Describe every pallas_call / core_map of a traced entry: backend, grid, semantics."""
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
                for sub in as_jaxprs(p):
                    walk(sub)

    walk(open_jaxpr(jaxpr))
    return infos


def _pallas_call_backend(cp, kjaxpr) -> tuple[str, list[str]]:
    """(backend, what gave it away): compiler params first, then the kernel refs' memory spaces."""
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
    for v in kjaxpr.invars if kjaxpr is not None else ():
        ms = getattr(getattr(v, "aval", None), "memory_space", None)
        if ms is None:
            continue
        mod = type(ms).__module__
        if "mosaic_gpu" in mod:
            backend = "mosaic_gpu"
            markers.append(f"memory space {ms}")
        elif "mosaic" in mod and backend == "generic":
            backend = "tpu"
    return backend, markers


def _parallel_points(grid: tuple, sem: tuple) -> int:
    """Size of the "parallel" grid prefix: how many grid points the interpreter may spread over
    cores (core- and subcore-parallel axes do not count)."""
    parallel = [str(s).lower().endswith("parallel") and "core" not in str(s).lower() and "sub" not in str(s).lower()
                for s in sem]
    points = 1
    for d, is_par in zip(grid, parallel):
        if not is_par:
            break
        points *= d if isinstance(d, int) else 1
    return points


def _describe_pallas_call(eqn) -> dict:
    cp = eqn.params.get("compiler_params")
    gm = eqn.params.get("grid_mapping")
    backend, markers = _pallas_call_backend(cp, eqn.params.get("jaxpr"))
    grid = tuple(getattr(gm, "grid", ()) or ())
    sem = tuple(getattr(cp, "dimension_semantics", None) or ()) if backend == "tpu" else ()
    layout = _layout(eqn, backend)
    return {
        "kernel": kernel_name(eqn),
        "backend": backend,
        "markers": markers,
        "grid": [d if isinstance(d, int) else None for d in grid],
        "dimension_semantics": [str(s) for s in sem],
        "parallel_points": _parallel_points(grid, sem),
        "num_scalar_prefetch": getattr(gm, "num_index_operands", getattr(gm, "num_scalar_prefetch", 0)),
        "on_chip": step_bytes(layout).to_json() if layout is not None else None,
        "source": _call_site(eqn),
        "steps": math.prod(grid) if all(isinstance(d, int) for d in grid) else None,
        "windowed": sum(1 for b in layout.blocks if not b.trivial_window) if layout is not None else None,
        "scratch_bytes": sum(s.nbytes for s in layout.scratch) if layout is not None else None,
        "blocks": _blocks(eqn),
    }


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep


def _call_site(eqn):
    """``{"file": base name, "line": n}`` of the innermost frame outside jax and pallas-fix (its
    patched pallas_call) that made the call: the user's ``pl.pallas_call(`` line; or None."""
    try:
        from jax._src import source_info_util

        frames = source_info_util.user_frames(eqn.source_info.traceback)
        frame = next((f for f in frames if not os.path.abspath(f.file_name).startswith(_PACKAGE_DIR)), None)
    except Exception:  # another jax spells it differently: the finding goes without a line
        return None
    return {"file": os.path.basename(frame.file_name), "line": frame.start_line} if frame is not None else None


def _layout(eqn, backend: str) -> CallLayout | None:
    """The call's blocks, scratch and scalar-prefetch operands, or None when unreadable."""
    try:
        return call_layout(eqn, backend)
    except Exception:  # a grid mapping this jax version spells differently: not counted
        return None


def _blocks(eqn) -> list[dict]:
    try:
        return block_records(eqn)
    except Exception:  # as above: no tiling check on what cannot be read
        return []


def kernel_name(eqn):
    """The kernel function's name, as the kernel jaxpr's debug info gives it ("my_kernel at
    path:line"; partials unwrapped), or None; it tells which kernels an example reached."""
    info = getattr(eqn.params.get("jaxpr"), "debug_info", None)
    src = getattr(info, "func_src_info", None) or ""
    name, _, where = src.partition(" at ")
    if name and name == eqn.params.get("name") and where:
        # `pallas_call(..., name="attn_fwd")` names the call in the kernel's place; the location
        # is still the kernel's `def` line.
        return _def_named_at(where) or name
    if name == "<lambda>" and where:
        # `pl.pallas_call(lambda *refs: kernel(*refs, bs=8), ...)`: the kernel the lambda calls
        return _lambda_callee_at(where) or name
    return name or None


def _lambda_callee_at(where: str):
    """The function the one lambda at "path:line" calls first (`kernel` in `lambda *refs:
    kernel(*refs)`), or None (two lambdas on the line, or its body elsewhere)."""
    text = _line_at(where)
    found = re.findall(r"\blambda\b[^:]*:\s*([\w.]+)\(", text)
    return found[0].rpartition(".")[2] if len(found) == 1 and text.count("lambda") == 1 else None


def _def_named_at(where: str):
    """The function a `def` at "path:line" defines, or None (a decorator's line, no source)."""
    found = re.match(r"\s*(?:async\s+)?def\s+(\w+)", _line_at(where))
    return found.group(1) if found else None


def _line_at(where: str) -> str:
    """The source line "path:line" names ("" where there is none)."""
    path, _, line = where.rpartition(":")
    return linecache.getline(path, int(line)) if line.isdigit() else ""


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
