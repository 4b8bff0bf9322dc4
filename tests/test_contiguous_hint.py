"""PF108's reason names the `pl.ds` window of an integer array spelled `start + jnp.arange(size)`
(the Triton idiom for a ragged block, as in JAX's gpu/rms_norm.py), and only of such arrays."""

from __future__ import annotations

from pallas_fix.engine import analyze_source

_KERNEL = '''import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pltriton


def kernel(x_ref, idx_ref, o_ref, *, bs):
    n = x_ref.shape[0]

    def body(i, acc):
        cols = {cols}
        return acc + pltriton.load(x_ref.at[cols], mask=cols < n, other=0.0)

    o_ref[...] = lax.fori_loop(0, pl.cdiv(n, bs), body, jnp.zeros(bs))


def total(x, idx):
    return pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct((16,), x.dtype),
        compiler_params=pltriton.CompilerParams(),
    )(x, idx)
'''


def _pf108(cols: str) -> list:
    result = analyze_source(_KERNEL.replace("{cols}", cols), "k.py")
    return [f for f in result.findings if f.code == "PF108"]


def test_an_arange_window_is_named_with_what_to_write() -> None:
    for cols in ("i * bs + jnp.arange(bs)", "jnp.arange(bs) + i * bs", "i * bs + lax.iota(jnp.int32, bs)"):
        (finding,) = _pf108(cols)
        assert "the contiguous window `pl.ds(i * bs, bs)`" in finding.refusal, (cols, finding.refusal)
        assert "`x_ref.at[pl.ds(i * bs, bs)]`" in finding.refusal


def test_other_integer_arrays_get_no_window() -> None:
    for cols in ("idx_ref[...] + i", "i * bs + jnp.arange(0, 2 * bs, 2)", "i * bs * jnp.arange(bs)"):
        findings = _pf108(cols)
        assert findings and all("contiguous window" not in f.refusal for f in findings), (cols, findings)
