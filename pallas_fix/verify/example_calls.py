"""An example as a call: seeded random inputs, statics bound, run under one interpreter.

Array arguments (:class:`ArgSpec`) are the dynamic values: filled per seed, traced by jit; every
other argument is static and closed over. Imports jax and numpy lazily.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable

from pallas_fix.core.examples import ArgSpec, Example, contains_array, map_arrays
from pallas_fix.verify.interpret_mode import forced_interpreter


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


def _shape_struct(spec: ArgSpec):
    import jax

    return jax.ShapeDtypeStruct(tuple(spec.shape), _np_dtype(spec))


class Call:
    """An example split into dynamic (array) and static arguments, bound to an entry."""

    def __init__(self, ex: Example):
        self.ex = ex
        self.dyn_pos = [i for i, a in enumerate(ex.args) if contains_array(a)]
        self.dyn_kw = [k for k, v in ex.kwargs.items() if contains_array(v)]

    def dynamic_values(self) -> list:
        return [self.ex.args[i] for i in self.dyn_pos] + [self.ex.kwargs[k] for k in self.dyn_kw]

    def inputs(self, seed: int) -> list:
        import numpy as np

        rng = np.random.default_rng(seed)
        return [map_arrays(v, lambda spec: _random_array(spec, rng)) for v in self.dynamic_values()]

    def shape_structs(self) -> list:
        return [map_arrays(v, _shape_struct) for v in self.dynamic_values()]

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


def output_leaves(out: Any) -> list[tuple[str, Any]]:
    """(path, numpy array) for every leaf of an entry's output pytree."""
    import jax
    import numpy as np

    flat, _ = jax.tree_util.tree_flatten_with_path(out)
    return [(jax.tree_util.keystr(p), np.asarray(jax.device_get(v))) for p, v in flat]
