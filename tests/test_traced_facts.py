"""Facts from the examples (core.traced_facts): what tracing the original on its examples shows
and the source does not say (an operand's rank behind a factory), used only as a hypothesis: the
plan that rests on it is unsafe, so plain `--apply` writes it only once verified, and a fact that
any example contradicts is not used at all.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pallas_fix.core.config import Config
from pallas_fix.core.model import FixSafety
from pallas_fix.core.traced_facts import Seen, TracedFacts
from pallas_fix.engine import analyze_source, fix_source
from pallas_fix.verify.facts import facts_from_records

# The array reaches the pallas_call through a factory's inner function: no line of the source
# says its rank (`x.shape[0]` says only "at least 1"), and the kernel indexes one dim.
_SOURCE = '''import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

BS = 128


def _make_scale():
    def scale_kernel(x_ref, o_ref):
        i = pl.program_id(0)
        o_ref[pl.ds(i * BS, BS)] = x_ref[pl.ds(i * BS, BS)] * 2.0

    def run(x):
        return pl.pallas_call(
            scale_kernel,
            grid=(x.shape[0] // BS,),
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        )(x)

    return run


{example}def scale(x):
    return _make_scale()(x)
'''

_AFTER = '''import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

BS = 128


def _make_scale():
    def scale_kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2.0

    def run(x):
        if x.ndim != 1:
            raise ValueError(f"x.ndim ({{x.ndim}}) must equal 1")
        return pl.pallas_call(
            scale_kernel,
            grid=(x.shape[0] // BS,),
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            in_specs=[pl.BlockSpec((BS,), lambda i: (i,))],
            out_specs=pl.BlockSpec((BS,), lambda i: (i,)),
        )(x)

    return run


{example}def scale(x):
    return _make_scale()(x)
'''

_EXAMPLE = "# pallas-fix: example scale(f32[512])\n"


def _seen(example: str, shape: tuple, kernel: str = "scale_kernel") -> Seen:
    return Seen(example, kernel, 0, ((shape, "float32"),), ((shape, "float32"),))


def _findings(source: str, facts=None) -> list:
    return [f for f in analyze_source(source, "k.py", Config(traced_facts=facts)).findings if f.code == "PF103"]


# -- learning: what a fact is ---------------------------------------------------------------------
def test_a_rank_every_example_shows_is_a_fact_and_names_the_examples():
    facts = TracedFacts((_seen("scale(f32[512])", (512,)), _seen("scale(f32[256])", (256,))))
    assert facts.rank("scale_kernel", "in", 0, (0, 1, 1)) == (1, "`scale(f32[512])`, `scale(f32[256])`")
    assert facts.rank("scale_kernel", "out", 0, (0, 1, 1))[0] == 1


def test_no_fact_where_the_examples_disagree_the_kernel_was_not_reached_or_the_call_differs():
    facts = TracedFacts((_seen("scale(f32[512]) (synthesised)", (512,)), _seen("scale(f32[4, 512]) (recorded)", (4, 512))))
    rank, why = facts.rank("scale_kernel", "in", 0, (0, 1, 1))
    assert rank is None and "disagree" in why and "rank 2 on `scale(f32[4, 512]) (recorded)`" in why
    assert facts.rank("other_kernel", "in", 0, (0, 1, 1)) == (None, "no example reaches the kernel")
    assert facts.rank("scale_kernel", "in", 0, (0, 2, 1))[0] is None  # another form of the call


def test_the_workers_records_become_facts_and_an_untraced_example_contradicts_nothing():
    records = [{"type": "start"},
               {"type": "facts", "index": 0, "example": "scale(f32[512])",
                "calls": [{"kernel": "scale_kernel", "num_scalar_prefetch": 0, "operands": [[[512], "float32"]],
                           "results": [[[512], "float32"]]}]},
               {"type": "facts", "index": 1, "example": "scale(f32[3])", "error": "TypeError: ..."}]
    facts = facts_from_records(records)
    assert facts.seen == (_seen("scale(f32[512])", (512,)),)
    assert facts.untraced == ("scale(f32[3])",)


# -- planning: a hypothesis makes the plan unsafe ------------------------------------------------
def test_without_facts_the_rank_is_refused_saying_what_would_tell_it():
    reasons = [f.refusal for f in _findings(_SOURCE.format(example=_EXAMPLE))]
    assert reasons and all("cannot tell the rank of" in r and "give an example call" in r for r in reasons), reasons


def test_a_rank_from_the_trace_gives_an_unsafe_plan_that_names_the_fact():
    facts = TracedFacts((_seen("scale(f32[512])", (512,)),))
    found = _findings(_SOURCE.format(example=_EXAMPLE), facts)
    assert found and all(f.fixable and f.fix_safety is FixSafety.UNSAFE for f in found)
    assert all("has rank 1 on the examples (`scale(f32[512])`)" in f.plan.description for f in found)
    fixed = fix_source(_SOURCE.format(example=_EXAMPLE), "k.py", Config(traced_facts=facts), unsafe=True)
    assert fixed.source == _AFTER.format(example=_EXAMPLE)
    # Not a safe fix: without --unsafe-fixes (and without verification) nothing is written.
    assert not fix_source(_SOURCE.format(example=_EXAMPLE), "k.py", Config(traced_facts=facts)).changed


def test_the_rank_check_the_rewrite_writes_states_the_rank_for_later_analyses():
    """`if x.ndim != 1: raise` (and `assert x.ndim == 1`) before the call state the rank: a plan
    needs no fact from the examples there, and is safe."""
    for check in ("        if x.ndim != 1:\n            raise ValueError('1-D only')\n", "        assert x.ndim == 1\n"):
        source = _SOURCE.format(example=_EXAMPLE).replace("    def run(x):\n", "    def run(x):\n" + check.replace("        ", "        ", 1))
        found = _findings(source)
        assert found and all(f.fixable and f.fix_safety is FixSafety.SAFE for f in found), [f.refusal for f in found]


def test_the_rank_check_of_an_operand_passed_as_an_attribute_is_written_as_it_is_passed():
    """`)(leaf.x)`: the check reads `leaf.x.ndim` (it once wrote the attribute's head node, not its
    text, and the rewrite's statement did not parse)."""
    source = (_SOURCE.format(example=_EXAMPLE).replace("    def run(x):\n", "    def run(leaf):\n")
              .replace("x.shape[0] // BS", "leaf.x.shape[0] // BS").replace("ShapeDtypeStruct(x.shape, x.dtype)",
                                                                           "ShapeDtypeStruct(leaf.x.shape, leaf.x.dtype)")
              .replace("        )(x)\n", "        )(leaf.x)\n").replace("    return _make_scale()(x)\n",
                                                                         "    return _make_scale()(Leaf(x))\n"))
    source += "\n\nclass Leaf(NamedTuple):\n    x: jax.Array\n"
    source = source.replace("import jax\n", "from typing import NamedTuple\n\nimport jax\n", 1)
    fixed = fix_source(source, "k.py", Config(traced_facts=TracedFacts((_seen("scale(f32[512])", (512,)),))), unsafe=True)
    assert fixed.error is None and fixed.changed, fixed.error
    assert "        if leaf.x.ndim != 1:\n" in fixed.source, fixed.source


def test_trap_a_fact_the_synthesised_example_shows_and_the_recorded_one_breaks_is_not_used():
    facts = TracedFacts((_seen("scale(f32[512]) (synthesised from the code)", (512,)),
                         _seen("scale(f32[4, 512]) (recorded)", (4, 512))))
    reasons = [f.refusal for f in _findings(_SOURCE.format(example=""), facts)]
    assert reasons and all("the examples disagree" in r and "recorded" in r for r in reasons), reasons


def test_a_kernel_name_defined_twice_in_the_module_takes_no_fact():
    twice = _SOURCE.format(example=_EXAMPLE) + "\n\ndef scale_kernel(x_ref, o_ref):\n    o_ref[...] = x_ref[...]\n"
    reasons = [f.refusal for f in _findings(twice, TracedFacts((_seen("scale(f32[512])", (512,)),)))]
    assert reasons and all("names 2 functions" in r for r in reasons), reasons


# -- end to end: traced, planned, verified -----------------------------------------------------------
@pytest.mark.interp
def test_apply_traces_the_example_and_writes_the_verified_rewrite(tmp_path: Path):
    """The golden pair: `--apply` traces the example, lifts with the rank it showed, verifies the
    rewrite in the interpreters (its jaxpr keeps no dynamic slice) and writes it."""
    path = tmp_path / "k.py"
    path.write_text(_SOURCE.format(example=_EXAMPLE))
    run = subprocess.run([sys.executable, "-m", "pallas_fix", "--apply", "--format", "json", str(path)],
                         cwd=tmp_path, capture_output=True, text=True, timeout=600)
    out = run.stdout + run.stderr
    assert path.read_text() == _AFTER.format(example=_EXAMPLE), out
    verdicts = json.loads(run.stdout)["verification"]
    assert verdicts and all(v["status"] == "verified" for v in verdicts), out
    assert [(v["dynamic_slices_before"], v["dynamic_slices_after"]) for v in verdicts] == [(2, 0)], out


@pytest.mark.interp
def test_trap_end_to_end_two_examples_of_different_ranks_keep_the_file_unchanged(tmp_path: Path):
    """The original runs on a 1-D and on a 2-D call (its windows slice dim 0): the rank is no
    fact, so nothing is lifted, and the refusal names the example that breaks it."""
    path = tmp_path / "k.py"
    source = _SOURCE.format(example=_EXAMPLE + "# pallas-fix: example scale(f32[512, 4])\n")
    path.write_text(source)
    run = subprocess.run([sys.executable, "-m", "pallas_fix", "--apply", "--unsafe-fixes", str(path)],
                         cwd=tmp_path, capture_output=True, text=True, timeout=600)
    out = run.stdout + run.stderr
    assert path.read_text() == source, out
    assert "the examples disagree" in out and "rank 2 on `scale(f32[512, 4])" in out, out


@pytest.mark.interp
def test_trap_end_to_end_the_recorded_example_wins_over_the_synthesised_one(tmp_path: Path):
    """No example in the file: synthesis would build a 1-D call (the code reads one dim), the
    recorded call is 2-D. Facts come from the examples verification uses, the recorded one, so
    the rank-1 fact true only on the synthesised call is never used: the blocks are 2-D."""
    path = tmp_path / "k.py"
    path.write_text(_SOURCE.format(example=""))
    recorded = {"version": 1, "examples": {"k.py": ["scale(f32[512, 4])"]}}
    (tmp_path / "pallas-fix-examples.json").write_text(json.dumps(recorded))
    run = subprocess.run([sys.executable, "-m", "pallas_fix", "--apply", str(path)],
                         cwd=tmp_path, capture_output=True, text=True, timeout=600)
    out = run.stdout + run.stderr
    assert "in_specs=[pl.BlockSpec((BS, x.shape[1]), lambda i: (i, 0))]" in path.read_text(), out
    assert "has rank 2 on the examples (`scale(f32[512, 4]) (recorded" in out, out


# -- a factory that defines the kernel once per arm of a static `if` -------------------------------
# Each arm defines `scale_kernel` and a `run` whose pallas_call runs that arm's def; the arms take
# arrays of different ranks (the kernel text says neither). The trace names each def by its line.
_ARMS = '''import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

BS = 128


def _make_scale(flat):
    if flat:
        def scale_kernel(x_ref, o_ref):
            i = pl.program_id(0)
            o_ref[pl.ds(i * BS, BS)] = x_ref[pl.ds(i * BS, BS)] * 2.0

        def run(x):
            return pl.pallas_call(scale_kernel, grid=(x.shape[0] // BS,),
                                  out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
    else:
        def scale_kernel(x_ref, o_ref):
            i = pl.program_id(0)
            o_ref[pl.ds(i * BS, BS)] = x_ref[pl.ds(i * BS, BS)] * 3.0

        def run(x):
            return pl.pallas_call(scale_kernel, grid=(x.shape[0] // BS,),
                                  out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
    return run


# pallas-fix: example scale(f32[512], flat=True)
# pallas-fix: example scale(f32[512, 4], flat=False)
def scale(x, flat):
    return _make_scale(flat)(x)
'''
_FLAT_DEF, _TALL_DEF = (n for n, line in enumerate(_ARMS.splitlines(), 1) if "def scale_kernel" in line)


def _arm_seen(shape: tuple, nth) -> Seen:
    return Seen(f"scale(f32{list(shape)})", "scale_kernel", 0, ((shape, "float32"),), ((shape, "float32"),), nth)


def test_each_arms_def_takes_the_rank_its_own_traced_calls_show():
    facts = TracedFacts((_arm_seen((512,), 0), _arm_seen((512, 4), 1)))
    found = _findings(_ARMS, facts)
    assert len(found) == 4 and all(f.fixable and f.fix_safety is FixSafety.UNSAFE for f in found), [f.refusal for f in found]
    described = {f.span.line: f.plan.description for f in found}
    assert all("has rank 1 on the examples (`scale(f32[512])`)" in d for line, d in described.items() if line < _TALL_DEF)
    assert all("has rank 2 on the examples (`scale(f32[512, 4])`)" in d for line, d in described.items() if line > _TALL_DEF)
    fixed = fix_source(_ARMS, "k.py", Config(traced_facts=facts), unsafe=True).source
    assert "pl.BlockSpec((BS,), lambda i: (i,))" in fixed and "pl.BlockSpec((BS, x.shape[1]), lambda i: (i, 0))" in fixed


def test_trap_a_trace_that_names_no_def_line_gives_no_arm_a_fact():
    """Without the def each call ran, the two defs' calls are one kernel's: neither arm's rank is
    a fact."""
    facts = TracedFacts((_arm_seen((512,), None), _arm_seen((512, 4), None)))
    reasons = [f.refusal for f in _findings(_ARMS, facts)]
    assert len(reasons) == 4 and all("names 2 functions in the module" in r and "does not say which of its defs ran" in r
                                      for r in reasons), reasons
    # A def no traced call ran: that arm was never reached.
    facts = TracedFacts((_arm_seen((512,), 0),))
    reasons = {f.span.line: f.refusal for f in _findings(_ARMS, facts)}
    assert all(r is None for line, r in reasons.items() if line < _TALL_DEF), reasons
    assert all(f"for the one on line {_TALL_DEF}: no example reaches the kernel" in r
               for line, r in reasons.items() if line > _TALL_DEF), reasons


def test_the_def_line_the_worker_records_becomes_which_def_of_its_name_ran():
    """Lines move in the rewrite's later rounds (a rank check written above the first arm's call);
    which def of the name it is does not."""
    def record(line):
        return {"type": "facts", "index": 0, "example": "scale(f32[512])",
                "calls": [{"kernel": "scale_kernel", "line": line, "num_scalar_prefetch": 0,
                           "operands": [[[512], "float32"]], "results": [[[512], "float32"]]}]}
    assert facts_from_records([record(_TALL_DEF)], _ARMS).seen == (_arm_seen((512,), 1),)
    assert facts_from_records([record(_FLAT_DEF)], _ARMS).seen == (_arm_seen((512,), 0),)
    assert facts_from_records([record(_FLAT_DEF)]).seen == (_arm_seen((512,), None),)  # no source: no def
    assert facts_from_records([record(_FLAT_DEF + 1)], _ARMS).seen == (_arm_seen((512,), None),)


@pytest.mark.interp
def test_apply_lifts_each_arm_with_the_rank_its_examples_show(tmp_path: Path):
    """The golden pair: `--apply` traces both examples (one per arm), lifts each arm's def with its
    own rank, verifies the rewrite on both (no dynamic slice left) and writes it."""
    path = tmp_path / "k.py"
    path.write_text(_ARMS)
    run = subprocess.run([sys.executable, "-m", "pallas_fix", "--apply", "--format", "json", str(path)],
                         cwd=tmp_path, capture_output=True, text=True, timeout=600)
    out = run.stdout + run.stderr
    after = path.read_text()
    assert after.count("pl.BlockSpec((BS,), lambda i: (i,))") == 2, out
    assert after.count("pl.BlockSpec((BS, x.shape[1]), lambda i: (i, 0))") == 2, out
    assert "pl.ds(" not in after, out
    verdicts = json.loads(run.stdout)["verification"]
    assert verdicts and all(v["status"] == "verified" for v in verdicts), out
    assert all(v["dynamic_slices_after"] == 0 < v["dynamic_slices_before"] for v in verdicts), out


_TWO_ROUNDS = '''import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

BS = 128


def _make_scale():
    def scale_kernel(x_ref, o_ref):
        offsets = pl.program_id(0) * BS + jnp.arange(BS)
        plgpu.store(o_ref.at[offsets], plgpu.load(x_ref.at[offsets]) * 2.0)

    def run(x):
        return pl.pallas_call(
            scale_kernel,
            grid=(x.shape[0] // BS,),
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            compiler_params=plgpu.CompilerParams(num_warps=4),
        )(x)

    return run


# pallas-fix: example scale(f32[512])
def scale(x):
    return _make_scale()(x)
'''


@pytest.mark.interp
def test_apply_traces_the_examples_when_only_a_later_rounds_lift_needs_a_rank(tmp_path: Path):
    """The first round makes the integer-array windows contiguous (`pl.ds`); only the program-id
    lift after it needs the rank no line says. `--apply` traces the examples for that round too
    (it once looked only at the first round's refusals, and stopped after the contiguous windows)."""
    path = tmp_path / "k.py"
    path.write_text(_TWO_ROUNDS)
    run = subprocess.run([sys.executable, "-m", "pallas_fix", "--apply", "--format", "json", str(path)],
                         cwd=tmp_path, capture_output=True, text=True, timeout=600)
    out = run.stdout + run.stderr
    fixed = path.read_text()
    assert "in_specs=[pl.BlockSpec((BS,), lambda i: (i,))]" in fixed and "if x.ndim != 1:" in fixed, out
    verdicts = json.loads(run.stdout)["verification"]
    assert verdicts and all(v["status"] == "verified" for v in verdicts), out


# -- the source states the rank: no fact, no check -----------------------------------------------
@pytest.mark.parametrize("binding", ["x = v.reshape((-1,))", "x = v.reshape(-1)", "x = jnp.reshape(v, (v.size,))",
                                     "x = v.ravel()", "x = jnp.ravel(v)", "x = v.flatten()"])
def test_a_name_bound_once_to_a_literal_reshape_or_a_ravel_has_that_rank(binding: str):
    """`reshaped_mean = mean.reshape((-1,))` (JAX's layer-norm backward): one dim per item of the
    literal shape, so the plan needs no traced fact and the rewrite writes no rank check."""
    source = _SOURCE.format(example=_EXAMPLE).replace("    def run(x):\n", f"    def run(v):\n        {binding}\n")
    found = _findings(source)
    assert found and all(f.fixable and f.fix_safety is not FixSafety.UNSAFE for f in found), [f.refusal for f in found]
    fixed = fix_source(source, "k.py", unsafe=True).source
    assert "ndim" not in fixed and "in_specs=[pl.BlockSpec((BS,), lambda i: (i,))]" in fixed


@pytest.mark.parametrize("binding", ["x = v.reshape((*v.shape[:-1], -1))", "x = v.reshape(shape)",
                                     "x = v.reshape((-1,))\n        x = x.T"])
def test_a_reshape_the_source_does_not_spell_out_names_no_rank(binding: str):
    """A starred or named shape, or a name bound twice: the rank is still unknown."""
    source = _SOURCE.format(example=_EXAMPLE).replace("    def run(x):\n", f"    def run(v, shape=(-1,)):\n        {binding}\n")
    reasons = [f.refusal for f in _findings(source)]
    assert reasons and all("cannot tell the rank of" in r for r in reasons), reasons
