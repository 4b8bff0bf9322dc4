"""What a new user reads: the summary counts what --apply will do, unknown rule codes are usage
errors, a syntax error names its place once."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from pallas_fix.frontends.cli.app import main

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "tiled_kernels.py"


def run(capsys, *args) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main([str(a) for a in args])
    out, err = capsys.readouterr()
    return int(info.value.code or 0), out, err


def test_the_summary_separates_safe_fixes_from_those_needing_unsafe_fixes(capsys):
    # Two PF101 and two PF103 are safe; the two PF102 (a reduction) need --unsafe-fixes.
    _, _, err = run(capsys, "--no-color", EXAMPLE)
    assert err.strip().splitlines()[-1] == "6 finding(s) in 1 file(s); 4 fixable with --apply, 2 more once verified on an example, or with --unsafe-fixes"
    _, _, err = run(capsys, "--no-color", "--unsafe-fixes", EXAMPLE)
    assert err.strip().splitlines()[-1] == "6 finding(s) in 1 file(s); 6 fixable with --apply"
    _, _, err = run(capsys, "--no-color", "--select", "PF102", EXAMPLE)
    assert err.strip().splitlines()[-1] == "2 finding(s) in 1 file(s); 2 fixable with --apply once verified on an example, or with --unsafe-fixes"


@pytest.mark.parametrize("flag", ["--select", "--ignore"])
def test_an_unknown_code_on_the_command_line_is_a_usage_error_listing_the_codes(capsys, flag):
    code, _, err = run(capsys, flag, "XYZ", EXAMPLE)
    assert code == 2
    assert "unknown rule code(s) XYZ" in err and "PF101" in err and "PF206" in err


def test_prefixes_of_codes_are_known(capsys):
    code, _, err = run(capsys, "--select", "pf1", "--ignore", "PF10", EXAMPLE)
    assert code == 0, err  # every PF1xx here is PF10x: nothing is left to report


def test_an_unknown_code_in_pyproject_is_a_configuration_error(capsys, tmp_path):
    shutil.copy(EXAMPLE, tmp_path / EXAMPLE.name)
    (tmp_path / "pyproject.toml").write_text('[tool.pallas-fix]\nignore = ["PF999"]\n')
    code, _, err = run(capsys, tmp_path / EXAMPLE.name)
    assert code == 2
    assert "configuration:" in err and "[tool.pallas-fix] ignore: unknown rule code(s) PF999" in err


def test_a_syntax_error_names_its_place_once(capsys, tmp_path):
    path = tmp_path / "broken.py"
    path.write_text("from jax.experimental import pallas as pl\ndef k(x_ref, o_ref):\n    o_ref[...] = x_ref[...\npl.pallas_call(k)\n")
    code, _, err = run(capsys, path)
    assert code == 2
    assert "error at" not in err  # LibCST's own numbering of the place is dropped
    # Python's place and words: the bracket left open on line 3 (LibCST said line 4, column 1).
    assert "syntax error: '[' was never closed (line 3, column 23)" in err, err


_HEAD = "import jax\nfrom jax.experimental import pallas as pl\n"
_BROKEN = {
    "unclosed bracket": _HEAD + "x = (1,\ndef k(x_ref):\n    pass\n\n\npl.pallas_call(k)\n",
    "bad parameter list": _HEAD + "def f(:\n    pass\npl.pallas_call\n",
    "two operators": _HEAD + "x = 1 +* 2\npl.pallas_call\n",
    "unterminated string": _HEAD + 'x = "abc\npl.pallas_call\n',
    "unexpected indent": _HEAD + "if True:\n  x = 1\n    y = 2\npl.pallas_call\n",
    "deep in a kernel": _HEAD + "\n" * 10 + "def k(x_ref, o_ref):\n    o_ref[...] = x_ref[...] +\n\n\npl.pallas_call(k)\n",
}


@pytest.mark.parametrize("name", sorted(_BROKEN))
def test_a_syntax_error_is_reported_where_python_reports_it_in_text_and_json(capsys, tmp_path, name):
    path = tmp_path / "broken.py"
    path.write_text(_BROKEN[name])
    with pytest.raises(SyntaxError) as python:
        compile(_BROKEN[name], str(path), "exec")
    line, column, words = python.value.lineno, python.value.offset, python.value.msg
    code, _, err = run(capsys, "--no-color", path)
    assert code == 2
    assert f"syntax error: {words} (line {line}, column {column})" in " ".join(err.split()), err
    code, out, _ = run(capsys, "--format", "json", path)
    (error,) = json.loads(out)["errors"]
    assert code == 2 and (error["path"], error["line"], error["column"]) == (str(path), line, column)
    assert words in error["message"]


def _without_examples(tmp_path) -> Path:
    path = tmp_path / EXAMPLE.name
    path.write_text("".join(line for line in EXAMPLE.read_text().splitlines(True) if "pallas-fix: example" not in line))
    return path


def test_the_verification_hint_names_the_entry_with_shapes(capsys, tmp_path):
    # The same suggestion `pallas-fix verify` makes: the entry, at sizes its blocks divide.
    path = _without_examples(tmp_path)
    _, _, err = run(capsys, "--apply", "--select", "PF101", "--no-synthesise", path)
    assert f"no example call for {path} (add `# pallas-fix: example silu(f32[256, 256])`, pass --example" in err


@pytest.mark.interp
def test_an_example_that_does_not_fit_the_original_is_blamed(capsys, tmp_path):
    path = _without_examples(tmp_path)
    # silu walks 128-row blocks: 64 rows do not fit the original kernel either.
    before = path.read_text()
    code, _, err = run(capsys, "--apply", "--select", "PF101", "--example", "silu(f32[64, 256])", path)
    assert code == 1 and path.read_text() == before
    assert "the example `silu(f32[64, 256])` (--example) does not run the original" in err
    assert "check the example" in err and "tracing the rewrite failed" not in err


@pytest.mark.interp
def test_examples_whose_kernels_the_rewrite_leaves_alone_share_one_line(capsys, tmp_path):
    path = tmp_path / EXAMPLE.name
    shutil.copy(EXAMPLE, path)
    _, _, err = run(capsys, "--apply", "--select", "PF101", path)
    assert re.search(r"^verified silu: 2 dynamic slices -> 0", err, re.M), err
    assert "verified scale_rows, matmul: outputs equal; the rewrite left their dynamic slices as they were" in err
    assert not re.search(r"^verified (scale_rows|matmul):", err, re.M)


def test_exit_zero_keeps_findings_from_failing_a_hook_but_not_usage_errors(capsys, tmp_path):
    assert run(capsys, EXAMPLE)[0] == 1
    assert run(capsys, "--exit-zero", EXAMPLE)[0] == 0
    assert run(capsys, "--exit-zero", tmp_path / "missing.py")[0] == 2


@pytest.mark.interp
def test_a_rewrite_no_example_ran_is_written_unverified_says_why_and_exits_1(capsys, tmp_path, monkeypatch):
    # Issue 25: the safe rewrite used to be written with exit 0 after "no example call (add ...)",
    # though verification had tried the file's examples and the original rejected them all.
    monkeypatch.setenv("PALLAS_FIX_CACHE_DIR", str(tmp_path / "cache"))
    folder = tmp_path / "kernels"
    folder.mkdir()
    path = folder / "ln.py"
    shutil.copy(Path(__file__).parent / "fixtures" / "synthesis" / "main_block_unread_layernorm.py", path)
    code, out, _ = run(capsys, "verify", path)
    assert code == 1
    verdict = out.strip().splitlines()[0]
    assert verdict.startswith("unverified layernorm: not verified: the original ran on none of the"), verdict
    code, _, err = run(capsys, "--no-color", "--apply", folder)  # a directory, and the cache says none ran
    assert code == 1, err
    assert verdict in err.splitlines()
    assert re.search(r"^not verified .*ln\.py: kernel _ln_kernel: no example reaches this kernel: the original ran on "
                     r"none of the examples of layernorm \(see above\); its safe fix is written without a check", err, re.M), err
    assert err.strip().splitlines()[-1] == ("0 finding(s) in 1 file(s); 1 file(s) written unverified: "
                                            "the original ran on none of their examples")
    assert "grid=(" in path.read_text()


PID_2D = '''\
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

BM = 64
BN = 128


def add_kernel(x_ref, y_ref, o_ref):
    i = pl.program_id(0)
    j = pl.program_id(1)
    rows = pl.ds(i * BM, BM)
    cols = pl.ds(j * BN, BN)
    o_ref[rows, cols] = x_ref[rows, cols] + y_ref[rows, cols]


@jax.jit
def add(x, y):
    m, n = x.shape
    return pl.pallas_call(
        add_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(m // BM, n // BN),
    )(x, y)
'''


def test_apply_prints_one_distinct_line_per_rewrite(capsys, tmp_path):
    # Three refs windowed along two dims: six rewrites, which all read "moved the program_id
    # window on `o_ref` ..." twice per ref.
    path = tmp_path / "add2d.py"
    path.write_text(PID_2D)
    code, _, err = run(capsys, "--no-color", "--apply", "--no-verify", path)
    fixed = [line for line in err.splitlines() if line.startswith(f"fixed {path}:")]
    assert code == 0, err
    assert len(fixed) == 6 and len(set(fixed)) == 6, fixed
    assert any("dim 1 of `o_ref` (by pl.program_id(1))" in line for line in fixed), fixed


def test_rewrites_that_say_the_same_thing_are_one_line_with_their_count():
    from pallas_fix.frontends.cli.apply import fixed_lines

    assert fixed_lines(["a", "b", "a", "c", "a"]) == ["a (3 rewrites)", "b", "c"]


# -- findings, counts and --apply agree ---------------------------------------------------------------
NESTED = Path(__file__).resolve().parent / "fixtures" / "codemods" / "lift_loop" / "nested_loops_before.py"


@pytest.mark.parametrize("name", ["program ids along two dims", "nested loops"])
def test_every_finding_apply_fixes_is_marked_fixable_and_counted(capsys, tmp_path, name):
    # An output windowed by two program ids (its second window waits for the first) and the
    # inner of two loops (it waits for the outer one) were "no fix" while the summary counted
    # them and --apply fixed them.
    path = tmp_path / "kernel.py"
    path.write_text(PID_2D if name == "program ids along two dims" else NESTED.read_text())
    code, out, err = run(capsys, "--no-color", path)
    assert "no fix" not in out
    shown = [line for line in out.splitlines() if re.match(rf"{re.escape(str(path))}:\d+:\d+: PF", line)]
    assert len(shown) == 6 and all(" [*] " in line for line in shown), out
    assert out.count("fixed after another fix: ") == (1 if name == "program ids along two dims" else 3)
    assert err.strip().splitlines()[-1] == "6 finding(s) in 1 file(s); 6 fixable with --apply"
    _, doc, _ = (lambda c, o, e: (c, json.loads(o), e))(*run(capsys, "--format", "json", path))
    assert all(f["fix"]["available"] and f["fix"]["refusal"] is None for f in doc["findings"])
    waiting = [f for f in doc["findings"] if f["fix"]["after"]]
    assert waiting and all(f["fix"]["codemod"] for f in waiting)
    code, _, err = run(capsys, "--no-color", "--apply", "--no-verify", path)
    assert code == 0 and "0 finding(s) in 1 file(s)" in err, err


def test_a_start_fix_is_counted_as_the_findings_it_fixes(capsys, tmp_path):
    # Each float start's fix turns its PF107 into a PF101: the count of findings stays 5, and
    # the summary said nothing was fixable while three findings were marked [*].
    source = Path(__file__).resolve().parent / "fixtures" / "codemods" / "scalar_start" / "float_starts_before.py"
    path = tmp_path / "floats.py"
    path.write_text(source.read_text())
    _, out, err = run(capsys, "--no-color", path)
    assert out.count(" [*] ") == 3
    assert err.strip().splitlines()[-1] == "5 finding(s) in 1 file(s); 3 fixable with --apply"


PREFIX_SUM = '''\
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

BS = 128


def prefix_kernel(x_ref, o_ref):
{first}    def body(i, carry):
        prev = o_ref[pl.ds((i - 1) * BS + BS - 1, 1)]
        o_ref[pl.ds(i * BS, BS)] = jnp.cumsum(x_ref[pl.ds(i * BS, BS)]) + prev
        return carry

    jax.lax.fori_loop(1, x_ref.shape[0] // BS, body, 0)


def prefix(x):
    return pl.pallas_call(
        prefix_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        compiler_params=pltpu.CompilerParams(),
    )(x)
'''


@pytest.mark.parametrize("first", ["", "    o_ref[pl.ds(0, BS)] = x_ref[pl.ds(0, BS)]\n\n"], ids=["no write before", "write before"])
def test_a_scan_through_memory_is_refused_for_its_dependence_without_promising_a_grid_axis(capsys, tmp_path, first):
    # Was: "the kernel writes a ref before the loop" with the first block written first, and
    # "not provably a block" / "different blocks within one iteration" without, each under a
    # message saying "the loop can become a grid axis".
    path = tmp_path / "prefix.py"
    path.write_text(PREFIX_SUM.format(first=first))
    _, doc, _ = (lambda c, o, e: (c, json.loads(o), e))(*run(capsys, "--format", "json", path))
    assert len(doc["findings"]) == 3
    for f in doc["findings"]:
        assert not f["fix"]["available"]
        assert "can become a grid axis" not in f["message"]
        assert f["fix"]["refusal"].startswith("iteration `i` reads `o_ref` at `(i - 1) * BS + BS - 1`")
        assert "outside the block it writes" in f["fix"]["refusal"] and "reads what another iteration wrote" in f["fix"]["refusal"]


ACCUMULATE = '''\
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

BK = 128


def sum_kernel(x_ref, o_ref):
    o_ref[...] = jnp.zeros_like(o_ref)

    def body(k, carry):
        o_ref[...] += x_ref[:, pl.ds(k * BK, BK)]
        return carry

    jax.lax.fori_loop(0, x_ref.shape[1] // BK, body, 0)


def colsum(x):
    return pl.pallas_call(
        sum_kernel,
        out_shape=jax.ShapeDtypeStruct((x.shape[0], BK), x.dtype),
        compiler_params=pltpu.CompilerParams(),
    )(x)
'''


def test_a_loop_accumulating_into_an_output_is_a_reduction(capsys, tmp_path):
    # Was PF101 "independent loop" whose fix said "lifted the reduction".
    path = tmp_path / "colsum.py"
    path.write_text(ACCUMULATE)
    _, doc, _ = (lambda c, o, e: (c, json.loads(o), e))(*run(capsys, "--format", "json", path))
    (f,) = doc["findings"]
    assert f["code"] == "PF102" and f["fix"]["codemod"] == "lift-reduction"
    assert "reduction loop" in f["message"]
    _, _, err = run(capsys, "--no-color", "--select", "PF102", path)
    assert "1 finding(s) in 1 file(s); 1 fixable with --apply once verified" in err
    _, _, err = run(capsys, "--no-color", "--select", "PF101", path)
    assert "0 finding(s)" in err


SEED_GATHER = Path(__file__).resolve().parent / "fixtures" / "gpu_interpret_policy" / "seed_gather.py"


def test_a_refusal_reads_the_same_before_and_after_apply(capsys, tmp_path):
    # The loop's lift was refused for "the rank of idx_ref" in the dry run (a question the start
    # fix, applied first, answers) and for GPU interpret mode after --apply: the dry run now
    # gives the reason that holds once --apply's rounds have run.
    path = tmp_path / "gather.py"
    path.write_text(SEED_GATHER.read_text())

    def o_ref_refusal() -> str:
        _, out, _ = run(capsys, "--format", "json", path)
        (f,) = [f for f in json.loads(out)["findings"] if f["message"].startswith("`o_ref`")]
        return f["fix"]["refusal"]

    before = o_ref_refusal()
    code, _, err = run(capsys, "--no-color", "--apply", "--no-verify", path)
    assert "fixed" in err and path.read_text() != SEED_GATHER.read_text()
    after = o_ref_refusal()
    assert before == after and "GPU interpret mode cannot run" in after


def test_a_traced_start_no_planner_reads_says_where_it_came_from_and_what_to_write():
    """PF109's refusal named nothing ("cannot tell where this traced start comes from"); it now
    says which value the start reads and which starts pallas-fix lifts (a while_loop counter: a
    fori_loop)."""
    from pallas_fix.engine import analyze_source
    from pallas_fix.rules.dynamic_index.pf109_traced_start import INVALID

    (finding,) = [f for f in analyze_source(INVALID[0], "k.py").findings if f.code == "PF109"]
    assert "parameter `carry` of `body`" in finding.refusal
    assert "`lax.while_loop` whose carry counts the steps is a `lax.fori_loop`" in finding.refusal


_SPLIT = '''import jax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

BM = 64
SB = 16


def kernel(x_ref, o_ref):
    @pl.loop(0, BM // SB)
    def _(j):
        o_ref[pl.ds(j * SB, SB), :] = x_ref[pl.ds(j * SB, SB), :] * 2.0


def scale(x):
    m, n = x.shape
    return pl.pallas_call(
        kernel,
        grid=(pl.cdiv(m, BM),),
        in_specs=[pl.BlockSpec((BM, n), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((BM, n), lambda i: (i, 0)),
        out_shape=jax.ShapeDtypeStruct((m, n), x.dtype),
        compiler_params=pltpu.CompilerParams(),
    )(x)
'''


def test_a_partial_existing_block_that_cannot_be_split_says_what_to_assert():
    from pallas_fix.core.config import Config
    from pallas_fix.engine import analyze_source

    refusals = [f.refusal for f in analyze_source(_SPLIT, "k.py", Config(lift_for_memory=True)).findings if f.refusal]
    assert any("a partial last block cannot be split; count the grid in whole blocks or assert "
               "`x.shape[0] % BM == 0` before the pallas_call" in r for r in refusals), refusals
