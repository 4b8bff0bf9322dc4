"""The one error type for a problem with one file, and OS errors said in a few plain words."""

from __future__ import annotations

import errno


class FileError(Exception):
    """A per-file problem: the run reports it, exits 2 at the end and carries on."""


def os_reason(exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return "symbolic link loop"
    if exc.errno == errno.ENOENT:
        return "no such file or directory"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    if exc.errno == errno.EISDIR:
        return "is a directory"
    return exc.strerror or str(exc)
