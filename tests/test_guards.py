"""Guarded lifts (rewrite.guards.shape_guards): a bounds proof that needs a shape fact the code leaves
unsaid writes it into the wrapper as a check, and the traps such a check must not fall into.

The golden pairs are in tests/fixtures/codemods/*/ (`*_guarded_*`, run by test_codemod_pairs.py);
here: where a check goes, in which style, what the fix says, and the cases where no check may be
written (an example it breaks, a name rebound between the check and the call, a jit argument that
is traced, a kernel two pallas_calls share, a recorded example the check rejects).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pallas_fix.core.model import FixSafety
from pallas_fix.engine import analyze_source, fix_source

_KERNEL = '''
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

{example}

def add_kernel(x_ref, residual_ref, o_ref, residual_out_ref, *, rows):
    i = pl.program_id(0)
    window = pl.ds(i * rows, rows)
    h = x_ref[window, :] + residual_ref[window, :]
    residual_out_ref[window, :] = h
    o_ref[window, :] = h * 2.0

'''

_WRAPPER = '''
def fused_add(x, residual, rows=16):
{pre}    return pl.pallas_call(
        functools.partial(add_kernel, rows=rows),
        grid=(x.shape[0] // rows,),
        out_shape=(
            jax.ShapeDtypeStruct(x.shape, x.dtype),
            jax.ShapeDtypeStruct(residual.shape, residual.dtype),
        ),
    )(x, residual)
'''

_EXAMPLE = "# pallas-fix: example fused_add(f32[64, 128], f32[64, 128])"


def _source(example: str = _EXAMPLE, pre: str = "", wrapper: str = _WRAPPER) -> str:
    return _KERNEL.format(example=example) + wrapper.format(pre=pre)


def _guarded_plans(source: str) -> list:
    return [p for p in analyze_source(source, "k.py").plans if p.guards]


_BOUND = "residual.shape[0] < (x.shape[0] // rows) * rows"


def _check_and_next(source: str, condition: str) -> tuple[str, str]:
    """(the message the check `if <condition>: raise ValueError(...)` raises, the source of the
    statement right after it), however the line width laid the check out."""
    import ast

    wanted = ast.unparse(ast.parse(condition, mode="eval").body)  # the same spelling ast.unparse gives the check
    for node in ast.walk(ast.parse(source)):
        body = getattr(node, "body", None)
        if not isinstance(body, list):
            continue
        for n, stmt in enumerate(body):
            if isinstance(stmt, ast.If) and ast.unparse(stmt.test) == wanted:
                (raised,) = stmt.body
                assert isinstance(raised, ast.Raise) and ast.unparse(raised.exc.func) == "ValueError", ast.unparse(stmt)
                message = ast.unparse(raised.exc.args[0])  # a string or an f-string, as written
                return message, ast.unparse(body[n + 1]) if n + 1 < len(body) else ""
    raise AssertionError(f"no check `if {condition}:` in\n{source}")


def test_the_missing_bound_is_written_before_the_call_in_the_wrappers_names():
    fixed = fix_source(_source(), "k.py", unsafe=True)
    assert fixed.error is None, fixed.error
    message, after = _check_and_next(fixed.source, _BOUND)
    assert "must be at least" in message
    assert after.startswith("return pl.pallas_call(")
    assert "64" not in message and "residual.shape[0]" in message  # the wrapper's names, never the example's numbers
    assert "pl.ds" not in fixed.source


def test_a_guarded_fix_is_unsafe_and_says_which_check_it_adds_and_why():
    plans = _guarded_plans(_source())
    assert [p.guards for p in plans] == [(_BOUND,)]
    plan = plans[0]
    assert plan.safety is FixSafety.UNSAFE
    assert f"adds `if {_BOUND}: raise ValueError(...)`" in plan.description
    assert "the original's last write to `residual_out_ref` runs past the end" in plan.description
    # Without unsafe fixes the guarded lift is offered, not written.
    plain = fix_source(_source(), "k.py")
    assert "raise ValueError" not in plain.source and "residual_out_ref[window, :]" in plain.source


def test_a_wrapper_that_states_its_checks_with_assert_gets_an_assert():
    pre = "    assert x.ndim == 2\n"
    fixed = fix_source(_source(pre=pre), "k.py", unsafe=True)
    assert "    assert residual.shape[0] >= (x.shape[0] // rows) * rows, f\"residual.shape[0] (" in fixed.source
    assert "raise ValueError" not in fixed.source


def test_no_check_that_an_example_of_the_file_breaks():
    example = "# pallas-fix: example fused_add(f32[64, 128], f32[48, 128])"
    source = _source(example=example)
    assert not _guarded_plans(source)
    fixed = fix_source(source, "k.py", unsafe=True)
    assert "raise ValueError" not in fixed.source
    reasons = [f.refusal for f in analyze_source(source, "k.py").findings if f.refusal]
    assert any("`residual.shape[0] >= (x.shape[0] // rows) * rows` is 48 >= 64 in the example" in r for r in reasons), reasons


def test_no_check_stronger_than_the_bound_a_longer_input_the_original_handles_passes():
    """`residual.shape[0] == x.shape[0]` proves the blocks inside too, but rejects a longer
    `residual`, whose first rows the original reads and writes correctly; nor `nb % 2 == 0` for a
    loop over every other block, where an odd count still fits (rewrite.proofs.necessity)."""
    guards = [g for p in _guarded_plans(_source()) for g in p.guards]
    assert guards and not any("!=" in g for g in guards)
    stepped = '''
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def even_kernel(x_ref, o_ref):
    nb = x_ref.shape[0] // 32

    @pl.loop(0, nb, step=2)
    def _(r):
        rows = pl.ds(r * 32, 32)
        o_ref[rows, :] = jnp.tanh(x_ref[rows, :])


def tanh_even_blocks(x):
    return pl.pallas_call(even_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), input_output_aliases={0: 0})(x)
'''
    assert not _guarded_plans(stepped)
    assert fix_source(stepped, "k.py", unsafe=True).source == stepped


def test_no_check_on_a_name_rebound_between_the_call_and_the_statement_that_runs_it():
    wrapper = '''
def fused_add(x, residual, rows=16):
    call = pl.pallas_call(
        functools.partial(add_kernel, rows=rows),
        grid=(x.shape[0] // rows,),
        out_shape=(
            jax.ShapeDtypeStruct(x.shape, x.dtype),
            jax.ShapeDtypeStruct(residual.shape, residual.dtype),
        ),
    )
    residual = residual * 2.0
    return call(x, residual)
'''
    source = _source(wrapper=wrapper)
    assert not _guarded_plans(source)
    assert "raise ValueError" not in fix_source(source, "k.py", unsafe=True).source


def test_no_check_on_a_jit_argument_that_is_traced():
    source = '''
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

# pallas-fix: example attend(f32[128, 64], f32[256, 64], 256, block_k=64)


def attend_kernel(q_ref, k_ref, o_ref, *, block_k, skv):
    q = q_ref[...]

    def body(j, acc):
        k = k_ref[pl.ds(j * block_k, block_k), :]
        return acc + jnp.dot(q, k.T, preferred_element_type=jnp.float32).sum(axis=1, keepdims=True)

    acc = jax.lax.fori_loop(0, pl.cdiv(skv, block_k), body, jnp.zeros((q.shape[0], 1), jnp.float32))
    o_ref[...] = acc


@functools.partial(jax.jit, static_argnames=("block_k",))
def attend(q, k, skv, block_k=64):
    kernel = functools.partial(attend_kernel, block_k=block_k, skv=skv)
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((q.shape[0], 1), jnp.float32),
        compiler_params=pltpu.CompilerParams(),
    )(q, k)
'''
    assert not any("skv" in g for p in _guarded_plans(source) for g in p.guards)
    assert "if skv" not in fix_source(source, "k.py", unsafe=True).source
    # The same wrapper with `skv` declared static gets the check.
    static = source.replace('static_argnames=("block_k",)', 'static_argnames=("block_k", "skv")')
    assert [p.guards for p in _guarded_plans(static)] == [("k.shape[0] < pl.cdiv(skv, block_k) * block_k",)]


def test_no_check_for_a_kernel_two_pallas_calls_share_at_different_shapes():
    wrapper = _WRAPPER + '''

def fused_add_wide(x, residual):
    return pl.pallas_call(
        functools.partial(add_kernel, rows=8),
        grid=(x.shape[0] // 8,),
        out_shape=(
            jax.ShapeDtypeStruct(x.shape, x.dtype),
            jax.ShapeDtypeStruct((2 * residual.shape[0], residual.shape[1]), residual.dtype),
        ),
    )(x, residual)
'''
    source = _source(wrapper=wrapper)
    assert not _guarded_plans(source)
    assert fix_source(source, "k.py", unsafe=True).source == source


def test_the_language_server_names_the_check_in_a_non_preferred_quick_fix_title():
    from pallas_fix.frontends.lsp.incremental.units import offers_of
    from pallas_fix.frontends.lsp.snapshot import FixInfo, quick_fix_title

    result = analyze_source(_source(), "k.py")
    offers = offers_of(result, result.findings, allow_unsafe=True)
    guarded = [(f, FixInfo(*offers[(f.span.line, f.span.column)])) for f in result.findings
               if offers.get((f.span.line, f.span.column), (None, None, ()))[2]]
    assert len(guarded) == 1
    finding, fix = guarded[0]
    assert not fix.safe  # so never the preferred quick fix, and never in fix-all
    assert quick_fix_title(finding, fix) == (
        f"Fix PF103: program-id-blocks (unsafe; adds `if {_BOUND}: raise`)")
    assert not offers_of(result, result.findings, allow_unsafe=False).get((finding.span.line, finding.span.column))


@pytest.mark.interp
def test_a_check_the_recorded_example_breaks_refuses_the_lift_and_is_not_written(tmp_path: Path):
    """No example in the file (synthesis would make the two inputs alike); the recorded call gives
    `residual` fewer rows than `x`, which the original runs (clamping) and the check rejects: the
    lift is refused as one that would narrow what the kernel takes, not reported as broken."""
    path = tmp_path / "k.py"
    source = _source(example="")
    path.write_text(source)
    recorded = {"version": 1, "examples": {"k.py": ["fused_add(f32[64, 128], f32[48, 128])"]}}
    (tmp_path / "pallas-fix-examples.json").write_text(json.dumps(recorded))
    run = subprocess.run([sys.executable, "-m", "pallas_fix", "--apply", "--unsafe-fixes", str(path)],
                         cwd=tmp_path, capture_output=True, text=True, timeout=600)
    out = run.stdout + run.stderr
    assert path.read_text() == source, out
    assert "must be at least" in out and "recorded" in out, out
    assert "the check it adds rejects" in out and "a call the original accepts" in out, out
    assert "error on" not in out, out


# -- guards the real corpus needs (issue 26, part 2) -------------------------------------------

_FIXTURES = Path(__file__).parent / "fixtures" / "codemods" / "program_id_blocks"


def test_a_squeezed_block_gets_the_bound_its_grid_axis_needs_not_an_equality():
    """`x_ref[b, :, :]` over `grid=(batch,)`, `batch` read from `x.shape` before a helper pads
    `x`: the check is `x.shape[0] >= batch`, which rejects no call the original handles."""
    source = (_FIXTURES / "pid_batch_rows_guarded_before.py").read_text()
    guards = {g for p in _guarded_plans(source) for g in p.guards}  # each plan names the checks it needs
    assert guards == {"scale.shape[0] < batch", "x.shape[0] < batch"}, guards
    fixed = fix_source(source, "k.py", unsafe=True).source
    assert "if x.shape[0] < batch:" in fixed and "!=" not in fixed and "batch * 1" not in fixed


def test_a_check_already_written_before_the_call_proves_the_next_rewrite_and_is_not_written_twice():
    source = (_FIXTURES / "pid_branch_bound_guarded_before.py").read_text()
    fixed = fix_source(source, "k.py", unsafe=True)
    assert fixed.error is None and not fixed.remaining
    assert fixed.source.count("if x.shape[1] < nb * block:") == 1, fixed.source


def test_no_check_on_an_expression_the_calls_own_statement_rebinds():
    """`x.shape[1]` cannot be followed (`x` is bound in a branch) and the statement that runs the
    call binds a name with `:=` first: a check before it might not read what the call reads."""
    source = (_FIXTURES / "pid_branch_bound_guarded_before.py").read_text()
    walrus = source.replace("    return pl.pallas_call(", "    return (nb := n // block) and pl.pallas_call(")
    assert walrus != source
    assert not _guarded_plans(walrus)
    assert "raise ValueError" not in fix_source(walrus, "k.py", unsafe=True).source


_MASKED = '''
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pltriton


def scale_rows_kernel(x_ref, o_ref, *, block):
    pid = pl.program_id(0)
    rows = pl.ds(pid * block, block)
    mask = (pid * block + jnp.arange(block) < x_ref.shape[0])[:, None]
    x = pltriton.load(x_ref.at[rows, :], mask=mask)
    pltriton.store(o_ref.at[rows, :], x * 2.0, mask=mask)


def scale_rows(x, block=16):
    return pl.pallas_call(
        functools.partial(scale_rows_kernel, block=block),
        grid=(pl.cdiv(x.shape[0], block),),
        in_specs=[pl.BlockSpec(x.shape, lambda i: (0, 0))],
        out_specs=pl.BlockSpec(x.shape, lambda i: (0, 0)),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
    )(x)
'''


def test_no_check_for_a_kernel_that_masks_its_tail():
    """A masked load or store handles a last window past the end on hardware: `x.shape[0] %
    block == 0` would reject calls the original handles, so no check is written. On Triton,
    which masks a BlockSpec's partial last block itself, the lift is an unsafe fix without one
    (rewrite.proofs.ragged_blocks), the mask still reading the array's full rows."""
    source = _MASKED
    assert not _guarded_plans(source)
    fixed = fix_source(source, "k.py", unsafe=True).source
    assert "raise ValueError" not in fixed
    assert "pl.BlockSpec((block, x.shape[1]), lambda i: (i, 0))" in fixed and "< x_rows)" in fixed, fixed
    findings = analyze_source(source, "k.py").findings
    assert findings and all(f.refusal is None for f in findings), [f.refusal for f in findings]


def test_a_plan_that_fails_before_its_bounds_are_checked_says_its_own_reason():
    # An index_map with a default parameter is refused while its spec is read, before any bound.
    defaulted = _MASKED.replace("lambda i: (0, 0)", "lambda i, k=0: (0, 0)")
    reasons = [f.refusal for f in analyze_source(defaulted, "k.py").findings if f.refusal]
    assert reasons and all("default, keyword" in r and "may run past the end" not in r for r in reasons), reasons


_UNFOLLOWED_COUNT = '''
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def cdiv(a, b):
    return (a + b - 1) // b


def make_call(n, bs):
    def kernel(x_ref, o_ref):
        window = pl.ds(pl.program_id(0) * bs, bs)
        o_ref[window, :] = x_ref[window, :] * 2.0

    def run(x):
        return pl.pallas_call(
            kernel,
            grid=(cdiv(n, bs),),
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        )(x)

    return run


def doubled(x, bs=16):
    return make_call(x.shape[0], bs)(x)
'''


def test_the_modules_cdiv_count_gets_the_exact_bound_as_its_check():
    """The grid counts `cdiv(n, bs)` (the module's own ceil division, read as `pl.cdiv`) with `n` a
    factory's parameter (brainevent's binary_densemv sizes its grid from a ShapeDtypeStruct handed
    to its factory): nothing ties `n` to `x.shape[0]`, so the check is the bound itself, which
    rejects only calls whose last window the original reads past the end."""
    assert {g for p in _guarded_plans(_UNFOLLOWED_COUNT) for g in p.guards} == {"x.shape[0] < cdiv(n, bs) * bs"}


def test_no_check_where_the_count_cannot_be_followed_back_to_the_dim_and_the_refusal_says_so():
    """A count helper pallas-fix does not read (two statements): no check on `x.shape[0]` alone
    bounds it, and the bound itself is no check pallas-fix can write, so none is written and the
    refusal says to compute the count from the dim."""
    source = _UNFOLLOWED_COUNT.replace("    return (a + b - 1) // b\n", "    c = a + b - 1\n    return c // b\n")
    assert source != _UNFOLLOWED_COUNT
    assert not _guarded_plans(source)
    reasons = [f.refusal for f in analyze_source(source, "k.py").findings if f.refusal]
    assert reasons and all(
        "cannot follow the count `cdiv(n, bs)` back to `x.shape[0]`; compute the count from `x.shape[0]`" in r
        for r in reasons
    ), reasons
    fixed = source.replace("grid=(cdiv(n, bs),)", "grid=(pl.cdiv(x.shape[0], bs),)")
    findings = analyze_source(fixed, "k.py").findings
    assert findings and all(f.fixable for f in findings), [f.refusal for f in findings]


_ONE_ELEMENT_STEPS = '''
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

# pallas-fix: example tag_rows(i32[4], f32[8, 128], 6)


def kernel(ids_ref, x_ref, o_ref):
    g = pl.program_id(0)
    o_ref[pl.ds(g, 1), :] = x_ref[pl.ds(g, 1), :] + ids_ref[pl.ds(g, 1)][:, None].astype(jnp.float32)


def tag_rows(ids, x, num_groups):
    return pl.pallas_call(
        kernel,
        grid=(num_groups,),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
    )(ids, x)
'''


def test_steps_of_one_element_are_told_to_stay_within_the_dim_not_to_divide_it():
    """Blocks of one element are never partial: `len % 1 == 0` says nothing. What may go wrong is
    a step past the end, so the refusal asks for `steps <= extent` (axlearn's gmm reads its tile
    metadata this way, one entry per program). The example runs 6 steps over 4 ids, so no check
    is written."""
    reasons = [f.refusal for f in analyze_source(_ONE_ELEMENT_STEPS, "k.py").findings if f.refusal]
    assert reasons and all("% 1" not in r for r in reasons), reasons
    assert any("assert `num_groups <= ids.shape[0]` before the pallas_call" in r for r in reasons), reasons


_PAST_THE_END = '''
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def kernel(x_ref, o_ref):
    bs = 32
    o_ref[...] = x_ref[pl.ds(jnp.int32(4) * bs, bs), :]


def take_block(x):
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((32, x.shape[1]), x.dtype),
        interpret=True,
    )(x)
'''


@pytest.mark.interp
def test_a_traced_start_past_the_end_of_a_small_array_is_not_written(tmp_path: Path):
    """Traced, `jnp.int32(4) * bs` is clamped on a 128-row array; a Python int there fails at
    trace time. The synthesised example (256 rows) fits it, so verification also runs the
    smallest shapes the original runs on, where the rewrite fails: plain --apply writes nothing."""
    path = tmp_path / "k.py"
    path.write_text(_PAST_THE_END)
    run = subprocess.run([sys.executable, "-m", "pallas_fix", "--apply", str(path)],
                         cwd=tmp_path, capture_output=True, text=True, timeout=600)
    out = run.stdout + run.stderr
    assert path.read_text() == _PAST_THE_END, out
    assert "the smallest shapes the original runs on" in out and "Out of bound slice" in out, out


# -- sizes bound in branches, unchanged since the grid read them (proofs.unchanged) -------------------

_HEADS = (_FIXTURES / "pid_branch_heads_guarded_before.py")


def test_a_size_unpacked_in_both_arms_is_checked_in_the_codes_own_spelling():
    """`B, H` unpacked in each arm of an `if`: opaque to the prover, yet nothing rebinds them
    before the call, so the check reads the grid's `B * H` as written (not `H * B`, not `(B * H)`)."""
    source = _HEADS.read_text()
    assert {g for p in _guarded_plans(source) for g in p.guards} == {"g_flat.shape[0] < B * H"}
    fixed = fix_source(source, "k.py", unsafe=True).source
    assert '    assert g_flat.shape[0] >= B * H, f"g_flat.shape[0] ({g_flat.shape[0]}) must be at least B * H"\n' in fixed


@pytest.mark.parametrize("between", [
    "    H = H + 0\n",                                   # rebound after the grid
    "    for H in (1,):\n        pass\n",                # a loop target
    "    if heads_first:\n        B, H = H, B\n",        # inside a nested block
    "    (H := 2)\n",                                    # a walrus
    "    def H():\n        pass\n",                      # a def of the name
])
def test_no_check_on_a_branch_bound_size_rebound_before_the_call(between: str):
    source = _HEADS.read_text().replace("    grid = (B * H,)\n", "    grid = (B * H,)\n" + between)
    assert not _guarded_plans(source)
    reasons = [f.refusal for f in analyze_source(source, "k.py").findings if f.refusal]
    assert reasons and all("cannot follow the count `B * H`" in r for r in reasons), reasons


def _dims_heads(between: str) -> str:
    """The sizes kept in a list bound in each arm (`dims = [B, H]`), the grid `dims[0] * dims[1]`."""
    source = _HEADS.read_text().replace("        g_flat = g.reshape", "        dims = [B, H]\n        g_flat = g.reshape").replace(
        "        g_flat = jnp.transpose", "        dims = [B, H]\n        g_flat = jnp.transpose")
    return source.replace("    grid = (B * H,)\n", "    grid = (dims[0] * dims[1],)\n" + between)


@pytest.mark.parametrize("between", [
    "    dims.insert(0, 1)\n",          # a method changes what `dims[0] * dims[1]` reads: 1 * B, not B * H
    "    _shrink(dims)\n",              # a call given the list may change it
])
def test_no_check_on_a_size_read_from_a_container_a_call_may_change_before_the_call(between: str):
    """A guard `g_flat.shape[0] < dims[0] * dims[1]` written before the call would read the changed
    list and pass calls whose grid runs past the end (red-team: the check became `>= B`)."""
    assert {g for p in _guarded_plans(_dims_heads("")) for g in p.guards} == {"g_flat.shape[0] < dims[0] * dims[1]"}
    assert not _guarded_plans(_dims_heads(between))


def test_no_check_when_an_inner_function_may_rebind_the_size_nonlocal():
    source = _HEADS.read_text().replace("    grid = (B * H,)\n", "    grid = (B * H,)\n\n    def bump():\n        nonlocal H\n        H += 1\n\n    bump()\n")
    assert not _guarded_plans(source)


def test_no_check_when_the_grid_is_built_inside_the_branches():
    """The grid's statement sits inside the `if` arm: not straight-line code before the call."""
    source = _HEADS.read_text().replace("    grid = (B * H,)\n", "").replace(
        "        g_flat = g.reshape(B * H, T, D)\n", "        g_flat = g.reshape(B * H, T, D)\n        grid = (B * H,)\n").replace(
        "        g_flat = jnp.transpose(g, (0, 2, 1, 3)).reshape(B * H, T, D)\n",
        "        g_flat = jnp.transpose(g, (0, 2, 1, 3)).reshape(B * H, T, D)\n        grid = (B * H,)\n")
    assert source.count("        grid = (B * H,)\n") == 2 and "\n    grid = (B * H,)" not in source
    assert not _guarded_plans(source)


# -- an output whose out_shape the call site names without spelling it (callsite.out_leaves) --------

_NAMED_OUT = _FIXTURES / "pid_named_out_shape_guarded_before.py"


def test_an_output_named_by_the_caller_is_sized_by_its_leaf_and_checked_before_the_run():
    source = _NAMED_OUT.read_text()
    assert {g for p in _guarded_plans(source) for g in p.guards} == {"jax.tree.leaves(kwargs['outs'])[0].shape[0] < x.shape[0]"}
    fixed = fix_source(source, "k.py", unsafe=True).source
    _, after = _check_and_next(fixed, "jax.tree.leaves(kwargs['outs'])[0].shape[0] < x.shape[0]")
    assert after == "return fn(x)"  # after the statement that builds the call, before the one that runs it
    assert "out_specs=jax.tree.map(" in fixed  # one struct or a list of one: the spec mirrors either


def test_an_out_shape_that_is_not_a_plain_read_stays_refused_with_the_size_it_cannot_write():
    """`out_shape=make_outs()`: calling it twice (at the call and in a check) may give two values."""
    source = _NAMED_OUT.read_text().replace("out_shape=kwargs['outs']", "out_shape=kwargs['outs_fn']()")
    assert not _guarded_plans(source)
    reasons = [f.refusal for f in analyze_source(source, "k.py").findings if f.refusal and "o_ref" in f.message]
    assert reasons and all("cannot write the size of dim 1 of `o_ref` at the call site" in r for r in reasons), reasons


def test_no_leaf_check_without_an_import_of_jax_to_write_it_with():
    source = _NAMED_OUT.read_text().replace("import jax\n", "import jax as jx\n").replace("jax.ShapeDtypeStruct", "jx.ShapeDtypeStruct")
    fixed = fix_source(source, "k.py", unsafe=True).source
    assert "jx.tree.leaves(kwargs['outs'])[0].shape[0] < x.shape[0]" in fixed  # the module's own alias


_OPTIONAL_BIAS = '''import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pltriton


def kernel(x_ref, b_ref, o_ref):
    i = pl.program_id(0)
    x = pltriton.load(x_ref.at[i, :, :])
    if b_ref is not None:
        x = x + pltriton.load(b_ref.at[i, :, :])
    pltriton.store(o_ref.at[i, :, :], x)


def add(x, b=None):
    n, r, c = x.shape
    return pl.pallas_call(
        kernel,
        grid=(n,),
        in_specs=[
            pl.BlockSpec(x.shape, lambda *_: (0,) * x.ndim),
            None if b is None else pl.BlockSpec(b.shape, lambda *_: (0,) * b.ndim),
        ],
        out_specs=pl.BlockSpec(x.shape, lambda *_: (0,) * x.ndim),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        compiler_params=pltriton.CompilerParams(num_warps=4),
    )(x, b)
'''


def test_no_check_reads_the_shape_of_an_operand_the_caller_may_pass_as_none():
    """easydel's Triton flash attention passes its bias as `b=None` with the spec `None if b is
    None else pl.BlockSpec(...)`: a check `if b.shape[0] < x.shape[0]` before the call raised
    AttributeError there (verification caught it). The bias row stays unlifted; the others lift."""
    result = fix_source(_OPTIONAL_BIAS, "k.py", unsafe=True)
    assert result.error is None
    assert "b.shape[0] <" not in result.source and "x_ref.at[i" not in result.source, result.source
    (left,) = [f for f in result.remaining if "b_ref" in f.message]
    assert left.refusal and "b.shape" not in (left.fix_after or "")


def test_no_check_before_a_pallas_call_that_runs_only_in_one_branch():
    """`pallas_call(...)(x, residual) if fused else ...` or `not fused or pallas_call(...)`: a
    check before the statement would reject a call that never runs the pallas_call (redteam10)."""
    run = "    )(x, residual)\n"
    branches = ("    )(x, residual) if fused else (x, residual)\n", run)
    for tail, head in ((branches[0], "    return pl.pallas_call("), (run, "    return not fused or pl.pallas_call(")):
        wrapper = _WRAPPER.replace("rows=16):", "rows=16, fused=True):").replace(run, tail).replace("    return pl.pallas_call(", head)
        source = _source(wrapper=wrapper)
        assert not _guarded_plans(source)
        assert "raise ValueError" not in fix_source(source, "k.py", unsafe=True).source
