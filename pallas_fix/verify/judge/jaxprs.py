"""Jaxpr duck typing shared by the oracle and the worker's kernel survey.

Works with jax 0.10.x (``ClosedJaxpr`` sub-jaxprs) and 0.12.x (plain ``Jaxpr`` everywhere):
anything with ``.eqns`` or ``.jaxpr.eqns`` is a jaxpr. Imports nothing from jax.
"""

from __future__ import annotations

from typing import Any, Iterator


def as_jaxprs(v: Any) -> Iterator[Any]:
    """Yield the open jaxprs contained in a param value (Jaxpr, ClosedJaxpr,
    or lists/tuples of them).  Callables (thunks) are ignored."""
    if v is None or isinstance(v, (str, bytes, int, float, bool)):
        return
    if hasattr(v, "eqns") and hasattr(v, "invars"):
        yield v
        return
    inner = getattr(v, "jaxpr", None)
    if inner is not None and hasattr(inner, "eqns") and hasattr(inner, "invars"):
        yield inner
        return
    if isinstance(v, (list, tuple)):
        for x in v:
            yield from as_jaxprs(x)


def sub_jaxprs(eqn) -> Iterator[Any]:
    """The jaxprs among an equation's params (loop bodies, cond branches, kernel bodies...)."""
    for v in eqn.params.values():
        yield from as_jaxprs(v)


def open_jaxpr(jaxpr: Any) -> Any:
    if hasattr(jaxpr, "eqns"):
        return jaxpr
    inner = getattr(jaxpr, "jaxpr", None)
    if inner is not None and hasattr(inner, "eqns"):
        return inner
    raise TypeError(f"not a jaxpr: {type(jaxpr).__name__}")
