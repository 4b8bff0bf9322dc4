"""The command line as a user meets it: output formats, exit codes, file selection, suppressions,
`explain`, rule filters and workers.

Most tests call `pallas_fix.cli.main` in this process (fast, and capsys sees both streams); the
console-script tests start the installed `pallas-fix` the way a shell or CI does.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from apply_support import KERNEL, planner  # noqa: F401  (planner is a fixture)
from kernel_loading import FIXTURES, expected_markers
from pallas_fix.frontends.cli.app import main
from pallas_fix.rules.registry import RULES

DETECT = FIXTURES / "detect"
ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "tiled_kernels.py"
TANH = DETECT / "tiled_tanh_fori.py"  # two PF101, on lines marked `# expect: PF101`
CLEAN = DETECT / "clean_blockspec_matmul.py"  # a kernel with nothing to find
NOT_A_KERNEL = DETECT / "not_a_kernel.py"
FINDING_LINE = re.compile(r"^(?P<path>\S+?):(?P<line>\d+):(?P<col>\d+): (?P<code>PF\d{3}) ", re.M)


def run(capsys, *args) -> tuple[int, str, str]:
    """`pallas-fix ARGS` in this process: (exit status, stdout, stderr)."""
    with pytest.raises(SystemExit) as info:
        main([str(a) for a in args])
    out, err = capsys.readouterr()
    code = info.value.code
    return (0 if code is None else int(code)), out, err


def run_json(capsys, *args) -> tuple[int, dict, str]:
    code, out, err = run(capsys, "--format", "json", *args)
    return code, json.loads(out), err


def copy_fixture(src: Path, folder: Path, name: str | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    dst = folder / (name or src.name)
    shutil.copyfile(src, dst)
    return dst


def expected(path: Path) -> list[tuple[int, str]]:
    """(line, code) pairs the fixture's `# expect:` marks call for."""
    return sorted((line, code) for line, codes in expected_markers(path.read_text()).items() for code in codes)


def console_script() -> list[str]:
    exe = Path(sys.executable).with_name("pallas-fix")
    assert exe.exists(), f"the pallas-fix console script is not installed beside {sys.executable}"
    return [str(exe)]


# -- output formats --------------------------------------------------------------------------------
def test_json_has_one_entry_per_finding_with_place_code_provenance_and_fix(capsys, tmp_path):
    path = copy_fixture(TANH, tmp_path)
    code, doc, _ = run_json(capsys, path)
    assert code == 1
    assert isinstance(doc, dict) and isinstance(doc["findings"], list)
    findings = doc["findings"]
    assert sorted((f["line"], f["code"]) for f in findings) == expected(TANH)
    lines = path.read_text().splitlines()
    for f in findings:
        assert f["path"] == str(path)
        # Columns are 1-based and point at the subscripted ref.
        assert lines[f["line"] - 1][f["column"] - 1 :].startswith(("x_ref[", "o_ref["))
        assert f["message"] and "fori_loop" in f["provenance"]
        assert f["origin"] == "loop"
        assert isinstance(f["fix"]["available"], bool)
        if not f["fix"]["available"]:
            assert f["fix"]["refusal"], "a finding without a fix must say why"


def test_json_marks_the_fixable_finding_and_names_its_codemod(capsys, tmp_path, planner):
    path = tmp_path / "pick.py"
    path.write_text(KERNEL)
    code, doc, _ = run_json(capsys, path)
    assert code == 1
    [finding] = doc["findings"]
    assert finding["code"] == "PF104"
    assert finding["fix"] == {**finding["fix"], "available": True, "safety": "safe"}
    assert finding["fix"]["codemod"]
    assert path.read_text() == KERNEL, "checking must never write"


def test_text_shows_each_finding_its_provenance_and_the_proposed_diff(capsys, tmp_path, planner):
    path = tmp_path / "pick.py"
    path.write_text(KERNEL)
    code, out, err = run(capsys, path, "--no-color")
    assert code == 1
    assert [m["code"] for m in FINDING_LINE.finditer(out)] == ["PF104"]
    assert "[*]" in out, "a safe fix is marked in the finding line"
    assert "start comes from" in out
    assert f"--- a/{path}" in out and f"+++ b/{path}" in out
    assert re.search(r"^-\s+third = jnp\.int32\(3\) \* BS$", out, re.M)
    assert re.search(r"^\+\s+third = 3 \* BS$", out, re.M)
    assert "1 fixable with --apply" in err
    assert path.read_text() == KERNEL


def test_diff_option_prints_only_the_diff(capsys, tmp_path, planner):
    path = tmp_path / "pick.py"
    path.write_text(KERNEL)
    code, out, _ = run(capsys, path, "--diff", "--no-color")
    assert code == 1
    assert out.startswith(f"--- a/{path}")
    assert not FINDING_LINE.search(out)


def _check_sarif(doc: dict) -> None:
    """The parts of the SARIF 2.1.0 schema that code-scanning consumers rely on."""
    assert doc["version"] == "2.1.0"
    assert "sarif-2.1.0" in doc["$schema"] or "sarif-schema-2.1.0" in doc["$schema"]
    assert isinstance(doc["runs"], list) and len(doc["runs"]) == 1
    run_ = doc["runs"][0]
    driver = run_["tool"]["driver"]
    assert driver["name"] == "pallas-fix" and isinstance(driver.get("version"), str)
    rules = driver["rules"]
    ids = [r["id"] for r in rules]
    assert len(ids) == len(set(ids)), "rule ids must be unique"
    for r in rules:
        assert r["shortDescription"]["text"] and r["fullDescription"]["text"]
        assert r["defaultConfiguration"]["level"] in {"none", "note", "warning", "error"}
    for res in run_["results"]:
        assert res["ruleId"] in ids
        if "ruleIndex" in res:
            assert rules[res["ruleIndex"]]["id"] == res["ruleId"]
        assert res["level"] in {"none", "note", "warning", "error"}
        assert res["message"]["text"]
        assert res["locations"], "every result needs a location"
        for loc in res["locations"]:
            phys = loc["physicalLocation"]
            assert phys["artifactLocation"]["uri"]
            region = phys["region"]
            assert region["startLine"] >= 1 and region["startColumn"] >= 1
            assert (region["endLine"], region["endColumn"]) >= (region["startLine"], region["startColumn"])
        if "properties" in res:
            assert isinstance(res["properties"], dict)


def test_sarif_is_sarif_2_1_0_with_one_result_per_finding(capsys, tmp_path):
    path = copy_fixture(TANH, tmp_path)
    code, out, _ = run(capsys, "--format", "sarif", path)
    assert code == 1
    doc = json.loads(out)
    _check_sarif(doc)
    results = doc["runs"][0]["results"]
    got = sorted((r["locations"][0]["physicalLocation"]["region"]["startLine"], r["ruleId"]) for r in results)
    assert got == expected(TANH)
    assert {r["id"] for r in doc["runs"][0]["tool"]["driver"]["rules"]} >= set(RULES)


def test_sarif_uris_are_uris(capsys, tmp_path):
    folder = tmp_path / "my kernels"
    path = copy_fixture(TANH, folder, "50%_tanh.py")
    _, out, _ = run(capsys, "--format", "sarif", path)
    uris = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in json.loads(out)["runs"][0]["results"]}
    assert uris == {path.as_uri()}, "spaces and % must be percent-encoded; absolute paths are file: URIs"


def test_sarif_relative_paths_stay_relative(capsys, tmp_path, monkeypatch):
    copy_fixture(TANH, tmp_path / "sub dir")
    monkeypatch.chdir(tmp_path)
    _, out, _ = run(capsys, "--format", "sarif", "sub dir")
    uris = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in json.loads(out)["runs"][0]["results"]}
    assert uris == {"sub%20dir/tiled_tanh_fori.py"}


def test_sarif_without_findings_is_still_a_valid_log(capsys):
    code, out, _ = run(capsys, "--format", "sarif", CLEAN)
    assert code == 0
    doc = json.loads(out)
    _check_sarif(doc)
    assert doc["runs"][0]["results"] == []


GH_LINE = re.compile(
    r"^::(?P<level>warning|error) file=(?P<file>[^,]+),line=(?P<line>\d+),col=(?P<col>\d+),"
    r"endLine=(?P<end>\d+),title=(?P<title>PF\d{3})::(?P<msg>.+)$"
)


def test_github_format_is_one_workflow_command_per_finding(capsys, tmp_path):
    path = copy_fixture(TANH, tmp_path)
    code, out, _ = run(capsys, "--format", "github", path)
    assert code == 1
    lines = out.splitlines()
    matches = [GH_LINE.match(line) for line in lines]
    assert all(matches), lines
    assert sorted((int(m["line"]), m["title"]) for m in matches) == expected(TANH)
    for m in matches:
        assert m["file"] == str(path)
        assert m["msg"].startswith(m["title"] + " ")


def test_github_format_escapes_commas_and_colons_in_the_file_name(capsys, tmp_path):
    path = copy_fixture(TANH, tmp_path / "a,b:c")
    _, out, _ = run(capsys, "--format", "github", path)
    escaped = str(path).replace("%", "%25").replace(",", "%2C").replace(":", "%3A")
    assert out.splitlines() and all(f"file={escaped},line=" in line for line in out.splitlines())


# -- exit codes ------------------------------------------------------------------------------------
def test_exit_0_for_a_clean_kernel(capsys):
    code, out, err = run(capsys, CLEAN)
    assert code == 0, err
    assert not FINDING_LINE.search(out)
    assert "0 finding(s) in 1 file(s)" in err


def test_exit_1_when_findings_remain(capsys):
    code, out, _ = run(capsys, TANH)
    assert code == 1
    assert len(FINDING_LINE.findall(out)) == len(expected(TANH))


@pytest.mark.parametrize(
    "args, message",
    [
        (["--backend", "cuda", str(TANH)], "backend"),
        (["--target", "fpga", str(TANH)], "target"),
        (["--format", "xml", str(TANH)], "format"),
        (["--no-such-option", str(TANH)], "no-such-option"),
        ([], "Missing argument"),
    ],
)
def test_exit_2_for_usage_errors(capsys, args, message):
    code, out, err = run(capsys, *args)
    assert code == 2
    assert message in err
    assert not FINDING_LINE.search(out), "nothing is analysed after a usage error"


def test_exit_2_for_a_missing_path_while_the_other_paths_are_checked(capsys, tmp_path):
    missing = tmp_path / "nope.py"
    code, out, err = run(capsys, missing, TANH)
    assert code == 2
    assert f"{missing}: no such file or directory" in err
    assert len(FINDING_LINE.findall(out)) == len(expected(TANH))


def _broken_kernel(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "broken.py"
    path.write_text("from jax.experimental import pallas as pl\n\n\ndef kernel(x_ref, o_ref:\n    pl.pallas_call\n")
    return path


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_a_syntax_error_is_exit_2_naming_the_file_and_the_other_files_are_still_reported(capsys, tmp_path, fmt):
    broken = _broken_kernel(tmp_path)
    good = copy_fixture(TANH, tmp_path, "z_good.py")  # sorts after broken.py
    code, out, err = run(capsys, "--format", fmt, tmp_path)
    assert code == 2
    assert re.search(rf"error.*{re.escape(str(broken))}.*syntax error", err), err
    if fmt == "json":
        paths = {f["path"] for f in json.loads(out)["findings"]}
    else:
        paths = {m["path"] for m in FINDING_LINE.finditer(out)}
    assert paths == {str(good)}


def test_brackets_in_paths_and_messages_are_printed_as_they_are(capsys, tmp_path):
    """stderr goes through rich: `[/x]` in a path must not be read as a closing markup tag."""
    broken = _broken_kernel(tmp_path / "[")
    broken = broken.rename(broken.with_name("x].py"))
    styled = copy_fixture(TANH, tmp_path / "[bold]")
    code, out, err = run(capsys, tmp_path)
    assert code == 2
    assert f"{broken}: syntax error" in err
    assert {m["path"] for m in FINDING_LINE.finditer(out)} == {str(styled)}


# -- suppressions ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "comment, suppressed",
    [
        ("# pallas-fix: ignore[PF101]", True),
        ("# pallas-fix: ignore", True),
        ("# pallas-fix: ignore[PF103, PF101]", True),
        ("# pallas-fix: ignore[pf101]", True),
        ("#pallas-fix:ignore[PF101]", True),
        ("# pallas-fix: ignore[PF103]", False),
        ("# pallas-fix: example nothing()", False),
    ],
)
def test_suppression_comments(capsys, tmp_path, comment, suppressed):
    marked = sorted(expected_markers(TANH.read_text()))
    first, second = marked[0], marked[1]
    lines = TANH.read_text().splitlines()
    lines[first - 1] = re.sub(r"#\s*expect:.*$", comment, lines[first - 1])
    path = tmp_path / "k.py"
    path.write_text("\n".join(lines) + "\n")
    code, doc, _ = run_json(capsys, path)
    got = sorted(f["line"] for f in doc["findings"])
    assert got == ([second] if suppressed else [first, second])
    assert code == 1


# -- which files are read --------------------------------------------------------------------------
def test_directories_recurse_and_skip_hidden_dirs_and_files_without_pallas_call(capsys, tmp_path):
    deep = copy_fixture(TANH, tmp_path / "pkg" / "sub" / "deeper", "k.py")
    copy_fixture(TANH, tmp_path / ".hidden", "k.py")
    copy_fixture(TANH, tmp_path / "pkg" / ".cache", "k.py")
    copy_fixture(NOT_A_KERNEL, tmp_path / "pkg", "plain.py")
    # Never parsed: without `pallas_call` a file is skipped before parsing, so its syntax error is no error.
    (tmp_path / "pkg" / "half_written.py").write_text("def f(:\n")
    (tmp_path / "pkg" / "notes.txt").write_text(TANH.read_text())
    code, out, err = run(capsys, tmp_path)
    assert code == 1, err
    assert {m["path"] for m in FINDING_LINE.finditer(out)} == {str(deep)}
    assert f"{len(expected(TANH))} finding(s) in 3 file(s)" in err


def test_the_not_a_kernel_decoy_gives_nothing(capsys):
    code, out, _ = run(capsys, NOT_A_KERNEL)
    assert code == 0
    assert not FINDING_LINE.search(out)


@pytest.mark.parametrize("name", ["explain", "verify", "lsp"])
def test_a_file_named_like_a_subcommand_is_a_path(capsys, tmp_path, monkeypatch, name):
    copy_fixture(TANH, tmp_path, name)
    monkeypatch.chdir(tmp_path)
    code, out, _ = run(capsys, name)
    assert code == 1
    assert {m["path"] for m in FINDING_LINE.finditer(out)} == {name}


def test_double_dash_makes_a_missing_subcommand_name_a_path(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = run(capsys, "--", "explain")
    assert code == 2
    assert "explain: no such file or directory" in err


# -- explain ---------------------------------------------------------------------------------------
def test_explain_prints_the_rule_documentation(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no file named `explain` here
    code, out, _ = run(capsys, "explain", "PF101")
    assert code == 0
    assert out.startswith("PF101 (independent-loop-slice")
    assert RULES["PF101"].doc in out
    for part in ("What it detects", "Why it matters", "Example", "Fix"):
        assert part in out


def test_explain_accepts_lower_case(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, _ = run(capsys, "explain", "pf106")
    assert code == 0 and RULES["PF106"].doc in out


def test_explain_without_a_code_lists_every_rule(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, _ = run(capsys, "explain")
    assert code == 0
    listed = re.findall(r"^(PF\d{3})\s+(\S+)\s+(.+)$", out, re.M)
    assert [c for c, _, _ in listed] == sorted(RULES)
    for c, name, summary in listed:
        assert name == RULES[c].name and summary.strip() == RULES[c].summary


def test_explain_list_starts_every_summary_in_one_column(capsys, tmp_path, monkeypatch):
    # PF204's name is longer than the others: it ran into its summary, one column further right.
    monkeypatch.chdir(tmp_path)
    code, out, _ = run(capsys, "explain")
    assert code == 0
    lines = [line for line in out.splitlines() if line.startswith("PF")]
    columns = {line.index(RULES[line[:5]].summary) for line in lines}
    assert len(lines) == len(RULES) and len(columns) == 1
    (column,) = columns
    assert all(line[:column].endswith("  ") for line in lines)  # at least two spaces after every name


def test_explain_an_unknown_code_is_exit_2_listing_the_known_ones(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = run(capsys, "explain", "PF999")
    assert code == 2
    assert "PF999" in err and "PF101" in err


# -- rule filters ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "args, codes",
    [
        ([], {"PF101", "PF102", "PF103"}),
        (["--select", "PF103"], {"PF103"}),
        (["--select", "pf103"], {"PF103"}),
        (["--select", "PF101", "--select", "PF102"], {"PF101", "PF102"}),
        (["--ignore", "PF101", "--ignore", "PF102"], {"PF103"}),
        (["--select", "PF1", "--ignore", "PF102"], {"PF101", "PF103"}),
        (["--select", "PF2"], set()),
    ],
)
def test_select_and_ignore(capsys, args, codes):
    code, doc, _ = run_json(capsys, *args, EXAMPLE)
    assert {f["code"] for f in doc["findings"]} == codes
    assert code == (1 if codes else 0)


# -- the console script ----------------------------------------------------------------------------
def test_console_script_two_workers_give_the_same_findings_as_one():
    def findings(workers: int) -> list[dict]:
        proc = subprocess.run(
            console_script() + ["--format", "json", "--workers", str(workers), str(DETECT)],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert proc.returncode == 1, proc.stderr
        return json.loads(proc.stdout)["findings"]

    one, two = findings(1), findings(2)
    assert len(one) > 40 and len({f["path"] for f in one}) > 30
    key = lambda f: (f["path"], f["line"], f["column"], f["code"])  # noqa: E731
    assert sorted(one, key=key) == sorted(two, key=key)


def test_console_script_runs_the_demo_example():
    proc = subprocess.run(console_script() + [str(EXAMPLE)], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 1, proc.stderr
    codes = sorted(m["code"] for m in FINDING_LINE.finditer(proc.stdout))
    assert codes == ["PF101", "PF101", "PF102", "PF102", "PF103", "PF103"]
    assert re.search(r"\d+ finding\(s\) in 1 file\(s\)", proc.stderr)


def test_module_entry_point_matches_the_console_script(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "pallas_fix", "explain"], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    assert re.findall(r"^PF\d{3}", proc.stdout, re.M) == sorted(RULES)


@pytest.mark.interp
def test_the_demo_example_and_its_proposed_rewrite_agree_in_the_interpreters():
    """`make demo` shows this file's diff; what it proposes (unsafe fixes included) must verify."""
    proc = subprocess.run(
        console_script() + ["verify", "--unsafe-fixes", str(EXAMPLE)], capture_output=True, text=True, timeout=600, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    verdicts = re.findall(r"^(\w+) (\w+):", proc.stdout, re.M)
    assert sorted(verdicts) == [("verified", "matmul"), ("verified", "scale_rows"), ("verified", "silu")], proc.stdout


def test_verify_json_with_nothing_to_rewrite_is_an_empty_list(capsys):
    code, out, err = run(capsys, "verify", "--format", "json", NOT_A_KERNEL)
    assert code == 0 and json.loads(out) == [] and "nothing to rewrite" in err
