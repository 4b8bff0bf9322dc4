"""Real code does not crash the analysis: rebinding cycles, deep generated code, JAX's own tree.

`pallas-fix --apply` over JAX's tests/pallas/pallas_test.py ended in a RecursionError: it rebinds
`kernel = functools.partial(kernel, bound=...)`, and following `kernel` inside its own assigned
value led back to the same assignment forever. The deepest expression nesting in JAX's Pallas
sources (ops/, _src/pallas/, tests/pallas/) is 34 AST levels; the generated module here is about
three times as deep.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pallas_fix.engine import analyze_source, fix_source

HEADER = "import functools\nimport jax\nfrom jax import lax\nfrom jax.experimental import pallas as pl\n\n\n"


KERNEL = (
    "def kernel(x_ref, o_ref, bound):\n"
    "    def body(i, carry):\n"
    "        o_ref[pl.ds(i * 8, 8)] = x_ref[pl.ds(i * 8, 8)] * bound\n"
    "        return carry\n"
    "    lax.fori_loop(0, 4, body, None)\n\n\n"
)
CALL = "pl.pallas_call({}, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)"


def test_a_kernel_rebound_to_a_partial_of_itself_is_the_def():
    # JAX's pallas_test.py: the rebinding sits next to the def.
    binding = "kernel = functools.partial(kernel, bound=2.0)\n\n\ndef run(x):\n    return " + CALL.format("kernel") + "\n"
    result = analyze_source(HEADER + KERNEL + binding, "k.py")
    (site,) = result.sites
    assert site.kernel is not None and site.kernel.name.value == "kernel"
    assert list(site.partial_kwargs) == ["bound"]
    assert [f.code for f in result.findings] == ["PF101", "PF101"]


def test_names_that_resolve_to_each_other_end():
    src = HEADER + (
        "def kernel(x_ref, o_ref):\n"
        "    o_ref[...] = x_ref[...]\n\n\n"
        "a = b\nb = a\n\n\n"
        "def run(x):\n"
        "    return pl.pallas_call(a, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)\n"
    )
    (site,) = analyze_source(src, "k.py").sites
    assert site.kernel is None  # nothing to follow to: no kernel body, and no crash


def deep_module(terms: int = 100, chain: int = 100, statements: int = 300) -> str:
    """A kernel whose start is a `terms`-term sum reached through a `chain` of names, in a module
    with `statements` more statements: about 107 AST levels deep at the defaults."""
    start = "i * 8" + " + 0" * terms
    body = [f"        s0 = {start}"] + [f"        s{k} = s{k - 1}" for k in range(1, chain)]
    last = f"s{chain - 1}"
    lines = [
        "def kernel(x_ref, o_ref):",
        "    def body(i, carry):",
        *body,
        f"        o_ref[pl.ds({last}, 8)] = x_ref[pl.ds({last}, 8)] * 2.0",
        "        return carry",
        "    lax.fori_loop(0, 4, body, None)",
        "",
        *(f"v{k} = {k}" for k in range(statements)),
        "",
        "",
        "def run(x):",
        "    assert x.shape[0] == 32  # the loop's 4 blocks of 8 cover x exactly",
        "    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)",
        "",
    ]
    return HEADER + "\n".join(lines)


def test_deep_generated_code_is_analysed():
    assert sys.getrecursionlimit() <= 1000  # the default: no test raises it to pass
    findings = analyze_source(deep_module(), "deep.py").findings
    assert [f.code for f in findings] == ["PF101", "PF101"]


def test_long_generated_code_is_fixed():
    """A 10-term start through 10 names, 300 statements: the affine reading gives up past 24
    levels of one start expression (a refusal, not a crash), which real starts stay far below."""
    src = deep_module(terms=10, chain=10) + "# pallas-fix: example run(f32[32])\n"
    result = fix_source(src, "deep.py")
    assert result.error is None and result.changed
    assert "grid=(4,)" in result.source and "pl.ds(" not in result.source


def _pallas_sources(dest: Path) -> Path:
    """The installed jax package's Pallas sources (ops/ and _src/pallas/), copied to `dest`."""
    import jax

    root = Path(jax.__file__).parent
    for part in ("experimental/pallas", "_src/pallas"):
        shutil.copytree(root / part, dest / part, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


@pytest.mark.slow
def test_jax_own_pallas_tree_applies_without_a_traceback_and_is_stable(tmp_path):
    tree = _pallas_sources(tmp_path / "jax")
    cmd = [sys.executable, "-m", "pallas_fix", "--no-verify", "--unsafe-fixes"]
    dry = subprocess.run([*cmd, str(tree)], capture_output=True, text=True, timeout=600)
    assert dry.returncode <= 1, dry.stderr[-3000:]
    assert "Traceback" not in dry.stderr and "internal error" not in dry.stderr
    first = subprocess.run([*cmd, "--apply", str(tree)], capture_output=True, text=True, timeout=600)
    assert first.returncode <= 1, first.stderr[-3000:]
    assert "Traceback" not in first.stderr and "internal error" not in first.stderr
    snapshot = {p: p.read_text() for p in tree.rglob("*.py")}
    second = subprocess.run([*cmd, "--apply", str(tree)], capture_output=True, text=True, timeout=600)
    assert second.returncode <= 1, second.stderr[-3000:]
    assert "fixed " not in second.stderr
    assert {p: p.read_text() for p in tree.rglob("*.py")} == snapshot


def test_code_deeper_than_the_analysis_follows_is_a_clear_error(tmp_path, capsys):
    from pallas_fix.frontends.cli.app import main

    path = tmp_path / "generated.py"
    path.write_text(deep_module(terms=400, chain=200))
    with pytest.raises(SystemExit) as info:
        main([str(path)])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "nests too deeply for pallas-fix to analyse" in err and "internal error" not in err
