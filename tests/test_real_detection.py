"""Static detection agrees with the jaxpr oracle on every kernel of the real corpus
(tests/fixtures/real/, held-out files included; issue 28): a kernel whose traced jaxpr has a
dynamic window gets findings on the lines of those windows, and every traced scalar index the
oracle sees is one the detector lists. Non-array example values stay static, as in
benchmarks/bench_coverage.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernel_loading import FIXTURES, load_module
from test_detection_oracle import _static_scalar_lines, _static_window_lines
from pallas_fix.verify.examples.sources import collect_examples

REAL = sorted((FIXTURES / "real").glob("*.py"))


def _abstract(value):
    import jax
    import jax.numpy as jnp
    from pallas_fix.core.examples import ArgSpec

    if isinstance(value, ArgSpec):
        return jax.ShapeDtypeStruct(value.shape, jnp.dtype(value.numpy_dtype))
    if isinstance(value, (list, tuple)):
        return type(value)(_abstract(v) for v in value)
    return value


def _is_array(value) -> bool:
    import jax

    if isinstance(value, (list, tuple)):
        return any(_is_array(v) for v in value)
    return isinstance(value, jax.ShapeDtypeStruct)


def oracle_lines(path: Path, source: str) -> tuple[set[int], set[int]]:
    """(window lines, scalar lines) of the dynamic ref accesses the jaxpr oracle finds in the
    kernels `path`'s examples trace to, at `path`'s own lines."""
    from pallas_fix.verify.judge.oracle import trace_report

    examples = collect_examples(path, source, pyproject=False, recorded=False)
    assert examples, f"{path.name} has no example directive"
    module = load_module(path)
    windows: set[int] = set()
    scalars: set[int] = set()
    for ex in examples:
        args = [_abstract(a) for a in ex.args]
        kwargs = {k: _abstract(v) for k, v in ex.kwargs.items()}
        entry = getattr(module, ex.entry)

        def call(*arrays, args=args, kwargs=kwargs, entry=entry):
            it = iter(arrays)
            pos = [next(it) if _is_array(a) else a for a in args]
            return entry(*pos, **{k: (next(it) if _is_array(v) else v) for k, v in kwargs.items()})

        dynamic = [a for a in args if _is_array(a)] + [v for v in kwargs.values() if _is_array(v)]
        report = trace_report(call, *dynamic)
        for a in report.accesses:
            if a.line is None or not a.file or Path(a.file).name != path.name:
                continue
            (scalars if a.kind == "scalar" else windows).add(a.line)
    return windows, scalars


@pytest.fixture(scope="module")
def lines():
    cache: dict[Path, tuple] = {}

    def get(path: Path):
        if path not in cache:
            source = path.read_text(encoding="utf-8")
            cache[path] = (oracle_lines(path, source), _static_window_lines(path, source),
                           _static_scalar_lines(path, source))
        return cache[path]

    return get


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.stem)
def test_every_dynamic_window_in_the_jaxpr_has_a_finding(path: Path, lines) -> None:
    (windows, _), static_windows, _ = lines(path)
    missing = sorted(windows - static_windows)
    assert not missing, f"{path.name}: dynamic windows in the jaxpr at lines {missing} have no finding"


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.stem)
def test_every_scalar_index_in_the_jaxpr_is_listed(path: Path, lines) -> None:
    (_, scalars), _, static_scalars = lines(path)
    missing = sorted(scalars - static_scalars)
    assert not missing, f"{path.name}: traced scalar indices in the jaxpr at lines {missing} are not listed"
