"""What the server holds for each open document: its text and version, the last analysis and the
one under way, and which configuration problems it has already shown."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from pygls.uris import to_fs_path

from pallas_fix.core.config import Config
from pallas_fix.frontends.lsp.snapshot import Snapshot


@dataclass
class DocState:
    uri: str
    path: str
    file: Optional[Path]
    version: Optional[int] = None
    text: str = ""
    snapshot: Optional[Snapshot] = None
    task: Optional[asyncio.Task] = None
    inflight: Optional[tuple[Optional[int], str, Config, asyncio.Future]] = None
    closed: bool = False
    config_problem_shown: set[str] = field(default_factory=set)

    def close(self) -> None:
        """Stop its pending check; results still on their way for it are then dropped."""
        self.closed = True
        if self.task is not None:
            self.task.cancel()


def uri_path(uri: str) -> tuple[str, Optional[Path]]:
    """The path findings name (the URI itself when it is not a file) and the file, if there is one."""
    try:
        fs = to_fs_path(uri) if uri.startswith("file:") else None
    except Exception:
        fs = None
    if fs:
        return fs, Path(fs)
    return uri, None
