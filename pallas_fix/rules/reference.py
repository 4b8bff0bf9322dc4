"""The rule reference, docs/rules.md, written from the rule modules themselves.

Every finding links to `docs/rules.md#<code>` (SARIF `helpUri`, the language server's
`codeDescription`), so the page is generated from the same docstrings and examples that
`pallas-fix explain` prints; tests/test_rule_reference.py checks that the checked-in page is what
this module writes and that every link has its anchor. Regenerate with

    python -m pallas_fix.rules.reference > docs/rules.md
"""

from __future__ import annotations

from pallas_fix.rules.registry import RULES
from pallas_fix.rules.rule import Rule

_HEAD = """# pallas-fix rules

Generated from the rule modules in `pallas_fix/rules/` by `python -m pallas_fix.rules.reference`;
do not edit by hand. `pallas-fix explain CODE` prints the same text.

A dynamic index gets exactly one PF1xx code (the first rule, in precedence order, that claims it).
PF2xx codes fire only for modules that use GPU interpret mode, or with `--target gpu-interpret`.
PF3xx codes are about what compiles on the chip: PF301 is reported by verification (`pallas-fix
verify`, `--apply`) on the example call it ran, PF302 by the static check of TPU kernels.
"""


def anchor(code: str) -> str:
    """The fragment a finding's documentation link ends with."""
    return code.lower()


def render_reference() -> str:
    rules = sorted(RULES.values(), key=lambda r: r.code)
    table = ["| code | name | severity | summary |", "| --- | --- | --- | --- |"]
    table += [f"| [{r.code}](#{anchor(r.code)}) | {r.name} | {r.severity} | {_cell(r.summary)} |" for r in rules]
    return "\n".join([_HEAD, *table, "", *(_section(r) for r in rules)]).rstrip() + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _section(rule: Rule) -> str:
    lines = [f'<a id="{anchor(rule.code)}"></a>', f"## {rule.code} {rule.name} ({rule.severity})", "", "```text", rule.doc, "```", ""]
    for title, examples in ((f"Reported as {rule.code}", rule.invalid), ("Not reported", rule.valid)):
        for example in examples:
            lines += [f"{title}:", "", "```python", example.strip("\n"), "```", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    print(render_reference(), end="")
