"""Where synthesised examples are kept between runs: one JSON file per source text.

The key is a hash of the file's text, the installed jax version and :data:`SYNTHESIS_VERSION`
(bumped whenever candidates are built differently), so an edit, a jax upgrade or a new
pallas-fix all try the candidates again. The directory is ``$PALLAS_FIX_CACHE_DIR``, else
``$XDG_CACHE_HOME/pallas-fix``, else ``~/.cache/pallas-fix``; ``examples/`` below it. A cache
that cannot be read or written is no cache: verification tries the candidates again.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Optional

SYNTHESIS_VERSION = 2


def cache_dir() -> Path:
    root = os.environ.get("PALLAS_FIX_CACHE_DIR")
    if root:
        return Path(root) / "examples"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "pallas-fix" / "examples"


def jax_version() -> str:
    try:
        return metadata.version("jax")
    except metadata.PackageNotFoundError:
        return "no jax"


def cache_key(source: str) -> str:
    text = f"{SYNTHESIS_VERSION}\0{jax_version()}\0{source}"
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def load(key: str) -> Optional[dict]:
    try:
        with open(cache_dir() / f"{key}.json", encoding="utf-8") as f:
            payload = json.load(f)
    except (OSError, ValueError):
        return None
    return payload if isinstance(payload, dict) else None


def store(key: str, payload: dict) -> None:
    """Write atomically (a concurrent reader sees the old file or the new one, never half)."""
    directory = cache_dir()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{key}.", suffix=".tmp")
    except OSError:
        return
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(payload, f)
        os.replace(tmp, directory / f"{key}.json")
    except OSError:
        Path(tmp).unlink(missing_ok=True)
