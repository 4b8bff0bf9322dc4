"""Which interpreters check the rewrite, besides the HLO one (see runner.py's docstring).

Names here are the ones reported in ``Verdict.interpreters``. Imports jax lazily.
"""

from __future__ import annotations

from typing import Any, Optional

from pallas_fix.rules.gpu_interpret.hazards import verification_note

HLO = "interpret"
TPU = "tpu-interpret"
GPU = "gpu-interpret"
MAX_CORES = 16
# The outcome of an interpreter where the rewrite raised and the original did not pass either:
# it ran both, but compared nothing, so no verdict may name it among those whose outputs matched.
FAILS_TOO = "original fails too"


def compared_in(names: list[str], outcomes: dict) -> list[str]:
    """The interpreters of `names` that compared the rewrite with the reference."""
    return [n for n in names if not str(outcomes.get(n, "")).startswith(FAILS_TOO)]


def interpret_gpu_params():
    """`plgpu.InterpretGPUParams()`; jax 0.10.2 does not export it from `mosaic_gpu` yet."""
    try:
        from jax.experimental.pallas import mosaic_gpu as plgpu

        return plgpu.InterpretGPUParams()
    except AttributeError:
        from jax._src.pallas.mosaic_gpu.interpret.params import InterpretGPUParams

        return InterpretGPUParams()


def _tpu_skip_note(infos: list[dict]) -> Optional[str]:
    """Why TPU interpret mode cannot run these kernels, or None when it can."""
    backends = {i["backend"] for i in infos}
    if "mosaic_gpu" in backends:
        marker = next((m for i in infos for m in i["markers"] if i["backend"] == "mosaic_gpu"), "")
        return f"tpu-interpret skipped: Mosaic GPU kernel ({marker}); TPU interpret mode rejects it"
    if "triton" in backends:
        return "tpu-interpret skipped: Triton kernel (no dimension semantics to check)"
    if not infos:
        return "tpu-interpret skipped: no pallas_call traced"
    return None


def _tpu_plan(infos: list[dict], max_cores: int) -> list[tuple[str, Any]]:
    from jax.experimental.pallas import tpu as pltpu

    # uninitialized_memory="nan" (the jax 0.12 default, made explicit): a missing scratch
    # init then shows up as NaNs; with "zero" a zero-initialised accumulator would pass.
    plan: list[tuple[str, Any]] = [
        (TPU, _interpret_params(pltpu, detect_races=True, on_race="warn", uninitialized_memory="nan"))
    ]
    points = max((i["parallel_points"] for i in infos if i["backend"] == "tpu"), default=1)
    accepted = _accepted(pltpu)
    if points > 1 and "num_cores_or_threads" in accepted:  # older jax runs one core only
        cores = max(2, min(points, max_cores))
        plan.append((f"{TPU}-{cores}cores",
                     _interpret_params(pltpu, detect_races=True, on_race="warn", uninitialized_memory="nan",
                                       num_cores_or_threads=cores, random_seed=1)))
    return plan


def _accepted(pltpu) -> set[str]:
    import inspect

    return set(inspect.signature(pltpu.InterpretParams).parameters)


def _interpret_params(pltpu, **options):
    """`pltpu.InterpretParams` with the options this jax knows (0.10.2 has no `on_race`: races
    are then read from the interpreter's races flag alone, races.races_found_flag)."""
    accepted = _accepted(pltpu)
    return pltpu.InterpretParams(**{k: v for k, v in options.items() if k in accepted})


def plan_interpreters(infos: list[dict], *, tpu_interpret: Optional[bool], gpu_interpret: bool,
                      max_cores: int = MAX_CORES) -> tuple[list[tuple[str, Any]], list[str]]:
    """Candidate interpreters for the rewrite (besides HLO ``interpret``) and skip notes.

    ``infos`` is the kernel survey (:func:`pallas_fix.verify.worker.kernel_survey.pallas_call_infos`);
    ``tpu_interpret`` None chooses from it."""
    plan: list[tuple[str, Any]] = []
    notes: list[str] = []
    run_tpu = tpu_interpret
    if run_tpu is None:
        note = _tpu_skip_note(infos)
        if note is not None:
            notes.append(note)
        run_tpu = note is None
    if run_tpu:
        plan += _tpu_plan(infos, max_cores)
    if gpu_interpret:
        import jax

        plan.append((GPU, interpret_gpu_params()))
        notes.append(verification_note(jax.__version__))
    return plan, notes
