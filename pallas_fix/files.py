"""Which files a run looks at, reading them without losing anything, and writing them safely."""

from __future__ import annotations

import fnmatch
import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

SKIP_DIRS = {"__pycache__", "node_modules", "site-packages", ".venv", "venv", ".tox", ".nox", "build", "dist"}
SUFFIXES = (".py", ".pyi", ".ipynb")


class FileError(Exception):
    """A per-file problem: the run reports it, exits 2 at the end and carries on."""


def _gitignore_patterns(folder: Path) -> list[str]:
    gi = folder / ".gitignore"
    if not gi.is_file():
        return []
    try:
        lines = gi.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    return [ln.strip() for ln in lines if ln.strip() and not ln.startswith("#") and not ln.startswith("!")]


def _ignored(name: str, rel: str, patterns: list[str]) -> bool:
    for pat in patterns:
        p = pat.rstrip("/")
        anchored = p.startswith("/")
        p = p.lstrip("/")
        if fnmatch.fnmatch(name, p) or fnmatch.fnmatch(rel, p) or (not anchored and fnmatch.fnmatch(rel, f"*/{p}")):
            return True
    return False


def iter_files(paths: list[str], *, no_ignore: bool = False) -> Iterator[tuple[str, Optional[str]]]:
    """(path, error) pairs: a file to analyse, or a path that cannot be analysed and why."""
    for raw in paths:
        p = Path(raw)
        if not p.exists() and not p.is_symlink():
            yield raw, "no such file or directory"
            continue
        if p.is_symlink() and not p.exists():
            yield raw, "broken symbolic link"
            continue
        if p.is_file():
            yield raw, None
            continue
        if p.is_dir():
            yield from _walk_dir(p, no_ignore)
            continue
        yield raw, "not a regular file"


def _walk_dir(root: Path, no_ignore: bool) -> Iterator[tuple[str, Optional[str]]]:
    seen: set[tuple[int, int]] = set()
    stack: list[tuple[Path, list[str]]] = [(root, [])]
    while stack:
        folder, inherited = stack.pop()
        try:
            st = folder.stat()
        except OSError as exc:
            yield str(folder), f"cannot read directory: {exc.strerror}"
            continue
        key = (st.st_dev, st.st_ino)
        if key in seen:
            continue  # a symlink loop: follow each directory once
        seen.add(key)
        patterns = inherited + ([] if no_ignore else _gitignore_patterns(folder))
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except PermissionError:
            yield str(folder), "permission denied"
            continue
        except OSError as exc:
            yield str(folder), f"cannot read directory: {exc.strerror}"
            continue
        subdirs = []
        for entry in entries:
            rel = os.path.relpath(entry.path, root)
            if not no_ignore and (entry.name.startswith(".") or _ignored(entry.name, rel, patterns)):
                continue
            try:
                is_dir = entry.is_dir()
            except OSError:
                continue
            if is_dir:
                if entry.name in SKIP_DIRS and not no_ignore:
                    continue
                subdirs.append(Path(entry.path))
            elif entry.name.endswith(SUFFIXES):
                yield entry.path, None
        for d in reversed(subdirs):
            stack.append((d, patterns))


@dataclass
class SourceFile:
    path: str
    text: str
    raw: bytes
    encoding: str
    newline: Optional[str]  # "\n", "\r\n", or None when mixed / none (left alone)
    bom: bool
    mtime_ns: int
    mode: int


def read_source(path: str) -> SourceFile:
    try:
        raw = Path(path).read_bytes()
        st = os.stat(path)
    except PermissionError:
        raise FileError("permission denied")
    except IsADirectoryError:
        raise FileError("is a directory")
    except OSError as exc:
        raise FileError(exc.strerror or str(exc))
    if b"\x00" in raw[:8192]:
        raise FileError("binary file (contains NUL bytes)")
    bom = raw.startswith(b"\xef\xbb\xbf")
    encoding = _declared_encoding(raw) or "utf-8"
    try:
        text = raw.decode("utf-8-sig" if bom else encoding)
    except (UnicodeDecodeError, LookupError) as exc:
        raise FileError(f"cannot decode as {encoding}: {exc}")
    crlf = raw.count(b"\r\n")
    lf = raw.count(b"\n") - crlf
    newline = "\r\n" if crlf and not lf else ("\n" if lf and not crlf else None)
    # LibCST keeps line endings as written, so the text is passed through untouched.
    return SourceFile(path, text, raw, encoding, newline, bom, st.st_mtime_ns, stat.S_IMODE(st.st_mode))


def _declared_encoding(raw: bytes) -> Optional[str]:
    import re

    for line in raw.splitlines()[:2]:
        m = re.match(rb"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)", line)
        if m:
            return m.group(1).decode("ascii")
    return None


def write_source(src: SourceFile, new_text: str) -> None:
    """Atomically replace the file: temp file beside it, fsync, rename; mode and encoding kept."""
    try:
        st = os.stat(src.path)
    except OSError as exc:
        raise FileError(f"cannot stat before writing: {exc.strerror}")
    if st.st_mtime_ns != src.mtime_ns or Path(src.path).read_bytes() != src.raw:
        raise FileError("file changed on disk since it was read; not written")
    if not os.access(src.path, os.W_OK):
        raise FileError("file is read-only; not written")
    data = new_text.encode(src.encoding if not src.bom else "utf-8")
    if src.bom:
        data = b"\xef\xbb\xbf" + data
    target = os.path.realpath(src.path)
    folder = os.path.dirname(target) or "."
    fd, tmp = tempfile.mkstemp(prefix=".pallas-fix-", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, src.mode)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
