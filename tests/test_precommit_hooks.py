"""The pre-commit hook definitions parse, and every option they pass is one the CLI has."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import typer

from apply_support import KERNEL, planner, run_cli  # noqa: F401  (planner is a fixture)
from pallas_fix.frontends.cli.app import check_app

yaml = pytest.importorskip("yaml")
HOOKS = Path(__file__).resolve().parents[1] / ".pre-commit-hooks.yaml"


def hooks() -> dict[str, dict]:
    data = yaml.safe_load(HOOKS.read_text())
    assert isinstance(data, list)
    return {h["id"]: h for h in data}


def cli_options() -> set[str]:
    command = typer.main.get_command(check_app)
    return {opt for p in command.params for opt in (*p.opts, *p.secondary_opts) if opt.startswith("-")}


def test_hooks_are_a_check_and_a_fix():
    h = hooks()
    assert set(h) == {"pallas-fix", "pallas-fix-apply"}
    for hook in h.values():
        assert hook["language"] == "python"
        assert hook["types_or"] == ["python", "jupyter"]
        assert shlex.split(hook["entry"])[0] == "pallas-fix"
        assert hook.get("pass_filenames", True), "the CLI takes the staged files as arguments"
    assert shlex.split(h["pallas-fix"]["entry"]) == ["pallas-fix"]
    assert shlex.split(h["pallas-fix-apply"]["entry"]) == ["pallas-fix", "--apply"]


def test_every_option_in_the_hooks_exists():
    known = cli_options()
    assert "--apply" in known and "--no-ignore" in known, "the option list itself must be read correctly"
    for hook in hooks().values():
        words = shlex.split(hook["entry"])[1:] + [str(a) for a in hook.get("args", [])]
        for word in words:
            if word.startswith("-"):
                assert word.split("=", 1)[0] in known, f"{hook['id']}: unknown option {word}"


@pytest.mark.parametrize("hook_id, code", [("pallas-fix", 1), ("pallas-fix-apply", 0)])
def test_hook_entries_run_as_pre_commit_would(tmp_path, capsys, planner, hook_id, code):
    staged = tmp_path / "k.py"
    staged.write_text(KERNEL)
    argv = shlex.split(hooks()[hook_id]["entry"])[1:] + [str(a) for a in hooks()[hook_id].get("args", [])]
    # --no-verify: this test is about the hook's command line, not the interpreters
    extra = ["--no-verify"] if "--apply" in argv else []
    assert run_cli(*argv, *extra, staged) == code, capsys.readouterr().err
    assert ("third = 3 * BS" in staged.read_text()) == ("--apply" in argv)
