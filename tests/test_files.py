"""Reading, choosing and writing files, through the CLI (`pallas_fix.cli.main` in-process).

Writes must give back everything the rewrite did not change: encoding (PEP 263 cookie, BOM),
newline style, tabs, a missing final newline, the file mode. Every per-file problem is a clear
error, exit status 2 at the end, and the other files are still processed.

The sandbox runs as root, which ignores permission bits: tests that need a real permission failure
either simulate the system call's error with monkeypatch or skip under root and say so.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import threading

import pytest

from apply_support import KERNEL, planner, run_cli  # noqa: F401  (planner is a fixture)
from pallas_fix.frontends.files import files as files_mod
from pallas_fix.engine import fix_source
from pallas_fix.frontends.files.files import FileError, read_source, write_source

ROOT = os.geteuid() == 0 if hasattr(os, "geteuid") else False
CLEAN = "x = 1\n"  # no pallas_call: checked, nothing found


def finding_paths(out: str) -> list[str]:
    return re.findall(r"^(\S+?):\d+:\d+: PF\d{3}", out, flags=re.M)


def leftovers(folder) -> list[str]:
    return [p.name for p in folder.iterdir() if "pallas-fix" in p.name]


# -- format preservation on --apply ------------------------------------------------------------------
def _crlf(text: str) -> str:
    return text.replace("\n", "\r\n")


def _tabs(text: str) -> str:
    return re.sub(r"(?m)^((?:    )+)", lambda mt: "\t" * (len(mt.group(1)) // 4), text)


def _no_final_newline(text: str) -> str:
    return text.rstrip("\n")


def _latin1_cookie(text: str) -> str:
    return "# -*- coding: latin-1 -*-\n# Café crème, naïve façade\n" + text


VARIANTS = {
    # name: (text transform, encoding of the bytes on disk, extra prefix bytes)
    "lf": (lambda t: t, "utf-8", b""),
    "crlf": (_crlf, "utf-8", b""),
    "bom": (lambda t: t, "utf-8", b"\xef\xbb\xbf"),
    "bom-crlf": (_crlf, "utf-8", b"\xef\xbb\xbf"),
    "latin-1-cookie": (_latin1_cookie, "latin-1", b""),
    "no-final-newline": (_no_final_newline, "utf-8", b""),
    "crlf-no-final-newline": (lambda t: _crlf(t).rstrip("\r\n"), "utf-8", b""),
    "tabs": (_tabs, "utf-8", b""),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_apply_keeps_encoding_newlines_tabs_and_final_newline(tmp_path, capsys, planner, variant):
    transform, encoding, prefix = VARIANTS[variant]
    expected_lf = fix_source(KERNEL, "k.py").source
    assert expected_lf != KERNEL, "the planner must rewrite KERNEL, or this test checks nothing"
    path = tmp_path / "k.py"
    path.write_bytes(prefix + transform(KERNEL).encode(encoding))
    os.chmod(path, 0o640)

    code = run_cli(path, "--apply", "--no-verify")

    err = capsys.readouterr().err
    assert code == 0, err
    assert path.read_bytes() == prefix + transform(expected_lf).encode(encoding)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert leftovers(tmp_path) == []


def test_apply_leaves_mixed_newlines_alone(tmp_path, capsys, planner):
    lines = KERNEL.splitlines(keepends=True)
    mixed = "".join(ln.replace("\n", "\r\n") if n % 2 else ln for n, ln in enumerate(lines))
    path = tmp_path / "k.py"
    path.write_bytes(mixed.encode())
    assert run_cli(path, "--apply", "--no-verify") == 0, capsys.readouterr().err
    data = path.read_bytes().decode()
    assert data != mixed
    # every line the rewrite did not touch keeps its own ending
    kept = [ln for ln in mixed.splitlines(keepends=True) if "jnp.int32(3)" not in ln]
    assert [ln for ln in data.splitlines(keepends=True) if "third = 3 * BS" not in ln] == kept


def test_apply_through_a_symlink_rewrites_the_target_and_keeps_the_link(tmp_path, capsys, planner):
    real = tmp_path / "real"
    real.mkdir()
    target = real / "k.py"
    target.write_text(KERNEL)
    link = tmp_path / "link.py"
    link.symlink_to(target)
    assert run_cli(link, "--apply", "--no-verify") == 0, capsys.readouterr().err
    assert link.is_symlink()
    assert "third = 3 * BS" in target.read_text()
    assert leftovers(real) == [] and leftovers(tmp_path) == []


def test_apply_refuses_a_file_changed_since_it_was_read(tmp_path, capsys, planner, monkeypatch):
    from pallas_fix.frontends.cli import app as cli

    path = tmp_path / "k.py"
    path.write_text(KERNEL)
    edited = KERNEL + "# edited by someone else meanwhile\n"
    analyse = cli.analyse_file

    def analyse_then_edit(p, opts):
        report = analyse(p, opts)
        path.write_text(edited)
        return report

    monkeypatch.setattr(cli, "analyse_file", analyse_then_edit)
    assert run_cli(path, "--apply", "--no-verify") == 2
    assert "changed on disk since it was read" in capsys.readouterr().err
    assert path.read_text() == edited


def test_write_source_refuses_when_the_bytes_changed_even_if_the_text_reads_the_same(tmp_path):
    path = tmp_path / "k.py"
    path.write_bytes(KERNEL.encode())
    src = read_source(str(path))
    path.write_bytes(b"\xef\xbb\xbf" + KERNEL.encode())  # same text, now with a BOM
    with pytest.raises(FileError, match="changed on disk"):
        write_source(src, KERNEL.replace("jnp.int32(3)", "3"))
    assert path.read_bytes().startswith(b"\xef\xbb\xbf")


def test_apply_refuses_a_read_only_file(tmp_path, capsys, planner):
    path = tmp_path / "k.py"
    path.write_text(KERNEL)
    os.chmod(path, 0o444)  # no write bit at all: read-only by intent, even for root
    other = tmp_path / "other.py"
    other.write_text(KERNEL)
    code = run_cli(path, other, "--apply", "--no-verify")
    err = capsys.readouterr().err
    assert code == 2
    assert re.search(r"k\.py: file is read-only; not written", err)
    assert path.read_text() == KERNEL
    assert "third = 3 * BS" in other.read_text(), "the other file is still processed"


def test_apply_reports_a_folder_that_cannot_take_a_new_file(tmp_path, capsys, planner, monkeypatch):
    path = tmp_path / "k.py"
    path.write_text(KERNEL)

    def denied(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied")

    # Root may write in any folder, so the system call's failure is simulated.
    monkeypatch.setattr(files_mod.tempfile, "mkstemp", denied)
    assert run_cli(path, "--apply", "--no-verify") == 2
    err = capsys.readouterr().err
    assert "cannot create a file in" in err and "permission denied" in err
    assert path.read_text() == KERNEL


@pytest.mark.skipif(ROOT, reason="root ignores directory permission bits; the monkeypatched test covers this path")
def test_apply_in_a_folder_without_write_permission(tmp_path, capsys, planner):
    folder = tmp_path / "ro"
    folder.mkdir()
    path = folder / "k.py"
    path.write_text(KERNEL)
    os.chmod(folder, 0o555)
    try:
        assert run_cli(path, "--apply", "--no-verify") == 2
        assert "permission denied" in capsys.readouterr().err
        assert path.read_text() == KERNEL
    finally:
        os.chmod(folder, 0o755)


def test_apply_refuses_a_file_with_other_hard_links(tmp_path, capsys, planner):
    path = tmp_path / "k.py"
    path.write_text(KERNEL)
    os.link(path, tmp_path / "twin.py.txt")
    assert run_cli(path, "--apply", "--no-verify") == 2
    assert "hard links" in capsys.readouterr().err
    assert path.read_text() == KERNEL == (tmp_path / "twin.py.txt").read_text()


@pytest.mark.skipif(not ROOT, reason="only root can give a file to another owner")
def test_apply_keeps_the_owner(tmp_path, capsys, planner):
    path = tmp_path / "k.py"
    path.write_text(KERNEL)
    os.chown(path, 12345, 23456)
    assert run_cli(path, "--apply", "--no-verify") == 0, capsys.readouterr().err
    st = path.stat()
    assert (st.st_uid, st.st_gid) == (12345, 23456)
    assert "third = 3 * BS" in path.read_text()


def test_write_source_refuses_characters_the_encoding_cannot_hold(tmp_path):
    path = tmp_path / "k.py"
    path.write_bytes(_latin1_cookie(KERNEL).encode("latin-1"))
    src = read_source(str(path))
    assert src.encoding == "iso-8859-1"
    with pytest.raises(FileError, match="cannot encode"):
        write_source(src, src.text + "# \u2192\n")
    assert path.read_bytes() == _latin1_cookie(KERNEL).encode("latin-1")


def test_a_failed_write_leaves_no_temp_file_and_the_original_intact(tmp_path, monkeypatch):
    path = tmp_path / "k.py"
    path.write_text(KERNEL)
    src = read_source(str(path))

    def broken_replace(a, b):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(files_mod.os, "replace", broken_replace)
    with pytest.raises(FileError, match="the file is unchanged"):
        write_source(src, "y = 2\n")
    assert path.read_text() == KERNEL
    assert leftovers(tmp_path) == []


# -- per-file errors: reported, exit 2, the other files still processed ------------------------------
def _check(capsys, *paths, extra=()):
    code = run_cli(*paths, *extra)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _good(tmp_path):
    good = tmp_path / "good.py"
    good.write_text(KERNEL)
    return good


def test_missing_path(tmp_path, capsys):
    good = _good(tmp_path)
    code, out, err = _check(capsys, tmp_path / "missing.py", good)
    assert code == 2
    assert "missing.py: no such file or directory" in err
    assert finding_paths(out) == [str(good)]


@pytest.mark.parametrize(
    "name, data, message",
    [
        ("binary.py", b"\x7fELF\x00\x00\x01pallas_call", "binary file"),
        ("latin.py", "x = 'caf\u00e9'  # pallas_call\n".encode("latin-1"),
         "not valid utf-8 text (byte 0xe9 on line 1)"),
        ("badcookie.py", b"# -*- coding: no-such-codec -*-\nx = 1\n", "bad encoding declaration"),
        ("bomcookie.py", b"\xef\xbb\xbf# coding: latin-1\nx = 1\n", "bad encoding declaration"),
    ],
)
def test_undecodable_files(tmp_path, capsys, name, data, message):
    bad = tmp_path / name
    bad.write_bytes(data)
    good = _good(tmp_path)
    code, out, err = _check(capsys, bad, good)
    assert code == 2
    assert f"{name}: {message}" in err
    assert finding_paths(out) == [str(good)]


def test_latin1_with_a_cookie_is_read(tmp_path, capsys):
    path = tmp_path / "k.py"
    path.write_bytes(_latin1_cookie(KERNEL).encode("latin-1"))
    code, out, err = _check(capsys, path)
    assert code == 1, err
    assert finding_paths(out) == [str(path)]
    assert re.search(r"k\.py:16:\d+: PF104", out), "line numbers count the cookie lines"


def test_unreadable_file_simulated(tmp_path, capsys, monkeypatch):
    bad = tmp_path / "secret.py"
    bad.write_text(KERNEL)
    good = _good(tmp_path)
    real_open = os.open

    def guarded_open(p, flags, *args, **kwargs):
        if os.fspath(p) == str(bad):
            raise PermissionError(errno.EACCES, "Permission denied", os.fspath(p))
        return real_open(p, flags, *args, **kwargs)

    monkeypatch.setattr(files_mod.os, "open", guarded_open)
    code, out, err = _check(capsys, bad, good)
    assert code == 2
    assert "secret.py: permission denied" in err
    assert finding_paths(out) == [str(good)]


@pytest.mark.skipif(ROOT, reason="root can read a file whatever its mode; the simulated test covers this path")
def test_unreadable_file(tmp_path, capsys):
    bad = tmp_path / "secret.py"
    bad.write_text(KERNEL)
    os.chmod(bad, 0)
    code, out, err = _check(capsys, bad, _good(tmp_path))
    assert code == 2 and "secret.py: permission denied" in err


def test_unreadable_directory_simulated(tmp_path, capsys, monkeypatch):
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / "k.py").write_text(KERNEL)
    good = _good(tmp_path)
    real_scandir = os.scandir

    def guarded_scandir(p="."):
        # os.scandir is patched for the whole process while this test runs, and the pair
        # harness may verify in a background thread then (scandir of a file descriptor).
        if isinstance(p, (str, bytes, os.PathLike)) and os.path.abspath(os.fspath(p)) == str(locked):
            raise PermissionError(errno.EACCES, "Permission denied", os.fspath(p))
        return real_scandir(p)

    monkeypatch.setattr(files_mod.os, "scandir", guarded_scandir)
    code, out, err = _check(capsys, tmp_path)
    assert code == 2
    assert "locked: cannot read directory: permission denied" in err
    assert finding_paths(out) == [str(good)]


@pytest.mark.skipif(ROOT, reason="root can list a directory whatever its mode; the simulated test covers this path")
def test_unreadable_directory(tmp_path, capsys):
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / "k.py").write_text(KERNEL)
    os.chmod(locked, 0)
    try:
        code, out, err = _check(capsys, tmp_path)
        assert code == 2 and "cannot read directory: permission denied" in err
    finally:
        os.chmod(locked, 0o755)


def test_internal_error_on_one_file_does_not_stop_the_run(tmp_path, capsys, monkeypatch):
    from pallas_fix.frontends import service

    boom = tmp_path / "boom.py"
    boom.write_text(KERNEL)
    good = _good(tmp_path)
    real = service.analyze_source

    def flaky(source, path, config=None, **kw):
        if path.endswith("boom.py"):
            raise RuntimeError("simulated analysis bug")
        return real(source, path, config, **kw)

    monkeypatch.setattr(service, "analyze_source", flaky)
    code, out, err = _check(capsys, boom, good)
    assert code == 2
    assert "boom.py: internal error (RuntimeError: simulated analysis bug)" in err
    assert finding_paths(out) == [str(good)]


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path, capsys):
    fifo = tmp_path / "pipe.py"
    os.mkfifo(fifo)
    result = {}

    def run():
        result["code"] = run_cli(tmp_path)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(20)
    if worker.is_alive():
        with open(fifo, "wb"):  # unblock the reader so the thread can end
            pass
        pytest.fail("reading a FIFO blocked")
    assert result["code"] == 2
    assert "pipe.py: not a regular file" in capsys.readouterr().err


# -- symbolic links -----------------------------------------------------------------------------------
def test_symlinked_file_in_a_directory_is_checked_once(tmp_path, capsys):
    good = _good(tmp_path)
    (tmp_path / "alias.py").symlink_to(good)
    code, out, err = _check(capsys, tmp_path)
    assert code == 1, err
    assert len(finding_paths(out)) == 1


def test_directory_symlink_loop_ends(tmp_path, capsys):
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "k.py").write_text(KERNEL)
    (sub / "up").symlink_to(tmp_path, target_is_directory=True)
    (sub / "self").symlink_to(sub, target_is_directory=True)
    code, out, err = _check(capsys, tmp_path)
    assert code == 1, err
    assert finding_paths(out) == [str(sub / "k.py")]


def test_symlink_to_a_directory_outside_is_followed(tmp_path, capsys):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "k.py").write_text(KERNEL)
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "linked").symlink_to(outside, target_is_directory=True)
    code, out, err = _check(capsys, tree)
    assert code == 1, err
    assert finding_paths(out) == [str(tree / "linked" / "k.py")]


def test_file_symlink_loop_and_broken_link(tmp_path, capsys):
    (tmp_path / "a.py").symlink_to(tmp_path / "b.py")
    (tmp_path / "b.py").symlink_to(tmp_path / "a.py")
    (tmp_path / "dangling.py").symlink_to(tmp_path / "nowhere.py")
    good = _good(tmp_path)
    code, out, err = _check(capsys, tmp_path / "a.py", tmp_path / "dangling.py", good)
    assert code == 2
    assert "a.py: symbolic link loop" in err
    assert "dangling.py: broken symbolic link" in err
    assert finding_paths(out) == [str(good)]
    # inside a directory walk too
    code, out, err = _check(capsys, tmp_path)
    assert code == 2
    assert "a.py: symbolic link loop" in err and "dangling.py: broken symbolic link" in err
    assert finding_paths(out) == [str(good)]


# -- what a directory walk takes -------------------------------------------------------------------------
def _tree(tmp_path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


def test_hidden_and_gitignored_paths_are_skipped_unless_no_ignore(tmp_path, capsys):
    _tree(
        tmp_path,
        {
            ".gitignore": "# generated code\ngenerated/\n*_gen.py\n!keep_gen.py\n/top_only.py\n",
            "main.py": KERNEL,
            "keep_gen.py": KERNEL,
            "x_gen.py": KERNEL,
            "top_only.py": KERNEL,
            "pkg/top_only.py": KERNEL,
            "pkg/.gitignore": "/local.py\ndeep/**/skip.py\n",
            "pkg/local.py": KERNEL,
            "pkg/deep/a/b/skip.py": KERNEL,
            "pkg/deep/a/b/other.py": KERNEL,
            "generated/k.py": KERNEL,
            ".hidden/k.py": KERNEL,
            ".dot.py": KERNEL,
            "__pycache__/k.py": KERNEL,
            "notes.txt": KERNEL,
        },
    )
    code, out, _ = _check(capsys, tmp_path)
    assert code == 1
    rel = sorted(os.path.relpath(p, tmp_path) for p in finding_paths(out))
    assert rel == ["keep_gen.py", "main.py", "pkg/deep/a/b/other.py", "pkg/top_only.py"]

    code, out, _ = _check(capsys, tmp_path, extra=("--no-ignore",))
    rel = sorted(os.path.relpath(p, tmp_path) for p in finding_paths(out))
    assert rel == sorted(
        [
            ".dot.py", ".hidden/k.py", "__pycache__/k.py", "generated/k.py", "keep_gen.py", "main.py",
            "pkg/deep/a/b/other.py", "pkg/deep/a/b/skip.py", "pkg/local.py", "pkg/top_only.py",
            "top_only.py", "x_gen.py",
        ]
    )


def test_gitignore_above_the_walked_folder_applies_inside_a_git_work_tree(tmp_path, capsys):
    _tree(tmp_path, {".gitignore": "*_gen.py\n", "src/a_gen.py": KERNEL, "src/main.py": KERNEL})
    code, out, _ = _check(capsys, tmp_path / "src")
    assert sorted(os.path.basename(p) for p in finding_paths(out)) == ["a_gen.py", "main.py"], (
        "outside a git work tree git reads no .gitignore above the folder, and neither do we"
    )
    (tmp_path / ".git").mkdir()
    code, out, _ = _check(capsys, tmp_path / "src")
    assert [os.path.basename(p) for p in finding_paths(out)] == ["main.py"]


def test_a_file_named_on_the_command_line_is_taken_even_if_ignored(tmp_path, capsys):
    _tree(tmp_path, {".gitignore": "*.py\n", ".hidden/k.py": KERNEL})
    path = tmp_path / ".hidden" / "k.py"
    code, out, _ = _check(capsys, path)
    assert code == 1
    assert finding_paths(out) == [str(path)]


def test_the_same_file_named_twice_is_checked_once(tmp_path, capsys):
    good = _good(tmp_path)
    code, out, _ = _check(capsys, good, tmp_path, good)
    assert len(finding_paths(out)) == 1


def test_clean_run_exits_zero(tmp_path, capsys):
    (tmp_path / "clean.py").write_text(CLEAN)
    code, out, err = _check(capsys, tmp_path)
    assert code == 0, err
    assert "0 finding(s) in 1 file(s)" in err


@pytest.mark.interp
def test_apply_with_diff_verifies_and_prints_what_it_would_write_but_writes_nothing(tmp_path, capsys, planner):
    """`--apply --diff` is ruff's `--fix --diff`: the verified rewrite as a diff on stdout, the
    file untouched, exit 1 (there is something to apply)."""
    path = tmp_path / "k.py"
    path.write_text(KERNEL)
    code = run_cli(path, "--apply", "--diff", "--no-color")
    out, err = capsys.readouterr()
    assert path.read_text() == KERNEL, err
    assert code == 1, err
    assert "-    third = jnp.int32(3) * BS" in out and "+    third = 3 * BS" in out, out
    assert "verified" in err and "fixed" not in err, err
    assert leftovers(tmp_path) == []
