"""Timing a kernel on the device: calls inside one jitted loop, not one call from Python.

A call dispatched from Python costs about 0.6 ms of wall time on the device machine (dispatch and
sync; measured on a TPU v5e, 2026-12-05), more than most kernels of ``bench_tpu.py`` take on the
chip, and timed that way every ratio shrinks towards 1. So calls are timed inside one jitted loop,
long enough (TARGET_S) that the one dispatch per loop is noise. Each iteration passes the inputs
through an optimization barrier with the loop's counter, so XLA can neither hoist the call out of
the loop nor merge iterations; the loop adds about 0.7 us per call there (``dispatch_floor``).
"""

from __future__ import annotations

import functools
import statistics
import time

TARGET_S = 0.02
MAX_ITERS = 8192


def looped(fn, kwargs):
    """jit(n, *args) -> (n, the last output): `fn(*args, **kwargs)` called n times in a row on the
    device."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    call = functools.partial(fn, **kwargs)

    @jax.jit
    def run(n, *args):
        def body(_, carry):
            dep, _ = lax.optimization_barrier((args, carry[0]))
            # The output is loop state and the loop's result, so every iteration computes all of
            # it (a use of one element would let XLA compute only that element of an XLA
            # reference: slices move through elementwise ops; an unused one is dropped).
            return carry[0] + 1.0, call(*dep)

        zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), jax.eval_shape(call, *args))
        return lax.fori_loop(0, n, body, (jnp.float32(0), zeros))

    return run


def time_per_call(run, args, repeat: int) -> float:
    """Median over `repeat` runs of `looped`'s loop of (loop time / iterations), in ms; the loop is
    first grown until one run takes TARGET_S (n is traced: growing it does not recompile)."""
    import jax

    n = 2
    while True:
        t0 = time.perf_counter()
        jax.block_until_ready(run(n, *args))
        dt = time.perf_counter() - t0
        if dt >= TARGET_S or n >= MAX_ITERS:
            break
        n = min(MAX_ITERS, n * max(2, int(TARGET_S / max(dt, 1e-6)) + 1))
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        jax.block_until_ready(run(n, *args))
        times.append((time.perf_counter() - t0) / n)
    return statistics.median(times) * 1e3


def dispatch_floor(repeat: int) -> tuple[float, float]:
    """(ms of wall time per plain jitted call of a trivial op, ms per iteration of the timing loop
    around the same op): what the two ways of timing cost on their own."""
    import jax
    import jax.numpy as jnp

    x = jnp.ones((8, 128), jnp.float32)
    f = jax.jit(lambda a: a * 2.0)
    jax.block_until_ready(f(x))
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        jax.block_until_ready(f(x))
        times.append(time.perf_counter() - t0)
    run = looped(f, {})
    jax.block_until_ready(run(1, x))
    return statistics.median(times) * 1e3, time_per_call(run, (x,), repeat)


def classify_error(exc: BaseException) -> str:
    """A compile or run failure in a few words (VMEM OOM, tiling, alignment, ...), then its first line."""
    text = f"{type(exc).__name__}: {exc}"
    kinds = (("CompileTimeScopedVmemOom", "VMEM OOM"), ("memory space vmem", "VMEM OOM"),
             ("RESOURCE_EXHAUSTED", "out of memory"),
             ("divisible by 8 and 128", "tiling"), ("UnprovenMemoryAccessAlignment", "alignment"),
             ("Mosaic", "Mosaic"))
    kind = next((k for needle, k in kinds if needle in text), "error")
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), text)
    return f"{kind}: {first[:300]}"
