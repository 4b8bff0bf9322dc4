"""Forcing every ``pallas_call`` into the interpreter chosen for the current run (worker only).

The worker patches ``pallas_call`` once, before any user module runs, and then traces each run
inside :func:`forced_interpreter`. Imports jax lazily, inside the functions.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any


class _Mode:
    """The interpreter every pallas_call is forced to while a run is traced."""

    value: Any = True


_MODE = _Mode()
_PATCHED = False


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


def reset_interpreters() -> None:
    """Drop the TPU / GPU interpret modes' global state (buffers, race records) between runs."""
    with contextlib.suppress(Exception):
        from jax.experimental.pallas import tpu as pltpu

        pltpu.reset_tpu_interpret_mode_state()
    with contextlib.suppress(Exception):
        from jax._src.pallas.mosaic_gpu.interpret import interpret_pallas_call as gi

        gi.reset_gpu_interpret_mode_state()
