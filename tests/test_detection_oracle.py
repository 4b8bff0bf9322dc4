"""Static detection agrees with the fixtures' markers and with the jaxpr oracle, line for line."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernel_loading import FIXTURES, abstract_args, expected_markers, file_flags, load_module
from pallas_fix.engine import analyze_source

DETECT = sorted((FIXTURES / "detect").glob("*.py"))


def _static(path: Path, source: str) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for f in analyze_source(source, str(path)).findings:
        if f.code.startswith("PF1"):
            out.setdefault(f.span.line, []).append(f.code)
    return {k: sorted(v) for k, v in out.items()}


@pytest.mark.parametrize("path", DETECT, ids=lambda p: p.stem)
def test_static_detection_matches_markers(path: Path) -> None:
    source = path.read_text()
    assert _static(path, source) == expected_markers(source)


@pytest.mark.parametrize("path", DETECT, ids=lambda p: p.stem)
def test_static_lines_equal_oracle_lines(path: Path) -> None:
    from pallas_fix.verify.oracle import trace_report
    from pallas_fix.verify.example_sources import collect_examples

    source = path.read_text()
    reason = file_flags(source, "no-oracle")
    if reason is not None:
        pytest.skip(f"documented exception: {reason}")
    examples = collect_examples(path, source, pyproject=False)
    if "pallas_call" not in source:
        assert _static(path, source) == {}
        return
    assert examples, f"{path.name} has no example directive"
    module = load_module(path)
    oracle_lines: set[int] = set()
    for ex in examples:
        args, kwargs = abstract_args(ex)
        report = trace_report(getattr(module, ex.entry), *args, **kwargs)
        oracle_lines |= report.lines(str(path))
    assert set(_static(path, source)) == oracle_lines
