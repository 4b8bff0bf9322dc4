"""What a call to a named library function does to the refs it is given: the table behind the
effects model (analysis.effects.model).

Names are the dotted names of jax 0.12 (`jax/experimental/pallas/{__init__,tpu,mosaic_gpu,
triton}.py` and the `jax._src.pallas` modules they re-export), plus the spellings older jax
versions had under `pl.` (`pl.store`, `pl.atomic_add`, ...). A call either
- writes some of its arguments (`Writer`: which positions or keywords, and how),
- builds a DMA descriptor whose `.start()` / `.wait()` writes its destination and semaphores,
- runs its function arguments as written (`pl.when(c)` and `pl.loop(...)` as decorators),
- returns its function argument (`jax.jit(f)`, `jax.named_call(f)`) or binds it (`functools.partial`),
- is pure: it reads the refs it is given (jnp, lax, the index helpers), or
- is unknown: a name the table does not list, which may write anything it is given.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from typing import Optional

from pallas_fix.core import names as N

_PL, _TPU, _GPU, _TRITON = N.PALLAS, N.TPU, N.MOSAIC_GPU, N.TRITON
_SRC = "jax._src.pallas"


@dataclass(frozen=True)
class Writer:
    """A library call that writes the refs passed at `positions` (or by these keywords)."""

    how: str  # "store" | "copy" | "atomic" | "semaphore"
    positions: tuple[tuple[int, str], ...]  # (position, keyword) of each written argument


def _writers(how: str, names: list[str], *positions: tuple[int, str]) -> dict[str, Writer]:
    return {name: Writer(how, positions) for name in names}


_ATOMICS = ["atomic_add", "atomic_and", "atomic_cas", "atomic_max", "atomic_min", "atomic_or", "atomic_xchg", "atomic_xor"]

WRITERS: dict[str, Writer] = {
    **_writers("store", [f"{_TPU}.store", f"{_PL}.store", f"{_PL}.swap", f"{_SRC}.primitives.store", f"{_SRC}.primitives.swap"], (0, "ref")),
    **_writers("store", [f"{_TRITON}.store", f"{_TRITON}.swap"], (0, "x_ref_or_view")),
    **_writers("store", [f"{_GPU}.store"], (0, "dst")),
    **_writers("store", [f"{_GPU}.async_store_tmem"], (0, "ref")),
    **_writers("store", [f"{_GPU}.async_store_smem", f"{_GPU}.multimem_store"], (1, "ref")),
    **_writers("atomic", [f"{p}.{a}" for p in (_PL, _TRITON, _GPU, f"{_SRC}.primitives") for a in _ATOMICS], (0, "ref")),
    **_writers("copy", [f"{_TPU}.sync_copy"], (1, "dst_ref")),
    **_writers("copy", [f"{_TPU}.async_copy"], (1, "dst_ref"), (2, "sem")),
    **_writers("copy", [f"{_TPU}.async_remote_copy"], (1, "dst_ref"), (2, "send_sem"), (3, "recv_sem")),
    **_writers("copy", [f"{_GPU}.copy_gmem_to_smem"], (1, "dst"), (2, "barrier")),
    **_writers("copy", [f"{_GPU}.copy_smem_to_gmem"], (1, "dst")),
    **_writers(
        "copy",
        [f"{_GPU}.async_copy_smem_to_tmem", f"{_GPU}.async_copy_scales_to_tmem", f"{_GPU}.async_copy_sparse_metadata_to_tmem"],
        (1, "tmem_ref"),
    ),
    **_writers(
        "semaphore",
        [f"{p}.{s}" for p in (_PL, _TPU, _GPU) for s in ("semaphore_signal", "semaphore_wait")]
        + [f"{_GPU}.{b}" for b in ("barrier_arrive", "barrier_wait", "barrier_arrive_and_wait")],
        (0, "sem_or_view"),
    ),
}

# Descriptors: `pltpu.make_async_copy(src, dst, sem)` moves nothing until `.start()`; then (and on
# `.wait()`) it writes these arguments.
DESCRIPTORS: dict[str, tuple[tuple[int, str], ...]] = {
    f"{_TPU}.make_async_copy": ((1, "dst_ref"), (2, "sem")),
    f"{_TPU}.make_async_remote_copy": ((1, "dst_ref"), (2, "send_sem"), (3, "recv_sem")),
}
DESCRIPTOR_METHODS = frozenset({"start", "wait", "wait_recv", "wait_send"})

# Used as decorators (`@pl.when(c)`, `@pl.loop(0, n)`) or called on a function, these run it.
RUNS_DECORATED = frozenset({*N.PL_WHEN, *N.PL_LOOP})
# `f(fun, ...)` returns `fun` itself, or a function that runs it on the same arguments.
PASSTHROUGH = frozenset(
    {"jax.jit", "jax.named_call", "jax.checkpoint", "jax.remat", "jax.vmap", "jax.custom_jvp", "jax.custom_vjp"}
)
# Decorators that change nothing the kernel does: the decorated body is the whole story.
PURE_DECORATORS = frozenset({"functools.wraps", "jax.named_scope", "jax.named_call", "typing.no_type_check",
                             "typing.override"})

# Pure namespaces: functions that read the refs they are handed (`jnp.zeros_like(o_ref)`) but
# never write them.
_PURE_PREFIXES = ("jax.numpy.", "jax.lax.", "jax.nn.", "jax.random.", "jax.scipy.", "jax.debug.", "math.", "numpy.")
_PURE_PALLAS = frozenset(
    {
        *(f"{_PL}.{n}" for n in ("ds", "dslice", "Slice", "program_id", "num_programs", "multiple_of", "cdiv",
                                  "debug_print", "run_scoped", "semaphore_read", "load", "BlockSpec")),
        *(f"{_TPU}.{n}" for n in ("load", "repeat", "roll", "bitcast", "prng_seed", "prng_random_bits",
                                   "get_barrier_semaphore", "delay", "trace", "VMEM", "SMEM", "SemaphoreType")),
        *(f"{_GPU}.{n}" for n in ("load", "SMEM", "GMEM")),
        f"{_TRITON}.load",
        "jax.ShapeDtypeStruct",
        "jax.named_scope",
        "functools.reduce",
    }
)
# Builtins that return (parts of) what they are given: a tuple of refs stays a tuple of refs.
CONTAINER_BUILTINS = frozenset(
    {"list", "tuple", "zip", "reversed", "iter", "next", "enumerate", "sorted", "dict", "set", "map", "filter", "getattr"}
)
BUILTINS = frozenset(dir(builtins))

# Methods of a ref (jax._src.state.types.TransformedRef) and what they do.
REF_VIEW_METHODS = frozenset({"bitcast", "reshape", "transpose", "memory_space_cast"})
REF_READ_METHODS = frozenset({"get"})
REF_WRITE_METHODS = frozenset({"set", "swap"})


def writer(qualified: str) -> Optional[Writer]:
    return WRITERS.get(qualified)


def is_pure(qualified: str) -> bool:
    """A library function that never writes a ref it is given (it may still call functions it
    is given: those are the caller's business)."""
    if qualified in WRITERS or qualified in DESCRIPTORS:
        return False
    return qualified in _PURE_PALLAS or qualified in N.FORI_LOOP or qualified.startswith(_PURE_PREFIXES)
