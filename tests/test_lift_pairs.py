"""R1 (lift-loop, PF101) and R3 (program-id-blocks, PF103): what their fixture sets must cover.

Fixtures: tests/fixtures/codemods/lift_loop/ and tests/fixtures/codemods/program_id_blocks/
(conventions in tests/pair_harness.py). Every pair and refusal there is checked by
tests/test_codemod_pairs.py: it exercises its codemod (PF101 / PF103); the rewrite is the golden
text; both kernels agree in the interpreters; the jaxpr oracle finds no dynamic slice left in the
after-file (or the declared number); a second run changes nothing; refusals come out unchanged
and are real kernels; LibCST's runner gives the golden text (pl_loop_decorator, pid_rows_2d).

BLOCKED pairs live in pair_harness.BLOCKED (keys `lift_loop/<name>`,
`program_id_blocks/<name>`).
"""

from __future__ import annotations

import pair_harness as H

FAMILIES = [H.FAMILIES["lift_loop"], H.FAMILIES["program_id_blocks"]]
PAIRS = [p for f in FAMILIES for p in f.pairs()]
REFUSALS = [r for f in FAMILIES for r in f.refusals()]
BLOCKED = {k for k in H.BLOCKED if k.split("/", 1)[0] in {f.folder for f in FAMILIES}}

# The forms the R1/R3 fixture set must cover.
REQUIRED = {
    "partial_block_fori", "jax_lax_multiple_of", "loop_from_one", "header_offset", "pl_loop_decorator",
    "pl_loop_step_chunk", "batch_grid_seq_loop", "larger_blockspec", "two_dims_transpose", "grid_spec",
    "nested_loops", "lambda_helper", "tpu_parallel", "tpu_arbitrary", "named_slices_comments",
    "bf16_kernel", "pid_rows_1d", "pid_rows_2d", "pid_two_axes", "pid_flattened_grid",
    "pid_decorator_partial", "pid_triton_load",
}


def test_fixture_set_is_complete():
    for fam in FAMILIES:
        H.check_fixture_set(fam.path, min_pairs=fam.min_pairs, min_refusals=fam.min_refusals,
                            blocked=[k.split("/", 1)[1] for k in BLOCKED if k.startswith(fam.folder + "/")])
    assert len(PAIRS) >= 16, f"{len(PAIRS)} R1/R3 pairs, want at least 16"
    assert len(REFUSALS) >= 10, f"{len(REFUSALS)} R1/R3 refusal fixtures, want at least 10"
    names = {p.name for p in PAIRS}
    assert len(names) == len(PAIRS), "a pair name is used in both folders"
    assert REQUIRED <= names, sorted(REQUIRED - names)
    assert set(H.BLOCKED_REFUSALS) <= {f"{r.parent.name}/{r.stem}" for r in H.codemod_refusals()}
    assert len(PAIRS) - len(BLOCKED) >= 16, "fewer than 16 pairs the tool rewrites exactly"
    # R3's pairs are the pid_* ones, R1's the rest.
    assert all(p.name.startswith("pid_") == (p.family == "program_id_blocks") for p in PAIRS)


def test_a_comment_above_the_removed_loop_is_kept_and_named_in_the_summary():
    from pallas_fix.core.config import Config
    from pallas_fix.engine import fix_source

    source = '''import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl

BM = 16


def kernel(x_ref, o_ref):
    def body(i, carry):
        rows = pl.ds(i * BM, BM)
        o_ref[rows, :] = jnp.tanh(x_ref[rows, :])
        return carry

    # walk the row blocks
    lax.fori_loop(0, x_ref.shape[0] // BM, body, None)


def f(x):
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
'''
    fixed = fix_source(source, "k.py", Config())
    assert "    # walk the row blocks\n    o_ref[...] = jnp.tanh(x_ref[...])" in fixed.source
    assert fixed.applied and fixed.applied[0].endswith("check it still holds: `# walk the row blocks`")
