"""Every rule's VALID and INVALID examples, run through the engine: the examples are the rules'
tests as well as their documentation (`pallas-fix explain CODE` prints them).

An INVALID example is reported with the rule's code on exactly the lines it marks
`# expect: CODE`; a VALID example gets no finding of that code.
"""

from __future__ import annotations

import pytest

from pallas_fix.engine import analyze_source
from pallas_fix.rules.registry import RULES
from pallas_fix.rules.rule import expected_lines

CASES = [
    pytest.param(rule.code, kind, example, id=f"{rule.code}-{kind}-{n}")
    for rule in RULES.values() if rule.stage == "analysis"  # verification's own: tests/test_footprint.py
    for kind, examples in (("invalid", rule.invalid), ("valid", rule.valid))
    for n, example in enumerate(examples)
]


def reported_lines(example: str, code: str) -> list[int]:
    findings = analyze_source(example, f"{code.lower()}_example.py").findings
    return sorted({f.span.line for f in findings if f.code == code})


@pytest.mark.parametrize("code, kind, example", CASES)
def test_rule_example(code, kind, example):
    marked = expected_lines(example, code)
    if kind == "invalid":
        assert marked, "an INVALID example marks the lines it is reported on"
        assert reported_lines(example, code) == marked
    else:
        assert not marked
        assert reported_lines(example, code) == []


@pytest.mark.parametrize("code", sorted(RULES))
def test_every_rule_has_examples(code):
    assert RULES[code].invalid and RULES[code].valid
