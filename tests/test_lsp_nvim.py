"""End to end in a real editor: headless Neovim attaches `pallas-fix lsp`, applies a fix, writes.

The written file must equal what the engine's `fix_source` makes of the original. Neovim comes
from Debian's `neovim` package (`make test` installs it when missing); without it the test skips
and says so.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from pallas_fix.engine import fix_source

from test_lsp import FIX, TESTS, ensure_pf104_planner, has_planner, pallas_fix_bin, server_command

pytestmark = [pytest.mark.nvim, pytest.mark.timeout(180)]

INIT = TESTS / "nvim" / "init.lua"
MIN_VERSION = (0, 7)  # the Lua config uses only what Neovim 0.7 (Debian 12) has


def _nvim() -> tuple[str, tuple[int, int, int]]:
    exe = shutil.which("nvim")
    if exe is None:
        pytest.skip(
            "NEOVIM NOT INSTALLED: the editor end-to-end test did not run. "
            "Install Debian's `neovim` package (`make test` tries apt-get)."
        )
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30).stdout
    m = re.search(r"NVIM v(\d+)\.(\d+)\.(\d+)", out)
    if m is None:
        pytest.fail(f"cannot read the Neovim version from {out[:200]!r}")
    version = tuple(int(x) for x in m.groups())
    if version[:2] < MIN_VERSION:
        pytest.skip(f"NEOVIM TOO OLD: {'.'.join(map(str, version))} < {'.'.join(map(str, MIN_VERSION))}; the editor test did not run")
    return exe, version


def _run_nvim(tmp_path: Path, fixture: str, code: str, cmd: list[str]) -> tuple[str, dict]:
    exe, _ = _nvim()
    target = tmp_path / fixture
    shutil.copyfile(FIX / fixture, target)
    report = tmp_path / "report.json"
    env = dict(
        os.environ,
        PALLAS_FIX_BIN=pallas_fix_bin(),
        PALLAS_FIX_NVIM_FILE=str(target),
        PALLAS_FIX_NVIM_CODE=code,
        PALLAS_FIX_NVIM_REPORT=str(report),
        PALLAS_FIX_NVIM_TIMEOUT_MS="90000",
        XDG_CONFIG_HOME=str(tmp_path / "config"),
        XDG_DATA_HOME=str(tmp_path / "data"),
        XDG_STATE_HOME=str(tmp_path / "state"),
        XDG_CACHE_HOME=str(tmp_path / "cache"),
    )
    if cmd[-1] != "lsp" or cmd[0] != pallas_fix_bin():
        env["PALLAS_FIX_LSP_CMD"] = json.dumps(cmd)
    proc = subprocess.run(
        [exe, "--headless", "--clean", "-n", "-i", "NONE", "-u", str(INIT)],
        env=env,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=150,
    )
    assert report.exists(), f"Neovim wrote no report (exit {proc.returncode}): {proc.stdout[-2000:]} {proc.stderr[-2000:]}"
    data = json.loads(report.read_text())
    assert data["status"] == "ok", data
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    return target.read_text(), data


def test_nvim_applies_the_quick_fix(tmp_path):
    # The lift-loop fix edits the kernel body and the pallas_call site; the PF104 stand-in (or R4)
    # edits two separate lines. Prefer the real codemod when there is one.
    if has_planner("PF101"):
        fixture, code, cmd = "loop_kernel.py", "PF101", server_command()
    else:
        fixture, code, cmd = "traced_constant.py", "PF104", server_command(need_pf104_fix=True)
        ensure_pf104_planner()
    original = (FIX / fixture).read_text()
    written, report = _run_nvim(tmp_path, fixture, code, cmd)
    expected = fix_source(original, str(tmp_path / fixture))
    assert expected.changed and not expected.error
    assert written == expected.source
    assert code in report["applied"]
    assert any(d["code"] == code for d in report["diagnostics"])


def test_nvim_fix_all(tmp_path):
    ensure_pf104_planner()
    original = (FIX / "two_kernels.py").read_text()
    expected = fix_source(original, str(tmp_path / "two_kernels.py"), unsafe=False)
    assert expected.changed
    written, report = _run_nvim(tmp_path, "two_kernels.py", "fixall", server_command(need_pf104_fix=True))
    assert written == expected.source
    assert report["applied"].startswith("pallas-fix: fix all")
