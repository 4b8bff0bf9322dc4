"""Which files a run looks at: the paths it is given, and inside folders the Python files and
notebooks that are not hidden, ignored by .gitignore or in SKIP_DIRS, each visited once."""

from __future__ import annotations

import errno
import os
import stat
from typing import Iterator, Optional

from pallas_fix.frontends.files.file_errors import os_reason
from pallas_fix.frontends.files.gitignore import Pattern, ancestor_patterns, ignored, parse_gitignore

SKIP_DIRS = {"__pycache__", "node_modules", "site-packages", ".venv", "venv", ".tox", ".nox", "build", "dist"}
SUFFIXES = (".py", ".pyi", ".ipynb")


def iter_files(paths: list[str], *, no_ignore: bool = False) -> Iterator[tuple[str, Optional[str]]]:
    """(path, error) pairs: a file to analyse, or a path that cannot be analysed and why.

    Paths named on the command line are always taken, whatever their name; inside directories,
    hidden entries, `.gitignore`d paths and SKIP_DIRS are left out unless `no_ignore`. Symbolic
    links are followed, but every file and directory is visited once (by device and inode), so a
    link loop ends and a file reachable twice is neither reported nor rewritten twice.
    """
    seen_files: set[tuple[int, int]] = set()
    seen_dirs: set[tuple[int, int]] = set()
    for raw in paths:
        try:
            st = os.stat(raw)
        except OSError as exc:
            if exc.errno == errno.ENOENT and os.path.islink(raw):
                yield raw, "broken symbolic link"
            else:
                yield raw, os_reason(exc)
            continue
        if stat.S_ISDIR(st.st_mode):
            yield from _walk_dir(raw, no_ignore, seen_files, seen_dirs)
        elif stat.S_ISREG(st.st_mode):
            if _first_visit(st, seen_files):
                yield raw, None
        else:
            yield raw, "not a regular file"


def _first_visit(st: os.stat_result, seen: set[tuple[int, int]]) -> bool:
    key = (st.st_dev, st.st_ino)
    if key in seen:
        return False
    seen.add(key)
    return True


def _walk_dir(
    root: str, no_ignore: bool, seen_files: set[tuple[int, int]], seen_dirs: set[tuple[int, int]]
) -> Iterator[tuple[str, Optional[str]]]:
    base_patterns = [] if no_ignore else ancestor_patterns(os.path.abspath(root))
    stack: list[tuple[str, list[Pattern]]] = [(root, base_patterns)]
    while stack:
        folder, inherited = stack.pop()
        try:
            st = os.stat(folder)
        except OSError as exc:
            yield folder, f"cannot read directory: {os_reason(exc)}"
            continue
        if not _first_visit(st, seen_dirs):
            continue  # reached again through a symbolic link (or named twice)
        patterns = inherited if no_ignore else inherited + parse_gitignore(os.path.abspath(folder))
        try:
            with os.scandir(folder) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            yield folder, f"cannot read directory: {os_reason(exc)}"
            continue
        subdirs = []
        for entry in entries:
            if not no_ignore and entry.name.startswith("."):
                continue
            try:
                est = entry.stat()  # follows a symbolic link
            except OSError as exc:
                if entry.name.endswith(SUFFIXES):
                    yield entry.path, os_reason(exc) if exc.errno != errno.ENOENT else "broken symbolic link"
                continue
            is_dir = stat.S_ISDIR(est.st_mode)
            if not no_ignore:
                if is_dir and entry.name in SKIP_DIRS:
                    continue
                if ignored(os.path.abspath(entry.path), is_dir, patterns):
                    continue
            if is_dir:
                subdirs.append(entry.path)
            elif entry.name.endswith(SUFFIXES):
                if not stat.S_ISREG(est.st_mode):
                    yield entry.path, "not a regular file"
                elif _first_visit(est, seen_files):
                    yield entry.path, None
        for d in reversed(subdirs):
            stack.append((d, patterns))
