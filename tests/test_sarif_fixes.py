"""`--format sarif` is a valid SARIF 2.1.0 log whose fixable results carry their rewrite as SARIF
`fixes` (artifactChanges / replacements), checked against the schema's own definitions.

The schema: no Python package ships the SARIF 2.1.0 JSON schema, so tests/fixtures/sarif/ holds
the subset of its definitions pallas-fix writes, copied from the OASIS schema (its description
names the source); `jsonschema` (a dev extra) validates against it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jsonschema
import pytest

from pallas_fix.engine import fix_source
from pallas_fix.frontends.cli.app import main
from pallas_fix.frontends.lines import split_lines

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "tiled_kernels.py"  # four safe fixes and two unsafe ones (a reduction)
SCHEMA = json.loads((ROOT / "tests" / "fixtures" / "sarif" / "sarif-2.1.0-subset.schema.json").read_text())


def sarif(capsys, *args) -> dict:
    with pytest.raises(SystemExit):
        main(["--format", "sarif", *[str(a) for a in args]])
    return json.loads(capsys.readouterr().out)


def apply_by_offsets(text: str, replacements: list[dict]) -> str:
    """SARIF semantics: every deletedRegion refers to the unmodified text."""
    spans = sorted((r["deletedRegion"]["charOffset"], r["deletedRegion"]["charLength"], r.get("insertedContent", {}).get("text", ""))
                   for r in replacements)
    out, cursor = [], 0
    for offset, length, new in spans:
        assert offset >= cursor, "replacements overlap"
        out += [text[cursor:offset], new]
        cursor = offset + length
    return "".join(out + [text[cursor:]])


def offset_of(text: str, line: int, column: int) -> int:
    """The character offset of a 1-based (line, column) of `text`."""
    lines = split_lines(text)
    return sum(len(x) for x in lines[: line - 1]) + column - 1


@pytest.fixture()
def kernel(tmp_path) -> Path:
    path = tmp_path / EXAMPLE.name
    shutil.copy(EXAMPLE, path)
    return path


def test_the_log_is_valid_sarif_2_1_0(capsys, kernel):
    doc = sarif(capsys, kernel)
    jsonschema.Draft4Validator.check_schema(SCHEMA)
    jsonschema.Draft4Validator(SCHEMA).validate(doc)
    assert any("fixes" in r for r in doc["runs"][0]["results"])


def test_the_schema_subset_rejects_a_malformed_fix(capsys, kernel):
    # The check can fail: a replacement without its deletedRegion is no SARIF.
    doc = sarif(capsys, kernel)
    result = next(r for r in doc["runs"][0]["results"] if "fixes" in r)
    del result["fixes"][0]["artifactChanges"][0]["replacements"][0]["deletedRegion"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft4Validator(SCHEMA).validate(doc)


def test_each_safe_fix_rewrites_the_file_as_that_finding_alone_would(capsys, kernel):
    text = kernel.read_text()
    results = sarif(capsys, kernel)["runs"][0]["results"]
    fixed = [r for r in results if "fixes" in r]
    unsafe = [r for r in results if "fixes" not in r]
    assert len(fixed) == 4 and len(unsafe) == 2  # the reduction's fix is unsafe: offered only with --unsafe-fixes
    for r in fixed:
        (fix,) = r["fixes"]
        (change,) = fix["artifactChanges"]
        assert change["artifactLocation"] == r["locations"][0]["physicalLocation"]["artifactLocation"]
        region = r["locations"][0]["physicalLocation"]["region"]
        alone = fix_source(text, str(kernel), only={(region["startLine"], region["startColumn"] - 1)})
        assert apply_by_offsets(text, change["replacements"]) == alone.source != text
        assert fix["description"]["text"].endswith(alone.applied[0])
        for rep in change["replacements"]:  # the line/column form names the same region
            d = rep["deletedRegion"]
            assert offset_of(text, d["startLine"], d["startColumn"]) == d["charOffset"]
            assert offset_of(text, d["endLine"], d["endColumn"]) == d["charOffset"] + d["charLength"]


def test_unsafe_fixes_are_offered_with_unsafe_fixes_on(capsys, kernel):
    results = sarif(capsys, "--unsafe-fixes", kernel)["runs"][0]["results"]
    assert all("fixes" in r for r in results)
    assert sum("(unsafe fix)" in r["fixes"][0]["description"]["text"] for r in results) == 2
