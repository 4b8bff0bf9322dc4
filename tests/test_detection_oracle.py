"""Static detection agrees with the fixtures' markers and with the jaxpr oracle, line for line:
the dynamic windows (findings), and the scalar integer indices (`x_ref[r, :]`, `idx_ref[b]`,
`buf.at[slot]`), which the detector lists whether or not they are findings."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernel_loading import FIXTURES, abstract_args, expected_markers, file_flags, load_module
from pallas_fix.analysis.accesses import scalar_index_dims
from pallas_fix.analysis.context import own_nodes
from pallas_fix.core.plans import use_key
from pallas_fix.engine import analyze_source, mentions_pallas

DETECT = sorted((FIXTURES / "detect").glob("*.py"))


def _static(path: Path, source: str) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for f in analyze_source(source, str(path)).findings:
        if f.code.startswith("PF1"):
            out.setdefault(f.span.line, []).append(f.code)
    return {k: sorted(v) for k, v in out.items()}


def _static_window_lines(path: Path, source: str) -> set[int]:
    """Lines of the findings on dynamic windows (every PF1xx finding but scalar indices')."""
    result = analyze_source(source, str(path))
    scalar = {use_key(u) for u in result.uses if u.kind == "scalar"}
    return {f.span.line for f in result.findings if f.code.startswith("PF1") and f.anchor not in scalar}


def _static_scalar_lines(path: Path, source: str) -> set[int]:
    """Lines of every traced integer scalar index of a ref in the analysed kernels."""
    analysis = analyze_source(source, str(path)).analysis
    if analysis.detection is None:
        return set()
    ctx = analysis.ctx
    return {
        ctx.span(node).line
        for fn, env in analysis.detection.envs.items()
        for node in own_nodes(fn.body)
        if type(node).__name__ == "Subscript" and scalar_index_dims(node, env)
    }


def _oracle(path: Path, source: str):
    """(window lines, scalar lines) the jaxpr oracle finds in `path`, or None without a kernel."""
    from pallas_fix.verify.judge.oracle import trace_report
    from pallas_fix.verify.judge.oracle_report import _same_file
    from pallas_fix.verify.examples.sources import collect_examples

    examples = collect_examples(path, source, pyproject=False)
    if not mentions_pallas(source):
        return None
    assert examples, f"{path.name} has no example directive"
    module = load_module(path)
    windows: set[int] = set()
    scalars: set[int] = set()
    for ex in examples:
        args, kwargs = abstract_args(ex)
        report = trace_report(getattr(module, ex.entry), *args, **kwargs)
        windows |= report.lines(str(path))
        scalars |= {a.line for a in report.scalars() if a.line is not None and _same_file(a.file, str(path))}
    return windows, scalars


@pytest.mark.parametrize("path", DETECT, ids=lambda p: p.stem)
def test_static_detection_matches_markers(path: Path) -> None:
    source = path.read_text()
    assert _static(path, source) == expected_markers(source)


def _oracle_or_skip(path: Path):
    source = path.read_text()
    reason = file_flags(source, "no-oracle")
    if reason is not None:
        pytest.skip(f"documented exception: {reason}")
    return source, _oracle(path, source)


@pytest.mark.parametrize("path", DETECT, ids=lambda p: p.stem)
def test_static_lines_equal_oracle_lines(path: Path) -> None:
    source, oracle = _oracle_or_skip(path)
    if oracle is None:
        assert _static(path, source) == {}
        return
    assert _static_window_lines(path, source) == oracle[0]


@pytest.mark.parametrize("path", DETECT, ids=lambda p: p.stem)
def test_static_scalar_lines_equal_oracle_scalar_lines(path: Path) -> None:
    source, oracle = _oracle_or_skip(path)
    if oracle is None:
        assert _static_scalar_lines(path, source) == set()
        return
    assert _static_scalar_lines(path, source) == oracle[1]
