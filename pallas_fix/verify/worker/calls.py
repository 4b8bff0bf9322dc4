"""An example as a call: seeded random inputs, statics bound, run under one interpreter.

Array arguments (:class:`ArgSpec`) are the dynamic values: filled per seed, traced by jit; every
other argument is static and closed over. Imports jax and numpy lazily.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable, Optional

from pallas_fix.core.examples import ArgSpec, Example, contains_array, map_arrays
from pallas_fix.verify.worker.interpret_mode import forced_interpreter


def _np_dtype(spec: ArgSpec):
    import numpy as np

    if spec.dtype == "bf16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(spec.numpy_dtype)


# Per seed (seed % 3): the float scale and the integer half-width. Seed 0 keeps the classic
# N(0, 1) and [-4, 4]; the others reach the magnitudes a bug may hide behind (|x| > 6, an
# integer past a small table), so one verification run sees several scales.
_FLOAT_SCALES = (1.0, 8.0, None)  # None: heavy-tailed, N(0, 1) x 2 exp(N(0, 1)), clipped to 64
_INT_WIDTHS = (4, 32, 256)


def _random_array(spec: ArgSpec, rng, seed: int = 0, index_bound: Optional[int] = None):
    """Values for one array argument, deterministic per (seed, spec): the spec's value range
    [low, high) when it has one; an index operand (``index_bound``, see
    :mod:`pallas_fix.verify.worker.index_ranges`) in [0, index_bound]; other integers in
    [-w, w] ([0, w] unsigned, clipped to the dtype) with w by seed; bools fair coins; floats
    N(0, 1) scaled by seed."""
    import numpy as np

    dt = _np_dtype(spec)
    shape = tuple(spec.shape)
    if spec.value_range is not None:
        low, high = spec.value_range
        drawn = rng.integers(low, high, size=shape) if dt.kind in "iu" else rng.uniform(low, high, size=shape)
        return drawn.astype(dt)
    if spec.dtype == "bool":
        return rng.random(shape) < 0.5
    if dt.kind in "iu":
        info = np.iinfo(dt)
        if index_bound is not None:
            low, high = 0, min(index_bound, int(info.max))
        else:
            width = _INT_WIDTHS[seed % len(_INT_WIDTHS)]
            low, high = (0 if dt.kind == "u" else max(-width, int(info.min))), min(width, int(info.max))
        return rng.integers(low, high + 1, size=shape).astype(dt)
    values = rng.standard_normal(shape).astype(np.float64)
    scale = _FLOAT_SCALES[seed % len(_FLOAT_SCALES)]
    if scale is None:
        values = np.clip(values * 2.0 * np.exp(rng.standard_normal(shape)), -64.0, 64.0)
    else:
        values = values * scale
    return values.astype(dt)


def _shape_struct(spec: ArgSpec):
    import jax

    return jax.ShapeDtypeStruct(tuple(spec.shape), _np_dtype(spec))


class Call:
    """An example split into dynamic (array) and static arguments, bound to an entry.

    ``reference``: the entry whose use of its integer inputs decides their ranges (the original;
    both sides of a comparison get the same inputs); traced once, on the first ``inputs``."""

    def __init__(self, ex: Example, reference: Optional[Callable] = None):
        self.ex = ex
        self.dyn_pos = [i for i, a in enumerate(ex.args) if contains_array(a)]
        self.dyn_kw = [k for k, v in ex.kwargs.items() if contains_array(v)]
        self.reference = reference
        self._bounds: Optional[list[Optional[int]]] = None

    def dynamic_values(self) -> list:
        return [self.ex.args[i] for i in self.dyn_pos] + [self.ex.kwargs[k] for k in self.dyn_kw]

    def inputs(self, seed: int) -> list:
        import numpy as np

        rng = np.random.default_rng(seed)
        bounds = iter(self.index_bounds())
        return [map_arrays(v, lambda spec: _random_array(spec, rng, seed, next(bounds)))
                for v in self.dynamic_values()]

    def index_bounds(self) -> list[Optional[int]]:
        """Per array argument (in ``map_arrays`` order): the largest valid index value when the
        reference uses it as an index, else None."""
        if self._bounds is None:
            self._bounds = self._traced_bounds()
        return self._bounds

    def _traced_bounds(self) -> list[Optional[int]]:
        import jax

        structs = self.shape_structs()
        leaves = jax.tree_util.tree_leaves(structs)
        positions = [i for i, leaf in enumerate(leaves) if isinstance(leaf, jax.ShapeDtypeStruct)]
        found: dict[int, int] = {}
        if self.reference is not None:
            from pallas_fix.verify.worker.index_ranges import index_bounds
            from pallas_fix.verify.worker.kernel_survey import trace

            try:
                found = index_bounds(trace(self.bind(self.reference), structs))
            except Exception:  # the reference does not trace: it fails on its own, every seed
                found = {}
        return [found.get(p) for p in positions]

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
