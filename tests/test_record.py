"""`pallas-fix record -- CMD`: example calls recorded from the user's own runs, merged into
pallas-fix-examples.json, and picked up by verification.

The end-to-end tests run `pallas-fix record -- python script.py` in this process (the command
itself runs in a subprocess, with the recording hook on its PYTHONPATH) on a small kernel module in
tmp_path; the others call the hook's and the merger's functions directly.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from pallas_fix.core.config import ConfigError
from pallas_fix.frontends.cli import record_hook
from pallas_fix.frontends.cli.app import main
from pallas_fix.frontends.cli.record import merge_records, select_examples
from pallas_fix.verify.examples.sources import collect_examples
from pallas_fix.verify.examples.recorded import RECORD_ORIGIN, examples_from_recording

# An entry jitted with a static argument (silu, two dynamic slices to rewrite), a plain one
# (scale), a public helper that reaches no pallas_call (reference) and kernel bodies.
KERNEL = '''
import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl


def silu_kernel(x_ref, o_ref, *, block):
    def body(i, carry):
        x = x_ref[pl.ds(i * block, block), :]
        o_ref[pl.ds(i * block, block), :] = x * jax.nn.sigmoid(x)
        return carry

    lax.fori_loop(0, x_ref.shape[0] // block, body, None)


@functools.partial(jax.jit, static_argnames=["block"])
def silu(x, block=8):
    return pl.pallas_call(
        functools.partial(silu_kernel, block=block),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        interpret=True,
    )(x)


def scale_kernel(x_ref, o_ref, *, factor):
    o_ref[...] = x_ref[...] * factor


def scale(x, factor):
    if isinstance(x, dict):
        x = x["x"]
    return pl.pallas_call(
        functools.partial(scale_kernel, factor=factor),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        interpret=True,
    )(x)


def reference(x):
    return x * jax.nn.sigmoid(x)
'''

# Concrete calls, a repeated one, a traced one (eval_shape: tracers), an index table (a value
# range), one the grammar cannot write (a dict), a helper, and a child Python process.
SCRIPT = '''
import inspect
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np

import kern

x = np.ones((16, 128), np.float32)
kern.silu(x, block=8)
kern.silu(x, block=8)
jax.eval_shape(lambda y: kern.silu(y, block=8), jax.ShapeDtypeStruct((8, 128), jnp.bfloat16))
kern.scale(x, 2.0)
kern.scale(np.array([0, 2, 1, 2], np.int32), 1)
kern.scale({"x": x}, 3.0)
kern.reference(x)
# the wrappers change nothing a caller sees
assert kern.silu.__name__ == "silu" and kern.scale.__name__ == "scale"
assert list(inspect.signature(kern.scale).parameters) == ["x", "factor"]
assert kern.silu.lower(x, block=8) is not None
assert float(kern.silu(x, block=8)[0, 0]) == float(kern.reference(x)[0, 0])
subprocess.run([sys.executable, "child.py"], check=True)
'''

CHILD = '''
import numpy as np
import kern

kern.silu(np.zeros((32, 128), np.float32), block=16)
'''

SECOND = '''
import sys

import numpy as np

import kern

kern.silu(np.ones((16, 128), np.float32), block=8)
kern.silu(np.ones((48, 128), np.float32), block=16)
sys.exit(3)
'''


def record(capfd, *args) -> tuple[int, str]:
    """`pallas-fix record ARGS` in this process: (exit status, stderr)."""
    with pytest.raises(SystemExit) as info:
        main(["record", *map(str, args)])
    _, err = capfd.readouterr()
    code = info.value.code
    return (0 if code is None else int(code)), err


def recording(folder: Path) -> dict:
    return json.loads((folder / "pallas-fix-examples.json").read_text())


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    (tmp_path / "kern.py").write_text(KERNEL)
    (tmp_path / "script.py").write_text(SCRIPT)
    (tmp_path / "child.py").write_text(CHILD)
    (tmp_path / "second.py").write_text(SECOND)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_record_writes_the_entry_calls_of_every_process_then_merges_a_failing_run(capfd, project):
    code, err = record(capfd, "--", sys.executable, "script.py")
    assert code == 0, err
    first = {
        "version": 1,
        "examples": {
            "kern.py": [
                "silu(f32[16, 128], block=8)",
                "silu(bf16[8, 128], block=8)",
                "silu(f32[32, 128], block=16)",
                "scale(f32[16, 128], 2.0)",
                "scale(i32[4] in [0, 3), 1)",
            ]
        },
    }
    assert recording(project) == first
    summary = (
        "pallas-fix record: 7 calls of 2 entries in 1 file recorded (1 call skipped: arguments the "
        f"example grammar cannot write); 5 new examples written to {Path.cwd() / 'pallas-fix-examples.json'}"
    )
    assert summary in err.splitlines()

    # A second run that exits 3: its exit status, and its calls merged in front, deduplicated,
    # at most 3 per recorded entry; the entry it did not call stays as it was.
    code, err = record(capfd, "--", sys.executable, "second.py")
    assert code == 3
    assert recording(project)["examples"] == {
        "kern.py": [
            "silu(f32[16, 128], block=8)",
            "silu(f32[48, 128], block=16)",
            "silu(bf16[8, 128], block=8)",
            "scale(f32[16, 128], 2.0)",
            "scale(i32[4] in [0, 3), 1)",
        ]
    }
    assert "2 calls of 1 entry in 1 file recorded; 1 new example written to" in err


def test_record_keeps_a_malformed_recording_and_does_not_run(capfd, project):
    (project / "pallas-fix-examples.json").write_text("{not json")
    code, err = record(capfd, "--output", "pallas-fix-examples.json", "--", sys.executable, "-c", "open('ran', 'w')")
    assert code == 2
    assert "not valid JSON" in err and "not overwriting it" in err
    assert not (project / "ran").exists()
    assert (project / "pallas-fix-examples.json").read_text() == "{not json"


def test_record_without_kernel_calls_writes_nothing_and_passes_the_status_on(capfd, project, monkeypatch):
    # The hook's sitecustomize runs the one it shadows on the user's PYTHONPATH.
    theirs = project / "theirs"
    theirs.mkdir()
    (theirs / "sitecustomize.py").write_text("import os\nos.environ['THEIRS_RAN'] = 'yes'\n")
    monkeypatch.setenv("PYTHONPATH", str(theirs))
    check = "import os, sys; sys.exit(5 if os.environ.get('THEIRS_RAN') == 'yes' else 9)"
    code, err = record(capfd, "--", sys.executable, "-c", check)
    assert code == 5
    assert "pallas-fix record: 0 calls of 0 entries in 0 files recorded; nothing written" in err
    # ... and says what it records, instead of leaving the user to guess why nothing was
    assert f"that take arguments and reach a pallas_call, defined in .py files under {project}" in err
    assert "or the script it runs as __main__" in err
    assert not (project / "pallas-fix-examples.json").exists()


# A kernel file that runs itself: its entries are called from its own __main__ block, directly and
# through a `main()` without parameters (recorded would be `main()`, which says nothing of shapes).
SELF_RUNNING = KERNEL + '''

def main():
    silu(jnp.ones((24, 128), jnp.float32), block=8)


if __name__ == "__main__":
    import numpy as np

    x = np.ones((16, 128), np.float32)
    silu(x, block=8)
    scale(x, 2.0)
    main()
'''


def test_record_sees_the_calls_a_kernel_file_makes_when_it_runs_itself(capfd, project):
    # Issue 25: `pallas-fix record -- python kernel.py` recorded 0 calls: a script run as __main__
    # is not imported, so the hook never wrapped its functions.
    (project / "selfrun.py").write_text(SELF_RUNNING)
    code, err = record(capfd, "--", sys.executable, "selfrun.py")
    assert code == 0, err
    expected = ["silu(f32[16, 128], block=8)", "silu(f32[24, 128], block=8)", "scale(f32[16, 128], 2.0)"]
    assert recording(project)["examples"] == {"selfrun.py": expected}
    assert "3 calls of 2 entries in 1 file recorded" in err
    (project / "pallas-fix-examples.json").unlink()
    code, err = record(capfd, "--", sys.executable, "-m", "selfrun")  # runpy runs it as __main__
    assert code == 0, err
    assert recording(project)["examples"] == {"selfrun.py": expected}


def test_a_function_without_parameters_is_not_recorded():
    source = "def main():\n    run(pl.pallas_call(k)(x))\ndef run(x):\n    return pl.pallas_call(k)(x)\n"
    assert record_hook._recorded_names(source) == ["run"]


# -- the hook's pieces -----------------------------------------------------------------------------
def test_hook_writes_arguments_in_the_example_grammar():
    describe = record_hook._describe
    x = np.zeros((4, 8), np.float32)
    table = np.array([[3, 1], [2, 5]], np.int64)
    assert describe("f", (x, (x, table), [1.5, None]), {"flag": True, "mode": "a'b"}) == (
        "f(f32[4, 8], (f32[4, 8], i64[2, 2] in [1, 6)), [1.5, None], flag=True, mode=\"a'b\")",
        "f32[4, 8]; f32[4, 8]; i64[2, 2]",
    )
    assert describe("f", ((x,), np.float16(1.0)), {}) == ("f((f32[4, 8],), f16[])", "f32[4, 8]; f16[]")
    assert describe("f", (np.zeros((2,), np.bool_),), {}) == ("f(bool[2])", "bool[2]")
    for unwritable in ({"a": x}, float("nan"), np.zeros(3, np.complex64), object()):
        assert describe("f", (unwritable,), {}) is None


def test_hook_wraps_the_public_names_that_reach_a_pallas_call():
    source = textwrap.dedent('''
        def kernel(x_ref, o_ref): ...
        def _impl(x): return pl.pallas_call(kernel)(x)
        def outer(x): return _impl(x)
        wrapped = jax.jit(_impl)
        def helper(x): return x
        _private = jax.jit(outer)
    ''')
    assert record_hook._recorded_names(source) == ["outer", "wrapped"]


def test_select_prefers_distinct_shapes_and_keeps_first_seen_order():
    seen = [(1.0, "f(f32[8], 1)", "f32[8]"), (2.0, "f(f32[8], 2)", "f32[8]"),
            (3.0, "f(f32[16], 1)", "f32[16]"), (4.0, "f(f32[32], 1)", "f32[32]")]
    assert select_examples(seen, 3) == ["f(f32[8], 1)", "f(f32[16], 1)", "f(f32[32], 1)"]
    assert select_examples(seen, 4) == [s[1] for s in seen]


def test_merge_puts_new_examples_first_without_duplicates():
    old = {"a.py": ["f(f32[8])", "g(f32[1])", "f(f32[16])"], "b.py": ["h(i32[2])"]}
    new = {"a.py": ["f(f32[32])", "f(f32[8])"], "c.py": ["k(f32[4])"]}
    assert merge_records(old, new, 3) == {
        "a.py": ["f(f32[32])", "f(f32[8])", "f(f32[16])", "g(f32[1])"],
        "b.py": ["h(i32[2])"],
        "c.py": ["k(f32[4])"],
    }


# -- verification reads the recording --------------------------------------------------------------
def test_recorded_examples_come_after_pyproject_and_before_annotations(tmp_path):
    kernels = tmp_path / "pkg"
    kernels.mkdir()
    path = kernels / "kern.py"
    path.write_text(KERNEL)
    assert examples_from_recording(path) == []
    (tmp_path / "pallas-fix-examples.json").write_text(json.dumps(
        {"version": 1, "examples": {"pkg/kern.py": ["silu(f32[16, 128], block=8)"], "kern.py": ["scale(f32[1], 1.0)"]}}))
    found = collect_examples(path)
    assert [(e.text, e.origin) for e in found] == [("silu(f32[16, 128], block=8)", RECORD_ORIGIN)]
    assert RECORD_ORIGIN == "recorded (pallas-fix-examples.json)"
    path.write_text(KERNEL + "\n# pallas-fix: example scale(f32[8, 128], 2.0)\n")
    assert [e.text for e in collect_examples(path)] == ["scale(f32[8, 128], 2.0)"]
    (tmp_path / "pallas-fix-examples.json").write_text(json.dumps({"version": 2, "examples": {}}))
    with pytest.raises(ConfigError, match='"version": 1'):
        examples_from_recording(path)


@pytest.mark.interp
def test_verify_uses_the_recorded_example_and_says_so(capsys, tmp_path):
    path = tmp_path / "kern.py"
    path.write_text(KERNEL)
    (tmp_path / "pallas-fix-examples.json").write_text(json.dumps(
        {"version": 1, "examples": {"kern.py": ["silu(f32[16, 128], block=8)"]}}))
    with pytest.raises(SystemExit) as info:
        main(["verify", str(path)])
    out, err = capsys.readouterr()
    assert info.value.code in (0, None), out + err
    # (other parts of the verdict line, between the two, are not this test's business)
    [line] = out.splitlines()
    assert line.startswith("verified silu: 2 dynamic slices -> 0, max abs err 0.0 (interpret, tpu-interpret)")
    assert line.endswith(" — on silu(f32[16, 128], block=8), recorded (pallas-fix-examples.json)")
