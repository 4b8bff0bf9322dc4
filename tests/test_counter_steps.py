"""Step counters of a reduction's carry (rewrite.reduction.carry_counters): the step a body adds, read from
its code. A counter stepped by `n += 1` before the return must not read as one that never steps
(its final value would be its start: `acc / n` after the loop would divide by zero)."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from pallas_fix.rewrite.reduction.carry_counters import counter_step


def _static(expr: cst.BaseExpression):
    """What a static expression is, as the kernel's environment would say (`BS = 16`)."""
    if isinstance(expr, cst.Integer):
        return int(expr.value)
    return 16 if isinstance(expr, cst.Name) and expr.value == "BS" else None


def _step(body: str):
    fn = cst.parse_module(textwrap.dedent(body)).body[0]
    returned = fn.body.body[-1].body[0].value
    if isinstance(returned, cst.Tuple):
        returned = returned.elements[-1].value  # the counter is the carry's last leaf here
    return counter_step(fn, "n", returned, _static)[0]


@pytest.mark.parametrize(
    "body, expected",
    [
        ("def body(i, n):\n    return n + 1\n", 1),
        ("def body(i, n):\n    n += 1\n    return n\n", 1),
        ("def body(i, n):\n    n = n + 2\n    return n\n", 2),
        ("def body(i, n):\n    return n + BS\n", 16),  # a static step spelled by name
        ("def body(i, carry):\n    acc, n = carry\n    n += 1\n    return acc, n\n", 1),
        ("def body(i, carry):\n    acc, n = carry\n    return acc, n + BS\n", 16),
        ("def body(i, n):\n    return n\n", 0),
        # stepped twice, or under a branch: not a counter pallas-fix reads
        ("def body(i, n):\n    n += 1\n    n += 1\n    return n\n", None),
        ("def body(i, n):\n    if i > 2:\n        n += 1\n    return n\n", None),
    ],
)
def test_counter_step(body, expected):
    assert _step(body) == expected
