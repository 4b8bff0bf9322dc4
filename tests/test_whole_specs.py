"""The whole-array specs one rewrite adds are spelled one way: with the operand's shape when
every such operand's shape and rank can be written at the call site, `pl.BlockSpec()` for all
of them otherwise (here nothing tells the rank of `t`, so `b` is written the same way)."""

from pathlib import Path

import numpy as np
import pytest

from kernel_loading import load_module
from pallas_fix.core.config import Config
from pallas_fix.engine import fix_source

SOURCE = '''import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def kernel(t_ref, x_ref, b_ref, o_ref):
    i = pl.program_id(0)
    o_ref[pl.ds(i, 1), :] = x_ref[pl.ds(i, 1), :] * t_ref[pl.ds(i, 1)][:, None] + b_ref[...]


def run(t, x, b):
    return pl.pallas_call(
        kernel,
        grid=(x.shape[0],),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        interpret=True,
    )(t, x, b)
'''

def _whole_specs(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if "lambda i: (0" in line or "BlockSpec()" in line]


def test_an_operand_of_unknown_rank_makes_every_whole_spec_plain():
    fixed = fix_source(SOURCE, "k.py", Config())
    assert fixed.source != SOURCE
    assert _whole_specs(fixed.source) == ["pl.BlockSpec(),", "pl.BlockSpec(),"]


@pytest.mark.interp
def test_the_plain_spelling_computes_what_the_original_does(tmp_path: Path):
    fixed = fix_source(SOURCE, "k.py", Config()).source
    t = np.arange(8, dtype=np.float32)
    x = np.random.default_rng(0).standard_normal((8, 128)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal((1, 128)).astype(np.float32)
    outs = []
    for name, text in (("before", SOURCE), ("after", fixed)):
        path = tmp_path / f"{name}.py"
        path.write_text(text)
        outs.append(np.asarray(load_module(path).run(t, x, b)))
    np.testing.assert_array_equal(outs[0], outs[1])
