"""The red-team corpus (tests/fixtures/traps/): kernels that look ordinary but hide a trap for a
naive rewrite, written by a session that never read the planners.

What `--apply` writes without any example (no comment, nothing synthesised) is the safe fixes
alone, unverified. Every trap those fixes change is run here, original against rewrite, on the
trap's own example calls (`# trap-example`, `# trap-ragged-example`, `# trap-check-example`):
the outputs must agree. With examples, verification is the guard; benchmarks/bench_traps.py runs
every mode of the CLI (plain, unsafe, example, gpu) with its own, independent comparison.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pallas_fix.core.config import Config
from pallas_fix.core.example_parser import parse_example
from pallas_fix.engine import fix_source
from pallas_fix.verify.examples.module_constants import safe_module_constants
from pallas_fix.verify.runner import verify_sources

TRAPS = sorted((Path(__file__).resolve().parent / "fixtures" / "traps").glob("*.py"))
_HEADER = re.compile(r"^# trap-(?:example|ragged-example|check-example): (.+)$", re.M)


def trap_examples(source: str, path: Path) -> list:
    constants = safe_module_constants(source)
    return [parse_example(m.group(1).strip(), constants=constants, origin=f"{path.name} header")
            for m in _HEADER.finditer(source)]


def test_the_corpus_is_there_and_every_trap_declares_its_class_and_example():
    assert len(TRAPS) >= 45
    for path in TRAPS:
        source = path.read_text()
        assert re.search(r"^# trap: \S+", source, re.M), path.name
        assert trap_examples(source, path), path.name


@pytest.mark.interp
@pytest.mark.parametrize("path", TRAPS, ids=lambda p: p.stem)
def test_unverified_safe_fixes_keep_the_traps_outputs(path: Path):
    source = path.read_text()
    fixed = fix_source(source, str(path), Config())
    assert fixed.error is None, fixed.error
    if not fixed.changed:
        return  # refused: nothing is written
    verdicts = verify_sources(source, fixed.source, trap_examples(source, path), path=str(path), timeout_s=240,
                              gpu_interpret="InterpretGPUParams" in source)
    bad = [f"{v.status} on {v.example or v.entry}: {v.message}" for v in verdicts if v.status not in ("verified", "unverified")]
    assert not bad, "\n".join([*fixed.applied, *bad])


GPU_TRAPS = [p for p in TRAPS if re.search(r"^# trap: (unroll|hoisted-start)\b", p.read_text(), re.M)]


@pytest.mark.interp
@pytest.mark.parametrize("path", GPU_TRAPS, ids=lambda p: p.stem)
def test_unverified_gpu_interpret_target_fixes_keep_the_traps_outputs(path: Path):
    source = path.read_text()
    fixed = fix_source(source, str(path), Config(target="gpu-interpret"))
    assert fixed.error is None, fixed.error
    if not fixed.changed:
        return
    verdicts = verify_sources(source, fixed.source, trap_examples(source, path), path=str(path), timeout_s=240,
                              gpu_interpret=True)
    bad = [f"{v.status} on {v.example or v.entry}: {v.message}" for v in verdicts if v.status not in ("verified", "unverified")]
    assert not bad, "\n".join([*fixed.applied, *bad])


REBOUND_TRAPS = [p for p in TRAPS if re.search(r"^# trap: rebound-operand\b", p.read_text(), re.M)]


@pytest.mark.interp
@pytest.mark.parametrize("path", REBOUND_TRAPS, ids=lambda p: p.stem)
def test_unverified_unsafe_fixes_keep_the_rebound_traps_outputs(path: Path):
    """A wrapper that rebinds an operand or a size between the pallas_call and what the kernel
    gets (`x = jnp.pad(...)` after `call = pl.pallas_call(...)`): R2 and R6 are unsafe fixes, so
    the plain run above never writes them; here every plan is written unverified, and each
    must still agree with the original on the trap's padded width."""
    source = path.read_text()
    fixed = fix_source(source, str(path), Config(unsafe_fixes=True))
    assert fixed.error is None, fixed.error
    if not fixed.changed:
        return
    verdicts = verify_sources(source, fixed.source, trap_examples(source, path), path=str(path), timeout_s=240)
    bad = [f"{v.status} on {v.example or v.entry}: {v.message}" for v in verdicts if v.status not in ("verified", "unverified")]
    assert not bad, "\n".join([*fixed.applied, *bad])


def test_rebound_traps_say_which_binding_stops_the_rewrite():
    """The refused plans name the rebinding, so that the user knows what to move."""
    from pallas_fix.engine import analyze_source

    assert len(REBOUND_TRAPS) >= 5
    for path in REBOUND_TRAPS:
        findings = analyze_source(path.read_text(), str(path), Config(unsafe_fixes=True)).findings
        reasons = [f.refusal for f in findings if f.refusal]
        assert any(re.search(r"is rebound at line \d+", r) for r in reasons), (path.name, reasons)
