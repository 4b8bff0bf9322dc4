"""Where kernels run in GPU interpret mode, a rewrite must keep them running there.

The seed scenario (tests/fixtures/gpu_interpret_policy/seed_gather.py): a Mosaic GPU gather whose
block index is read as a one-element slice, run with `interpret=plgpu.InterpretGPUParams()`, fails
with "Dynamic indexing not supported in GPU interpret mode". The start fix (PF107) is what it
needs; lifting the loop into BlockSpecs would give a kernel GPU interpret mode cannot run at all.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import numpy as np
import pytest

from pallas_fix.core.config import Config
from pallas_fix.engine import analyze_source, fix_source
from pallas_fix.frontends.cli.app import main

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
