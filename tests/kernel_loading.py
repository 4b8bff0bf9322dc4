"""Load fixture kernels as modules and build example arguments, for tests that trace or run them."""

from __future__ import annotations

import importlib.util
import itertools
import re
import sys
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures"
_counter = itertools.count()
EXPECT = re.compile(r"#\s*expect:\s*((?:PF\d{3}\s*)+)")


def load_module(path: Path, source: str | None = None):
    """Import `path` (or `source` under that file name) as a fresh, uniquely named module."""
    name = f"_pf_fixture_{path.stem}_{next(_counter)}"
    if source is None:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module
    module = type(sys)(name)
    module.__file__ = str(path)
    sys.modules[name] = module
    exec(compile(source, str(path), "exec"), module.__dict__)
    return module


def abstract_args(example):
    """ShapeDtypeStructs for array arguments; Python literals as written."""
    import jax
    import jax.numpy as jnp
    from pallas_fix.core.examples import ArgSpec

    def conv(v):
        if isinstance(v, ArgSpec):
            return jax.ShapeDtypeStruct(v.shape, jnp.dtype(v.numpy_dtype))
        if isinstance(v, (list, tuple)):
            return type(v)(conv(x) for x in v)
        return v

    return [conv(a) for a in example.args], {k: conv(v) for k, v in example.kwargs.items()}


def expected_markers(source: str) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for n, line in enumerate(source.splitlines(), 1):
        m = EXPECT.search(line)
        if m:
            out[n] = sorted(m.group(1).split())
    return out


def file_flags(source: str, flag: str) -> str | None:
    m = re.search(rf"#\s*pallas-fix-test:\s*{flag}\b(.*)", source)
    return m.group(1).strip() if m else None
