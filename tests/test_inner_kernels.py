"""Two-level (strip-mined) kernels read through their inner structure (issue 28): a loop walking
sub-tiles of the block a BlockSpec already moves along the grid is refused as the deliberate
strip-mine it is, before any limit of the lift's reading (where the loop body is defined), and
only when the code shows the walk covers that block and the grid moves it."""

from __future__ import annotations

from pathlib import Path

from pallas_fix.core.config import Config
from pallas_fix.engine import analyze_source

FIXTURES = Path(__file__).parent / "fixtures" / "codemods" / "lift_reduction"
WHEN_BODY = FIXTURES / "refuse_two_level_when_body.py"
STRIP = "a deliberate strip-mine"


def _refusals(src: str, config: Config | None = None) -> list[str]:
    findings = analyze_source(src, "k.py", config).findings
    assert findings and all(not f.fixable for f in findings)
    return [f.refusal or "" for f in findings]


def test_loop_in_a_when_body_over_a_moved_block_is_a_strip_mine():
    refusals = _refusals(WHEN_BODY.read_text(encoding="utf-8"))
    assert all(STRIP in r for r in refusals), refusals
    # The message names the ref, the window, the block and the index the grid moves it by.
    assert "`k_ref` in `BK` sub-tiles" in refusals[0]
    assert "(`BK_MAJOR` at block `nxt`)" in refusals[0]


def test_lift_for_memory_leaves_the_screen_to_the_lift():
    refusals = _refusals(WHEN_BODY.read_text(encoding="utf-8"), Config(lift_for_memory=True))
    assert not any(STRIP in r for r in refusals), refusals


def test_a_block_the_grid_does_not_move_is_no_strip_mine():
    src = WHEN_BODY.read_text(encoding="utf-8").replace("        return (nxt, 0)", "        return (0, 0)")
    assert not any(STRIP in r for r in _refusals(src))


def test_a_loop_over_part_of_the_block_is_no_strip_mine():
    # The loop walks half the block: its windows are not the block's sub-tiles end to end.
    src = WHEN_BODY.read_text(encoding="utf-8").replace("bk_major // BK, body", "bk_major // BK // 2, body")
    assert not any(STRIP in r for r in _refusals(src))


def test_an_extent_bound_twice_is_not_read():
    src = WHEN_BODY.read_text(encoding="utf-8").replace(
        "    kv = pl.program_id(1)\n", "    kv = pl.program_id(1)\n    if skip:\n        bk_major = 64\n")
    assert not any(STRIP in r for r in _refusals(src))


# -- refs forwarded through `*args` into the body a kernel runs ---------------------------------------
FORWARDED = Path(__file__).parent / "fixtures" / "codemods" / "lift_loop" / "refuse_two_level_forwarded.py"
ARGS_INDEX = FIXTURES / "refuse_two_level_args_index.py"


def test_forwarded_refs_are_named_as_the_variant_names_them():
    src = FORWARDED.read_text(encoding="utf-8")
    findings = analyze_source(src, "k.py").findings
    assert {f.span.line for f in findings} == {n for n, line in enumerate(src.splitlines(), 1)
                                               if "pl.ds(start, bk)" in line}
    # The starred batch index counts one dim: the window is on dim 1 of the (B, rows, D) block.
    assert all(STRIP in f.refusal and "along dim 1 (`block_k_major` at block `j`)" in f.refusal for f in findings)


def test_forwarded_refs_under_lift_for_memory_keep_the_dispatch_refusal():
    refusals = _refusals(FORWARDED.read_text(encoding="utf-8"), Config(lift_for_memory=True))
    assert all("a name bound to one of `_one_tile`, `_sub_tiles`" in r for r in refusals), refusals


def test_variants_naming_a_forwarded_ref_differently_are_not_read():
    src = FORWARDED.read_text(encoding="utf-8").replace(
        "def _one_tile(idx, q_ref, k_ref, o_ref, *, bk, kv_len):\n    o_ref[idx] = jnp.dot(q_ref[idx], k_ref[idx].T)",
        "def _one_tile(idx, q_ref, kk_ref, o_ref, *, bk, kv_len):\n    o_ref[idx] = jnp.dot(q_ref[idx], kk_ref[idx].T)")
    assert "kk_ref" in src
    refusals = _refusals(src)
    assert not any(STRIP in r for r in refusals) and all("a name bound to one of" in r for r in refusals)


def test_a_starred_index_not_a_literal_at_its_call_is_not_counted():
    src = FORWARDED.read_text(encoding="utf-8").replace(
        "        body((b,), q_ref, *args, **kwargs)", "        idx = (b,)\n        body(idx, q_ref, *args, **kwargs)")
    assert "idx = (b,)" in src
    assert not any(STRIP in r for r in _refusals(src))


def test_args_index_shape_and_forwarding_are_read():
    refusals = _refusals(ARGS_INDEX.read_text(encoding="utf-8"))
    # The index_map returns lax.cond(..., here, clamped): both local defs move dim 1.
    assert refusals and all(STRIP in r and "(`BKM` at block `j`)" in r for r in refusals), refusals


def test_forwarding_kernel_is_not_rewritten():
    refusals = _refusals(ARGS_INDEX.read_text(encoding="utf-8"), Config(lift_for_memory=True))
    assert all("kernel forwards `*args` into `_attend_one` (line 23), whose parameters name the refs" in r
               for r in refusals), refusals


def test_an_index_map_cond_with_a_zero_branch_is_no_strip_mine():
    src = ARGS_INDEX.read_text(encoding="utf-8").replace("return (0, jnp.minimum(j, i), 0)", "return (0, 0, 0)")
    assert not any(STRIP in r for r in _refusals(src))


def test_a_size_read_by_index_blocks_a_rewrite():
    src = (
        "import jax\nfrom jax.experimental import pallas as pl\n\n\n"
        "def kernel(*refs):\n"
        "    n = refs[0].shape[0]\n"
        "    x_ref, o_ref = refs\n"
        "    i = pl.program_id(0)\n"
        "    o_ref[pl.ds(i * 8, 8), :] = x_ref[pl.ds(i * 8, 8), :] * n\n\n\n"
        "def run(x):\n"
        "    return pl.pallas_call(kernel, grid=(x.shape[0] // 8,), out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)\n"
    )
    refusals = _refusals(src)
    assert all("`n = refs[0].shape[0]` reads the size of `refs[0]` (line 6), a ref the kernel does not name" in r
               for r in refusals), refusals


def test_a_ref_named_by_a_local_helper_parameter_is_not_read_by_name():
    # `_tile(k_ref, i)` could be given any ref: its parameter's name says nothing about the operand.
    src = WHEN_BODY.read_text(encoding="utf-8").replace(
        "    def body(i, _):\n        k = k_ref[pl.ds(i * BK, BK), :]\n",
        "    def _tile(k_ref, i):\n        return k_ref[pl.ds(i * BK, BK), :]\n\n"
        "    def body(i, _):\n        k = _tile(k_ref, i)\n")
    assert "_tile(k_ref, i)" in src
    assert not any(STRIP in r for r in _refusals(src))
