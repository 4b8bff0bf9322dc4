"""Which files a run looks at, reading them without losing anything, and writing them safely.

Reading keeps everything a rewrite must give back: the declared encoding (PEP 263 cookie or a
UTF-8 BOM), the newline style, tabs and a missing final newline (the text is never normalised;
LibCST reproduces what it parsed). Writing goes through a temporary file in the same folder renamed
over the original, so a crash never leaves half a file, and refuses when the file changed since it
was read. Every problem with one file is a `FileError`: the run reports it and carries on.
"""

from __future__ import annotations

import errno
import io
import os
import re
import stat
import tempfile
import tokenize
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

SKIP_DIRS = {"__pycache__", "node_modules", "site-packages", ".venv", "venv", ".tox", ".nox", "build", "dist"}
SUFFIXES = (".py", ".pyi", ".ipynb")


class FileError(Exception):
    """A per-file problem: the run reports it, exits 2 at the end and carries on."""


def _os_reason(exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return "symbolic link loop"
    if exc.errno == errno.ENOENT:
        return "no such file or directory"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    if exc.errno == errno.EISDIR:
        return "is a directory"
    return exc.strerror or str(exc)


# -- .gitignore ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Pattern:
    base: str  # absolute folder of the .gitignore that holds it
    regex: "re.Pattern[str]"
    negate: bool
    dir_only: bool


def _translate(pat: str) -> str:
    """A gitignore glob (no leading slash) as a regex over '/'-separated relative paths."""
    out = []
    i, n = 0, len(pat)
    while i < n:
        c = pat[i]
        at_segment_start = i == 0 or pat[i - 1] == "/"
        if c == "*" and pat.startswith("**", i) and at_segment_start and (i + 2 == n or pat[i + 2] == "/"):
            if i + 2 == n:
                out.append(".*")
                i += 2
            else:
                out.append("(?:.*/)?")
                i += 3
        elif c == "*":
            out.append("[^/]*")
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[":
            j = i + 1
            if j < n and pat[j] in "!^":
                j += 1
            if j < n and pat[j] == "]":
                j += 1
            while j < n and pat[j] != "]":
                j += 1
            if j >= n:
                out.append(re.escape(c))
                i += 1
                continue
            body = pat[i + 1 : j]
            if body[:1] in ("!", "^"):
                body = "^" + body[1:]
            out.append("[" + body.replace("\\", "\\\\") + "]")
            i = j + 1
        elif c == "\\" and i + 1 < n:
            out.append(re.escape(pat[i + 1]))
            i += 2
        else:
            out.append(re.escape(c))
            i += 1
    return "".join(out)


def _parse_gitignore(folder: str) -> list[_Pattern]:
    try:
        with open(os.path.join(folder, ".gitignore"), encoding="utf-8", errors="replace") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return []
    patterns = []
    for line in lines:
        if not line.strip() or line.startswith("#"):
            continue
        line = re.sub(r"(?<!\\)\s+$", "", line)  # unescaped trailing spaces are not part of it
        negate = line.startswith("!")
        if negate:
            line = line[1:]
        elif line.startswith("\\"):
            line = line[1:] if line[1:2] in ("!", "#") else line
        dir_only = line.endswith("/")
        line = line.rstrip("/")
        if not line:
            continue
        anchored = "/" in line
        body = _translate(line.lstrip("/"))
        regex = re.compile(body if anchored else "(?:.*/)?" + body, re.DOTALL)
        patterns.append(_Pattern(folder, regex, negate, dir_only))
    return patterns


def _ignored(path: str, is_dir: bool, patterns: list[_Pattern]) -> bool:
    """Last matching pattern wins, as in git."""
    verdict = False
    for p in patterns:
        if p.dir_only and not is_dir:
            continue
        prefix = p.base.rstrip(os.sep) + os.sep
        if not path.startswith(prefix):
            continue
        rel = path[len(prefix) :]
        if p.regex.fullmatch(rel if os.sep == "/" else rel.replace(os.sep, "/")):
            verdict = not p.negate
    return verdict


def _ancestor_patterns(root: str) -> list[_Pattern]:
    """.gitignore files of the folders above `root`, up to the top of its git work tree.

    Outside a git work tree none apply: git itself would not read them.
    """
    if os.path.exists(os.path.join(root, ".git")):
        return []
    chain = []
    folder = root
    while True:
        parent = os.path.dirname(folder)
        if parent == folder:
            return []
        folder = parent
        chain.append(folder)
        if os.path.exists(os.path.join(folder, ".git")):
            break
    patterns: list[_Pattern] = []
    for folder in reversed(chain):
        patterns += _parse_gitignore(folder)
    return patterns


# -- which files --------------------------------------------------------------------------------------
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
                yield raw, _os_reason(exc)
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
    base_patterns = [] if no_ignore else _ancestor_patterns(os.path.abspath(root))
    stack: list[tuple[str, list[_Pattern]]] = [(root, base_patterns)]
    while stack:
        folder, inherited = stack.pop()
        try:
            st = os.stat(folder)
        except OSError as exc:
            yield folder, f"cannot read directory: {_os_reason(exc)}"
            continue
        if not _first_visit(st, seen_dirs):
            continue  # reached again through a symbolic link (or named twice)
        patterns = inherited if no_ignore else inherited + _parse_gitignore(os.path.abspath(folder))
        try:
            with os.scandir(folder) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            yield folder, f"cannot read directory: {_os_reason(exc)}"
            continue
        subdirs = []
        for entry in entries:
            if not no_ignore and entry.name.startswith("."):
                continue
            try:
                est = entry.stat()  # follows a symbolic link
            except OSError as exc:
                if entry.name.endswith(SUFFIXES):
                    yield entry.path, _os_reason(exc) if exc.errno != errno.ENOENT else "broken symbolic link"
                continue
            is_dir = stat.S_ISDIR(est.st_mode)
            if not no_ignore:
                if is_dir and entry.name in SKIP_DIRS:
                    continue
                if _ignored(os.path.abspath(entry.path), is_dir, patterns):
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


# -- reading ------------------------------------------------------------------------------------------
@dataclass
class SourceFile:
    path: str
    text: str
    raw: bytes
    encoding: str  # as tokenize names it; "utf-8-sig" when the file starts with a BOM
    newline: Optional[str]  # "\n", "\r\n", or None when mixed / none (left alone)
    bom: bool
    mtime_ns: int
    mode: int


def _read_bytes(path: str) -> tuple[bytes, os.stat_result]:
    """The bytes and the status of one open file (no window between the two)."""
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused just below.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise FileError(_os_reason(exc)) from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise FileError("is a directory")
        if not stat.S_ISREG(st.st_mode):
            raise FileError("not a regular file")
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks), st
    except OSError as exc:
        raise FileError(_os_reason(exc)) from None
    finally:
        os.close(fd)


_COOKIE = re.compile(rb"^[ \t\f]*#.*?coding[:=]")  # PEP 263


def read_source(path: str) -> SourceFile:
    raw, st = _read_bytes(path)
    if b"\x00" in raw[:8192]:
        raise FileError("binary file (contains NUL bytes); not analysed")
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(raw).readline)
    except SyntaxError as exc:
        if raw.startswith(b"\xef\xbb\xbf") or any(_COOKIE.match(ln) for ln in raw.splitlines()[:2]):
            raise FileError(f"bad encoding declaration: {exc.msg}") from None
        encoding = "utf-8"  # no declaration, just bytes that are not UTF-8: said precisely below
    try:
        text = raw.decode(encoding)
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        name = "utf-8" if encoding == "utf-8-sig" else encoding
        raise FileError(
            f"not valid {name} text (byte 0x{raw[exc.start]:02x} on line {line}); "
            "if the file uses another encoding, declare it with a `# -*- coding: NAME -*-` line"
        ) from None
    crlf = raw.count(b"\r\n")
    lf = raw.count(b"\n") - crlf
    newline = "\r\n" if crlf and not lf else ("\n" if lf and not crlf else None)
    # LibCST keeps line endings as written, so the text is passed through untouched.
    return SourceFile(
        path, text, raw, encoding, newline, encoding == "utf-8-sig", st.st_mtime_ns, stat.S_IMODE(st.st_mode)
    )


# -- writing ------------------------------------------------------------------------------------------
def _keep_style(src: SourceFile, new_text: str) -> str:
    """Give inserted text the file's newline style and its missing final newline back.

    LibCST writes what it parsed, and new nodes take the module's detected newline; this is the
    safety net for a rewrite that brings its own "\\n". Mixed newline styles are left alone.
    """
    if src.newline == "\r\n":
        new_text = re.sub(r"(?<!\r)\n", "\r\n", new_text)
    if src.text and not src.text.endswith(("\n", "\r")):
        for nl in ("\r\n", "\n", "\r"):
            if new_text.endswith(nl):
                stripped = new_text[: -len(nl)]
                if not stripped.endswith(("\n", "\r", "\\")):
                    new_text = stripped
                break
    return new_text


def encode_text(src: SourceFile, new_text: str) -> bytes:
    """The bytes for new_text in the file's own encoding (the BOM comes back with utf-8-sig)."""
    try:
        return new_text.encode(src.encoding)
    except UnicodeEncodeError as exc:
        raise FileError(
            f"the rewrite contains {exc.object[exc.start:exc.end]!r}, which {src.encoding} cannot encode; not written"
        ) from None


def write_source(src: SourceFile, new_text: str) -> None:
    """Atomically replace the file: temp file beside it, fsync, rename; mode, owner, encoding kept.

    Refuses (FileError) when the file's bytes changed since `src` was read, when it is read-only
    (no write permission bit at all counts, even for root), when it has other hard links (the
    rename would silently detach them), or when its folder cannot take a new file.
    """
    target = os.path.realpath(src.path)  # a symbolic link stays a link; its target is rewritten
    current, st = _read_bytes(target)
    if current != src.raw:
        raise FileError("file changed on disk since it was read; not written")
    if not (st.st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)) or not os.access(target, os.W_OK):
        raise FileError("file is read-only; not written")
    if st.st_nlink > 1:
        raise FileError(f"file has {st.st_nlink} hard links and replacing it would break them; not written")
    data = encode_text(src, _keep_style(src, new_text))
    folder = os.path.dirname(target) or "."
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(target)}.", suffix=".pallas-fix.tmp", dir=folder)
    except OSError as exc:
        raise FileError(f"cannot create a file in {folder} ({_os_reason(exc)}); not written") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, stat.S_IMODE(st.st_mode))
        if hasattr(os, "chown") and (st.st_uid, st.st_gid) != (os.geteuid(), os.getegid()):
            try:
                os.chown(tmp, st.st_uid, st.st_gid)
            except OSError:
                pass  # only root may give a file away; the owner's own write keeps its uid anyway
        os.replace(tmp, target)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise FileError(f"cannot write ({_os_reason(exc)}); the file is unchanged") from None
        raise
    _fsync_dir(folder)


def _fsync_dir(folder: str) -> None:
    """Make the rename itself durable; best effort (not every platform can open a folder)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
