"""What a rule is: its code, name, severity, documentation, check and code examples.

Each rule lives in its own module (pf101_independent_loop_slice.py, ...) whose docstring is the
rule's documentation (`pallas-fix explain CODE`, SARIF, LSP hover) and which ends with a `RULE`.
Its VALID and INVALID examples are small complete kernel modules: tests/test_rule_examples.py runs
each through the engine, and `pallas-fix explain` prints them after the documentation. An INVALID
example marks each line the rule reports with `# expect: CODE`.
"""

from __future__ import annotations

import inspect
import re
import textwrap
from dataclasses import dataclass
from typing import Callable, Optional

from pallas_fix.analysis.loops.windows import Window
from pallas_fix.core.model import IndexUse, Origin

# PF1xx checks return the finding's message, or None when the rule does not claim the index.
IndexCheck = Callable[[IndexUse, Window], Optional[str]]

_EXPECT = re.compile(r"#\s*expect:\s*((?:PF\d{3}\s*)+)")


@dataclass(frozen=True)
class Rule:
    code: str
    name: str
    severity: str
    check: IndexCheck
    doc: str
    valid: tuple[str, ...] = ()
    invalid: tuple[str, ...] = ()
    # "analysis": the engine reports it from the source; "verification": verification reports it
    # from what it traced on an example (PF3xx), so its examples carry an example directive.
    stage: str = "analysis"
    # The closing clauses of its messages that promise a fix ("the loop can become a grid
    # axis"): a finding with no fix is reported without them (`unpromised`).
    promises: tuple[str, ...] = ()

    def unpromised(self, message: str) -> str:
        """`message` without the clause that promises a fix, for a finding that has none."""
        for promise in self.promises:
            if message.endswith(f"; {promise}"):
                return message[: -len(promise) - 2]
        return message

    @property
    def summary(self) -> str:
        return self.doc.splitlines()[0] if self.doc else self.name

    def examples_text(self) -> str:
        """The "Examples" section `pallas-fix explain` prints after the documentation."""
        parts = ["Examples:"]
        for title, examples in ((f"Reported as {self.code}", self.invalid), ("Not reported", self.valid)):
            for example in examples:
                parts.append(f"\n    {title}:\n\n" + textwrap.indent(example.strip("\n"), " " * 8))
        return "\n".join(parts)


Edit = tuple[str, str]  # (old, new) text


def make_rule(module_doc: Optional[str], code: str, name: str, check: IndexCheck, *, severity: str = "warning",
              valid: tuple[str, ...] = (), invalid: tuple[str, ...] = (), fix: tuple[Edit, ...] = (),
              stage: str = "analysis", promises: tuple[str, ...] = ()) -> Rule:
    """A rule documented by its module's docstring (`__doc__`). `fix` edits the first INVALID
    example into the first VALID one, so that the two show exactly what changes."""
    if fix:
        valid = (fixed(invalid[0], fix),) + valid
    return Rule(code, name, severity, check, inspect.cleandoc(module_doc or ""), valid, invalid, stage, promises)


def claims_origin(origin: Origin, message: Callable[[IndexUse], str]) -> IndexCheck:
    """The check of a rule that claims every index whose start has `origin`."""

    def check(use: IndexUse, window: Window) -> Optional[str]:
        return message(use) if use.provenance.origin is origin else None

    return check


def claims_no_index(use: IndexUse, window: Window) -> Optional[str]:
    """The index check of the PF2xx rules: a kernel, call site or BlockSpec is at fault, not an index."""
    return None


def start_text(use: IndexUse) -> str:
    """The start of a dynamic index as a message quotes it."""
    if use.start is None:
        return "index"
    return f"`{use.env.ctx.code(use.start)}`"  # type: ignore[attr-defined]


def fixed(example: str, edits: tuple[Edit, ...]) -> str:
    """`example` with each (old, new) edit made; each `old` must occur once."""
    for old, new in edits:
        if example.count(old) != 1:
            raise ValueError(f"{old!r} occurs {example.count(old)} times in the example")
        example = example.replace(old, new)
    return example


def expected_lines(example: str, code: str) -> list[int]:
    """The 1-based lines of `example` marked `# expect: CODE`."""
    return [n for n, line in enumerate(example.splitlines(), 1) if (m := _EXPECT.search(line)) and code in m.group(1).split()]
