"""Example synthesis: value ranges in the grammar, entry points, candidates from the code and the
``__main__`` block (the cache and the worker trying the candidates: tests/test_example_candidates.py).

The unit tests read sources with ``ast`` only; every test that could write the cache points
``PALLAS_FIX_CACHE_DIR`` at a temp dir.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

from pallas_fix.core.examples import ArgSpec, ExampleSyntaxError, example_from_json, example_to_json, parse_example
from pallas_fix.verify.examples import synthesised as synth
from pallas_fix.verify.examples.call_facts import ModuleInfo
from pallas_fix.verify.examples.entry_points import entry_points
from pallas_fix.verify.examples.synthesis import code_candidates
from pallas_fix.verify.examples.main_block import main_examples
from pallas_fix.verify.examples.module_constants import module_constants

FIX = Path(__file__).parent / "fixtures" / "synthesis"

_HEADER = """\
import functools
import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
"""


def _line_of(path: Path, text: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if line.startswith(text))


def _tree(body: str) -> ast.Module:
    return ast.parse(_HEADER + textwrap.dedent(body))


def _candidates(body: str) -> list[str]:
    tree = _tree(body)
    module = ModuleInfo(module_constants(tree), {s.name: s for s in tree.body if isinstance(s, ast.FunctionDef)})
    return [c.text for ep in entry_points(tree) for c in code_candidates(ep, module, tree, path="k.py")]


@pytest.fixture(autouse=True)
def _cache_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("PALLAS_FIX_CACHE_DIR", str(tmp_path / "cache"))


# =========================================================================== value ranges


def test_a_value_range_parses_prints_and_travels_to_the_worker():
    ex = parse_example("gather(f32[256, 128], i32[8] in [0, NB), offs=(u8[4] in [1, 3),))", constants={"NB": 8})
    assert ex.args[1] == ArgSpec("i32", (8,), (0, 8))
    assert ex.canonical() == "gather(f32[256, 128], i32[8] in [0, 8), offs=(u8[4] in [1, 3),))"
    assert example_from_json(example_to_json(ex)).canonical() == ex.canonical()
    assert parse_example("f(f32[4] in [-0.5, 2.0))").args[0].value_range == (-0.5, 2.0)


@pytest.mark.parametrize("text, reason", [
    ("f(bool[2] in [0, 1))", "a bool array takes no value range"),
    ("f(i32[2] in [3, 3))", "is empty (the upper bound is excluded)"),
    ("f(u8[2] in [-1, 4))", "does not fit u8"),
    ("f(i8[2] in [0, 200))", "does not fit i8"),
    ("f(i32[2] in [0.5, 4))", "i32 takes integer bounds"),
    ("f(i32[2] in [0, 4])", "expected ')' to close the value range"),
    ("f(i32[2] in 4)", "expected '[' after 'in'"),
])
def test_a_bad_value_range_is_a_syntax_error(text, reason):
    with pytest.raises(ExampleSyntaxError, match=None) as err:
        parse_example(text)
    assert reason in err.value.reason


# =========================================================================== entry points

ENTRIES = """
def _kernel(x_ref, o_ref, *, bm):
    def body(i, c):
        o_ref[pl.ds(i * bm, bm), :] = x_ref[pl.ds(i * bm, bm), :] * 2
        return c
    lax.fori_loop(0, x_ref.shape[0] // bm, body, 0)

def _impl(x, bm):
    return pl.pallas_call(functools.partial(_kernel, bm=bm),
                          out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)

def double_small(x):
    return _impl(x, 16)

@functools.partial(jax.jit, static_argnames=("bm",))
def double(x, bm=64):
    return helper(x, bm)

def helper(x, bm):
    return _impl(x, bm)

def _raw(x):
    return x + 1

double_jitted = jax.jit(_impl, static_argnums=1)

class Ops:
    def double(self, x):
        return _impl(x, 8)
"""


def test_entry_points_are_the_outermost_public_functions_reaching_a_pallas_call():
    eps = entry_points(_tree(ENTRIES))
    # helper is public but reached by double; _impl is reached; _raw makes no pallas_call;
    # the jitted alias is an entry of its own; methods are out of scope
    assert [ep.name for ep in eps] == ["double_small", "double", "double_jitted"]
    statics = {ep.name: ep.static_names for ep in eps}
    assert statics["double"] == {"bm"} and statics["double_jitted"] == {"bm"}


def test_entry_hints_restrict_the_entry_points():
    assert [ep.name for ep in entry_points(_tree(ENTRIES), hints=["helper", "nope"])] == ["helper"]


def test_a_private_function_no_public_one_reaches_is_an_entry():
    body = ENTRIES.replace("def double_small", "def _double_small").replace("def double(", "def _double(")
    body = body.replace("helper", "_helper").replace("double_jitted = jax.jit(_impl, static_argnums=1)", "")
    assert [ep.name for ep in entry_points(_tree(body))] == ["_double_small", "_double"]


# =========================================================================== candidates from the code


def test_block_sizes_from_defaults_and_wrappers_set_divisible_sizes_per_entry():
    found = _candidates(ENTRIES)
    # every dim a multiple of the block size with at least two blocks, 256 at least
    assert found[0] == "double_small(f32[256, 256])"
    assert "double(f32[256, 256])" in found
    assert "double_jitted(f32[256, 256], 256)" not in found  # bm is static and block-like: half the size
    assert "double_jitted(f32[256, 256], 128)" in found


def test_a_large_block_asks_for_a_larger_size():
    found = _candidates("""
        BK = 384
        def kernel(a_ref, o_ref):
            m, k = a_ref.shape
            def body(j, acc):
                return acc + a_ref[:, pl.ds(j * BK, BK)]
            o_ref[...] = lax.fori_loop(0, k // BK, body, jnp.zeros((m, BK), jnp.float32))
        def fold(a):
            return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((a.shape[0], BK), a.dtype))(a)
    """)
    assert found[0] == "fold(f32[768, 768])"


def test_block_spec_and_unpacking_give_ranks():
    found = _candidates("""
        def kernel(x_ref, w_ref, o_ref):
            b, s, d = x_ref.shape
            o_ref[...] = x_ref[...] * w_ref[0, :]
        def attn(x, w):
            return pl.pallas_call(
                kernel, grid=(x.shape[0],),
                in_specs=[pl.BlockSpec((1, x.shape[1], x.shape[2]), lambda i: (i, 0, 0)),
                          pl.BlockSpec((None, None, 8, 128), lambda i: (0, 0, 0, 0))],
                out_specs=pl.BlockSpec((1, x.shape[1], x.shape[2]), lambda i: (i, 0, 0)),
                out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x, w)
    """)
    assert found[0] == "attn(f32[2, 256, 256], f32[2, 2, 256, 256])"


def test_an_index_table_gets_values_inside_what_it_indexes(tmp_path):
    found = [e.text for e in synth.synthesis_candidates((FIX / "code_only_gather.py").read_text(), "g.py")]
    assert found[0] == "gather_blocks(f32[256, 256], i32[8] in [0, 8))"  # 256 rows / 32-row blocks


def test_scalar_prefetch_and_smem_operands_are_integers():
    found = _candidates("""
        BM = 32
        def kernel(flag_ref, scale_ref, x_ref, o_ref):
            o_ref[...] = x_ref[...]
            @pl.when(flag_ref[0] != 0)
            def _():
                o_ref[pl.ds(pl.program_id(0) * BM, BM), :] = x_ref[pl.ds(pl.program_id(0) * BM, BM), :] * 2
        def gated(scales, flag, x):
            spec = pl.BlockSpec(x.shape, lambda g, sc: (0, 0))
            return pl.pallas_call(
                kernel,
                grid_spec=pltpu.PrefetchScalarGridSpec(
                    num_scalar_prefetch=1, grid=(x.shape[0] // BM,),
                    in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM), spec], out_specs=spec),
                out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(scales, flag, x)
    """)
    assert found[0] == "gated(i32[8], i32[8], f32[256, 256])"


def test_an_operand_read_whole_beside_walked_ones_is_a_row_vector_first():
    found = _candidates("""
        def kernel(x_ref, g_ref, o_ref):
            g = g_ref[...]
            def body(i, c):
                o_ref[pl.ds(i * 8, 8), :] = x_ref[pl.ds(i * 8, 8), :] * g
                return c
            lax.fori_loop(0, x_ref.shape[0] // 8, body, 0)
        def scale(x, g):
            return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x, g)
    """)
    assert found[:2] == ["scale(f32[256, 256], f32[1, 256])", "scale(f32[256, 256], f32[256, 256])"]


def test_a_cast_up_to_f32_in_a_bf16_module_asks_for_bf16_first():
    found = _candidates("""
        def kernel(x_ref, o_ref):
            o_ref[...] = (x_ref[...].astype(jnp.float32) * 2).astype(jnp.bfloat16)
        def twice(x):
            return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, jnp.bfloat16))(x)
    """)
    assert found[:2] == ["twice(bf16[256, 256])", "twice(f32[256, 256])"]


def test_annotations_and_required_statics():
    found = _candidates("""
        def kernel(x_ref, o_ref, *, n_valid, bs):
            def body(i, c):
                o_ref[pl.ds(i * bs, bs)] = x_ref[pl.ds(i * bs, bs)]
                return c
            lax.fori_loop(0, pl.cdiv(n_valid, bs), body, 0)
        @functools.partial(jax.jit, static_argnames=("n_valid", "bs"))
        def masked(x: Float16[Array, "n"], n_valid, bs):
            return pl.pallas_call(functools.partial(kernel, n_valid=n_valid, bs=bs),
                                  out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
    """)
    # n_valid counts rows (the size), bs is a block (half of it); the annotation gives rank and dtype
    assert found[0] == "masked(f16[256], 256, 128)"


def test_an_entry_needing_a_value_synthesis_cannot_give_is_skipped():
    assert _candidates("""
        def kernel(x_ref, o_ref):
            o_ref[...] = x_ref[...]
        def copy(x, *, layout):
            return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
    """) == []


# =========================================================================== __main__ calls

MAIN = ENTRIES + """
if __name__ == "__main__":
    k1, k2 = jax.random.split(jax.random.PRNGKey(0))
    x = jax.random.normal(k1, (128, 256), dtype=jnp.float32).astype(jnp.bfloat16)
    ids = jax.random.randint(k2, (16,), 0, 8, jnp.int32)
    y = jnp.arange(512 * 4, dtype=jnp.float32).reshape(-1, 4).T
    a, b = (jax.random.normal(k, (64, 64)) for k in jax.random.split(k1))
    idx = jnp.array([3, 0, 5], jnp.int32)
    assert jnp.allclose(double(x, bm=32), 2 * x)
    print(double_small(y), double(ids), double_small(a), double(idx), double_small(jnp.ones((8, 8))))
    print(double(x), double(unknown_name))
"""


def test_main_block_calls_become_examples_in_order():
    found = main_examples(_tree(MAIN), {"double", "double_small"}, path="k.py")
    assert [e.text for e in found] == [
        "double(bf16[128, 256], bm=32)",
        "double_small(f32[4, 512])",
        "double(i32[16] in [0, 8))",
        "double_small(f32[64, 64])",
        "double(i32[3] in [0, 6))",
        "double_small(f32[8, 8])",
        "double(bf16[128, 256])",
    ]
    lines = (_HEADER + textwrap.dedent(MAIN)).splitlines()
    line = next(n for n, text in enumerate(lines, 1) if "double(x, bm=32)" in text)
    assert found[0].origin == f"synthesised from the __main__ block, k.py:{line}"


def test_main_calls_come_before_code_candidates_and_each_entry_gets_at_most_four():
    found = synth.synthesis_candidates((FIX / "main_block_matmul.py").read_text(), "m.py")
    assert [e.text for e in found] == [
        "matmul(f32[64, 256], f32[256, 128], bk=128)",
        "matmul(f32[256, 256], f32[256, 256])",
        "matmul(f32[512, 512], f32[512, 512])",
    ]
    wrappers = synth.synthesis_candidates((FIX / "two_wrappers_rownorm.py").read_text(), "w.py")
    per_entry = {}
    for e in wrappers:
        per_entry.setdefault(e.entry, []).append(e.text)
    assert list(per_entry) == ["scale_rows_small", "scale_rows_large", "scale_rows_bf16"]
    assert all(len(texts) <= synth.MAX_CANDIDATES for texts in per_entry.values())
    assert per_entry["scale_rows_small"][0] == "scale_rows_small(bf16[256, 256], f32[1, 256])"


def test_a_main_block_draw_scaled_and_shifted_keeps_its_shape():
    # `jax.random.normal(k1, (1024, 512), jnp.float32) * 3 + 1`: arithmetic with scalars keeps the
    # draw's shape and dtype; gamma / beta are 1-D and the wrapper reshapes them (a 2-D guess fails).
    path = FIX / "main_block_layernorm.py"
    found = synth.synthesis_candidates(path.read_text(), "ln.py")
    assert found[0].text == "layernorm(f32[1024, 512], f32[512], f32[512])"
    assert found[0].origin == f"synthesised from the __main__ block, ln.py:{_line_of(path, '    out = layernorm(')}"


ARRAY_EXPRESSIONS = ENTRIES + """
import numpy as np
import random
if __name__ == "__main__":
    k1, k2 = jax.random.split(jax.random.key(0))
    rng = np.random.default_rng(0)
    a = rng.standard_normal((64, 128), dtype=np.float32)
    double(a * 2.0 - 1)                                              # scalars keep the shape
    double((jax.random.normal(k1, (128, 32)) @ jnp.ones((32, 256)))[:, :128].astype(jnp.bfloat16))
    double(jnp.concatenate([a, a * 2], axis=0).T)                    # (128, 128) then transposed
    double(jnp.arange(4 * 8).reshape(4, 8)[None, ..., ::2])          # a new axis, a strided slice
    double(jax.random.randint(k2, (16,), 0, 8) * 2 + 1)              # the range follows: 1..15
    double(jnp.where(a > 0, a, 0.0).sum(axis=-1, keepdims=True))
    double(jnp.ones_like(a, dtype=jnp.bfloat16) + jnp.zeros((1, 128), jnp.float32))  # broadcast, promoted
    double(jnp.stack([a, a], 1), bm=KEY_BM)                          # a module constant
    x = jnp.exp(jax.random.randint(k2, (8,), 0, 4))
    x *= 3
    double(x)
    double(np.random.randint(5, size=8) % 3)
    double(a + jnp.ones((3, 128)))                                   # does not broadcast: no example
    n = random.randint(1, 4)                                         # Python's random draws no array
    double(a, bm=n)
"""


def test_main_block_arrays_follow_ordinary_expressions():
    from pallas_fix.verify.examples.main_block import read_main

    reading = read_main(_tree("KEY_BM = 32\n" + ARRAY_EXPRESSIONS), {"double"}, path="k.py")
    assert [e.text for e in reading.examples] == [
        "double(f32[64, 128])",
        "double(bf16[128, 128])",
        "double(f32[128, 128])",
        "double(i32[1, 4, 4] in [0, 32))",
        "double(i32[16] in [1, 16))",
        "double(f32[64, 1])",
        "double(f32[64, 2, 128], bm=32)",
        "double(f32[8])",
        "double(i32[8] in [0, 3))",
    ]
    assert [(u.argument, u.bound_at is not None) for u in reading.unread] == [("a + jnp.ones((3, 128))", False), ("n", True)]


def test_a_main_function_the_block_calls_is_read_and_is_no_entry():
    # `if __name__ == "__main__": main()`: main() takes nothing (no input to draw, nothing of shapes
    # to say) and would hide the entries it calls; its body is read where the block calls it.
    source = _HEADER + textwrap.dedent(ENTRIES) + textwrap.dedent("""
        def main():
            x = jnp.ones((96, 128), jnp.float32) * 2
            return double(x, bm=32)

        if __name__ == "__main__":
            main()
    """)
    assert "main" not in [ep.name for ep in entry_points(ast.parse(source))]
    found = synth.synthesis_candidates(source, "k.py")
    line = next(n for n, text in enumerate(source.splitlines(), 1) if "return double(x, bm=32)" in text)
    first = next(e for e in found if e.entry == "double")
    assert (first.text, first.origin) == ("double(f32[96, 128], bm=32)", f"synthesised from the __main__ block, k.py:{line}")
    assert "main()" not in [e.text for e in found]
