"""Files for the front ends: writing a rewrite back safely (here), and, re-exported so this is
their one import for files, which files a run looks at (file_walk) and reading them without
losing anything (source_reading).

Writing goes through a temporary file in the same folder renamed over the original, so a crash
never leaves half a file, and refuses when the file changed since it was read. Every problem with
one file is a `FileError`: the run reports it and carries on.
"""

from __future__ import annotations

import os
import re
import stat
import tempfile

from pallas_fix.frontends.files.file_errors import FileError, os_reason
from pallas_fix.frontends.files.file_walk import iter_files
from pallas_fix.frontends.files.source_reading import SourceFile, read_bytes, read_source

__all__ = ["FileError", "SourceFile", "iter_files", "read_source", "write_source"]


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


def _encode(src: SourceFile, new_text: str) -> bytes:
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
    current, st = read_bytes(target)
    if current != src.raw:
        raise FileError("file changed on disk since it was read; not written")
    if not (st.st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)) or not os.access(target, os.W_OK):
        raise FileError("file is read-only; not written")
    if st.st_nlink > 1:
        raise FileError(f"file has {st.st_nlink} hard links and replacing it would break them; not written")
    data = _encode(src, _keep_style(src, new_text))
    folder = os.path.dirname(target) or "."
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(target)}.", suffix=".pallas-fix.tmp", dir=folder)
    except OSError as exc:
        raise FileError(f"cannot create a file in {folder} ({os_reason(exc)}); not written") from None
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
            raise FileError(f"cannot write ({os_reason(exc)}); the file is unchanged") from None
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
