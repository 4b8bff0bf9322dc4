"""docs/rules.md is generated from the rule modules, and every documentation link resolves."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pallas_fix.frontends.cli.app import main
from pallas_fix.output.common import DOCS_URL, rule_url
from pallas_fix.rules.reference import render_reference
from pallas_fix.rules.registry import RULES

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "rules.md"
EXAMPLE = ROOT / "examples" / "tiled_kernels.py"


def anchors(markdown: str) -> set[str]:
    return set(re.findall(r'<a id="([^"]+)"></a>', markdown))


def test_the_checked_in_reference_is_what_the_rule_modules_say():
    assert PAGE.read_text(encoding="utf-8") == render_reference(), (
        "docs/rules.md is stale: run `python -m pallas_fix.rules.reference > docs/rules.md`"
    )


def test_every_rule_link_points_into_the_repository_at_an_anchor():
    path, _, fragment = DOCS_URL.partition("#")
    assert fragment == "{code}"
    in_repo = path.split("/blob/main/", 1)[1]
    assert (ROOT / in_repo) == PAGE
    page_anchors = anchors(PAGE.read_text(encoding="utf-8"))
    for code in RULES:
        assert rule_url(code).rsplit("#", 1)[1] in page_anchors, code


def test_sarif_help_links_resolve(capsys):
    with pytest.raises(SystemExit):
        main(["--format", "sarif", str(EXAMPLE)])
    sarif = json.loads(capsys.readouterr().out)
    rules = sarif["runs"][0]["tool"]["driver"]["rules"]
    assert rules
    page_anchors = anchors(PAGE.read_text(encoding="utf-8"))
    for rule in rules:
        assert rule["helpUri"].rsplit("#", 1)[1] in page_anchors
