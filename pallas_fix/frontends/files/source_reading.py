"""Reading a source file without losing anything a rewrite must give back: the declared encoding
(PEP 263 cookie or a UTF-8 BOM), the newline style, tabs and a missing final newline (the text is
never normalised; LibCST reproduces what it parsed). Every problem is a `FileError`."""

from __future__ import annotations

import io
import os
import re
import stat
import tokenize
from dataclasses import dataclass
from typing import Optional

from pallas_fix.frontends.files.file_errors import FileError, os_reason


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


def read_bytes(path: str) -> tuple[bytes, os.stat_result]:
    """The bytes and the status of one open file (no window between the two)."""
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused just below.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise FileError(os_reason(exc)) from None
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
        raise FileError(os_reason(exc)) from None
    finally:
        os.close(fd)


_COOKIE = re.compile(rb"^[ \t\f]*#.*?coding[:=]")  # PEP 263


def read_source(path: str) -> SourceFile:
    raw, st = read_bytes(path)
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
