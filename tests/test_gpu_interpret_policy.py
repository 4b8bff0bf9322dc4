"""Where kernels run in GPU interpret mode, a rewrite must keep them running there.

The seed scenario (tests/fixtures/gpu_interpret_policy/seed_gather.py): a Mosaic GPU gather whose
block index is read as a one-element slice, run with `interpret=plgpu.InterpretGPUParams()`, fails
with "Dynamic indexing not supported in GPU interpret mode". The start fix (PF107) is what it
needs; lifting the loop into BlockSpecs would give a kernel GPU interpret mode cannot run at all.

The same holds where nothing in the module names GPU interpret mode
(tests/fixtures/gpu_interpret/seed_gather_rows.py: its caller passes the interpreter in): a
Mosaic GPU kernel is presumed to run there until `--target compiled` or a hazard it already has
says otherwise (pallas_fix/rules/gpu_interpret/policy.py).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import pair_harness as H

from pallas_fix.core.config import Config
from pallas_fix.engine import analyze_source, fix_source
from pallas_fix.frontends.cli.app import main
from pallas_fix.verify.runner import format_verdict

SEED = Path(__file__).resolve().parent / "fixtures" / "gpu_interpret_policy" / "seed_gather.py"


def findings(config: Config):
    return {f.code: f for f in analyze_source(SEED.read_text(), str(SEED), config).findings}


def test_the_lift_is_refused_where_the_module_runs_gpu_interpret_mode_and_the_start_fix_first():
    found = findings(Config())
    assert found["PF107"].fixable and found["PF107"].fix_id == "scalar-start"
    lift = found["PF101"]
    assert not lift.fixable or lift.fix_id != "lift-loop", lift
    fixed = fix_source(SEED.read_text(), str(SEED), Config())
    assert "pl.BlockSpec" not in fixed.source and "idx_ref[k]" in fixed.source, fixed.source
    again = {f.code: f for f in fixed.remaining}
    assert "GPU interpret mode cannot run (the module uses InterpretGPUParams" in (again["PF101"].refusal or "")
    assert "--target compiled" in again["PF101"].refusal


def test_target_compiled_lifts_anyway():
    fixed = fix_source(SEED.read_text(), str(SEED), Config(target="compiled"))
    assert "pl.BlockSpec" in fixed.source


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.interp
def test_plain_apply_makes_the_seed_kernel_run_in_gpu_interpret_mode(tmp_path, capsys):
    import jax.numpy as jnp

    path = tmp_path / "seed_gather.py"
    shutil.copy(SEED, path)
    with pytest.raises(SystemExit):
        main(["--apply", str(path)])
    err = capsys.readouterr().err
    assert "fixed" in err and "gpu-interpret" in err, err
    x = jnp.arange(64 * 128, dtype=jnp.float32).reshape(64, 128)
    idx = jnp.array([3, 1, 0, 2], jnp.int32)
    out = _load(path, "seed_gather_fixed").gather(x, idx)  # ran in GPU interpret mode
    expected = np.concatenate([np.asarray(x)[b * 8:(b + 1) * 8] * 2.0 for b in (3, 1, 0, 2)])
    np.testing.assert_array_equal(np.asarray(out), expected)


# =========================================================================== presumed: a Mosaic GPU kernel
# The seed as users write it: nothing in the module names GPU interpret mode; the caller passes the
# interpreter in (`gather_rows(table, x, interpret=plgpu.InterpretGPUParams())`).
GATHER_ROWS = Path(__file__).resolve().parent / "fixtures" / "gpu_interpret" / "seed_gather_rows.py"

# Runs the module at argv[1] the way the seed's test does, in a fresh process (GPU interpret mode
# keeps global state): prints "ok" for the right gather, else the error.
_RUN_IN_GPU_INTERPRET = """
import importlib.util, sys
import numpy as np, jax.numpy as jnp
from jax.experimental.pallas import mosaic_gpu as plgpu
spec = importlib.util.spec_from_file_location("gather_rows_module", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
x = jnp.arange(64 * 128, dtype=jnp.float32).reshape(64, 128)
table = jnp.array([3, 1, 7, 2], jnp.int32)
expected = jnp.concatenate([x[b * 8:(b + 1) * 8] for b in (3, 1, 7, 2)])
try:
    out = module.gather_rows(table, x, interpret=plgpu.InterpretGPUParams())
except Exception as exc:
    print("error:", type(exc).__name__, exc)
else:
    print("ok" if np.array_equal(np.asarray(out), np.asarray(expected)) else "wrong result")
"""


def _run_in_gpu_interpret(path: Path) -> str:
    env = dict(os.environ, JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run([sys.executable, "-c", _RUN_IN_GPU_INTERPRET, str(path)], capture_output=True, text=True,
                          timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()[-1]


def test_a_mosaic_gpu_kernel_is_presumed_to_run_in_gpu_interpret_mode():
    source = GATHER_ROWS.read_text()
    assert "InterpretGPUParams" not in source and "interpret=interpret" in source
    found = {f.code: f for f in analyze_source(source, str(GATHER_ROWS)).findings}
    assert found["PF107"].fix_id == "scalar-start"
    assert not found["PF101"].fixable, found["PF101"]
    assert "`gather_rows_kernel` is a Mosaic GPU kernel" in found["PF101"].refusal
    assert "lift-loop is for compiled Mosaic GPU: --target compiled applies it" in found["PF101"].refusal
    # Presumed, not stated: no PF2xx warning (a compiled Mosaic GPU kernel may use BlockSpecs).
    assert not [c for c in found if c.startswith("PF2")]
    fixed = fix_source(source, str(GATHER_ROWS))
    assert "table_ref[i] * BLOCK" in fixed.source and "pl.BlockSpec" not in fixed.source, fixed.source


def test_target_compiled_lifts_the_mosaic_gpu_loop():
    fixed = fix_source(GATHER_ROWS.read_text(), str(GATHER_ROWS), Config(target="compiled"))
    assert "pl.BlockSpec" in fixed.source and "grid=(table.shape[0],)" in fixed.source, fixed.source


def test_a_mosaic_gpu_kernel_with_a_hazard_is_not_presumed_to_run_there():
    """A kernel GPU interpret mode already cannot run (here: a grid read through pl.program_id,
    which it computes wrongly) is compiled: its rewrite is offered as before."""
    pair = next(p for p in H.FAMILIES["program_id_blocks"].pairs() if p.name == "pid_row_sums_1d_mgpu")
    assert "plgpu.CompilerParams" in pair.before_source
    plans = analyze_source(pair.before_source, str(pair.before)).plans
    assert "program-id-blocks" in {p.codemod for p in plans}


def test_verification_of_a_mosaic_gpu_module_runs_gpu_interpret_mode(tmp_path):
    from pallas_fix.frontends.service import Options, analyse_file, runs_in_gpu_interpret

    path = tmp_path / GATHER_ROWS.name
    shutil.copy(GATHER_ROWS, path)
    source = path.read_text()
    assert runs_in_gpu_interpret(str(path), source, Options())
    assert analyse_file(str(path), Options()).gpu_interpret
    assert not runs_in_gpu_interpret(str(path), source, Options(target="compiled"))


def test_the_language_server_analyses_a_mosaic_gpu_module_whole():
    """Whether one kernel is presumed to run in GPU interpret mode depends on its hazards, and the
    screen compares the module's hazards before and after: re-analysing only the edited kernels
    would compare two different sets of kernels."""
    from pallas_fix.frontends.lsp.incremental.reanalysis import eligible

    source = GATHER_ROWS.read_text()
    assert not eligible(source, Config())
    assert eligible(source, Config(target="compiled"))


@pytest.mark.interp
def test_plain_apply_makes_the_callers_gpu_interpret_run_of_the_seed_right(tmp_path, capsys):
    """Done-when of the seed scenario: the original raises the seed's error when its caller passes
    GPU interpret mode; after plain `--apply` it runs there and gathers the right rows."""
    path = tmp_path / GATHER_ROWS.name
    shutil.copy(GATHER_ROWS, path)
    assert "Dynamic indexing not supported in GPU interpret mode" in _run_in_gpu_interpret(path)
    with pytest.raises(SystemExit):
        main(["--apply", str(path)])
    err = capsys.readouterr().err
    assert "fixed" in err and "PF107" in err, err
    assert "the rewrite runs in interpret and gpu-interpret, and their outputs agree" in err, err
    assert "across interpreters" not in err
    assert _run_in_gpu_interpret(path) == "ok", path.read_text()


@pytest.mark.interp
def test_with_target_compiled_the_lift_is_verified_against_the_start_fixed_text(tmp_path, capsys):
    """The original runs nowhere (a one-element slice as a start): the start fix is written
    unverified, and the lift is verified against the start-fixed text, not written unverified."""
    path = tmp_path / GATHER_ROWS.name
    shutil.copy(GATHER_ROWS, path)
    with pytest.raises(SystemExit):
        main(["--apply", "--target", "compiled", str(path)])
    err = capsys.readouterr().err
    assert "no other interpreter ran it to compare with" in err, err
    assert re.search(r"^verified gather_rows: ", err, re.M), err
    assert "pl.BlockSpec" in path.read_text()


@pytest.mark.interp
def test_an_interpreter_where_the_original_fails_the_same_way_is_not_named_as_agreeing():
    from pallas_fix.verify import collect_examples, verify_sources

    path = Path(__file__).resolve().parent / "fixtures" / "gpu_interpret" / "pf203_vmem_scratch.py"
    source = path.read_text()
    examples = collect_examples(path, source, pyproject=False)
    (v,) = verify_sources(source, source + "\n# touched\n", examples, gpu_interpret=True)
    assert v.status == "verified", v.message
    assert "gpu-interpret could not compare: the original fails there the same way" in v.message
    matched = v.message.split(";")[0]
    assert matched.startswith("outputs match on") and "gpu-interpret" not in matched, v.message
    assert "gpu-interpret" in v.interpreters  # it ran, ...
    assert "gpu-interpret" not in format_verdict(v), format_verdict(v)  # ... but the line names those that compared


MIXED = '''
import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

# pallas-fix: example both(f32[8, 128])


def row_sum_kernel(x_ref, o_ref):
    i = pl.program_id(0)
    o_ref[i] = jnp.sum(x_ref[i, :])


def double_kernel(x_ref, o_ref):
    def body(r, c):
        o_ref[pl.ds(r * 2, 2), :] = x_ref[pl.ds(r * 2, 2), :] * 2.0
        return c

    lax.fori_loop(0, 4, body, None)


def both(x):
    sums = pl.pallas_call(
        row_sum_kernel,
        out_shape=jax.ShapeDtypeStruct((x.shape[0],), x.dtype),
        grid=(x.shape[0],),
        compiler_params=plgpu.CompilerParams(),
    )(x)
    doubled = pl.pallas_call(
        double_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        compiler_params=plgpu.CompilerParams(),
    )(x)
    return sums, doubled
'''


@pytest.mark.interp
def test_a_kernel_gpu_interpret_mode_gets_wrong_is_rewritten_beside_one_it_runs(tmp_path, capsys):
    """`row_sum_kernel` reads pl.program_id in a grid: GPU interpret mode computes it wrongly, so
    it is not presumed to run there and gets its BlockSpecs. `double_kernel` runs there and keeps
    its loop. Verification runs GPU interpret mode for the module: the rewrite of `row_sum_kernel`
    raises there, but the original's outputs were wrong there, so that is no failure, and the
    verdict names only the interpreters that compared."""
    path = tmp_path / "mixed.py"
    path.write_text(MIXED)
    with pytest.raises(SystemExit):
        main(["--apply", str(path)])
    err = capsys.readouterr().err
    assert re.search(r"^verified both: .* \(interpret\)", err, re.M), err
    text = path.read_text()
    assert "pl.BlockSpec((None, x.shape[1]), lambda i: (i, 0))" in text, text
    assert "lax.fori_loop(0, 4, body, None)" in text, text
