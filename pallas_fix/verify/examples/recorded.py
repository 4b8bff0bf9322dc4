"""Examples recorded from the user's own runs: ``pallas-fix-examples.json``.

``pallas-fix record -- CMD`` (:mod:`pallas_fix.frontends.cli.record`) writes the file; verification
reads it (:func:`pallas_fix.verify.examples.sources.collect_examples`). The format::

    {"version": 1,
     "examples": {"kernels/matmul.py": ["matmul(f32[128, 256], f32[256, 128], block_k=128)"]}}

Keys are the kernel files' paths relative to the directory holding the file (``/``-separated);
values are example calls in the grammar of :mod:`pallas_fix.core.example_parser`. A file's
examples come from the nearest ``pallas-fix-examples.json`` at or above it. Nothing here imports
jax.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional

from pallas_fix.core.config import ConfigError
from pallas_fix.core.examples import Example, parse_example

__all__ = ["RECORD_FILE", "RECORD_ORIGIN", "VERSION", "examples_from_recording", "find_recording", "read_recording"]

RECORD_FILE = "pallas-fix-examples.json"
RECORD_ORIGIN = f"recorded ({RECORD_FILE})"
VERSION = 1


def find_recording(path: str | os.PathLike) -> Optional[Path]:
    """The nearest ``pallas-fix-examples.json`` at or above ``path`` (a file or a folder)."""
    start = Path(path).resolve()
    folders = [start, *start.parents] if start.is_dir() else list(start.parents)
    for folder in folders:
        candidate = folder / RECORD_FILE
        if candidate.is_file():
            return candidate
    return None


def read_recording(file: str | os.PathLike) -> dict[str, list[str]]:
    """The ``examples`` table of a recording, checked; raises :class:`ConfigError` when the file
    cannot be read or is not in the format above."""
    file = Path(file)
    try:
        doc = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{file}: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{file}: not valid JSON ({exc})") from exc
    if not isinstance(doc, dict) or doc.get("version") != VERSION:
        raise ConfigError(f"{file}: expected a JSON object with \"version\": {VERSION}")
    table = doc.get("examples", {})
    if not isinstance(table, dict):
        raise ConfigError(f"{file}: \"examples\" must map file paths to lists of example calls")
    for key, texts in table.items():
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            raise ConfigError(f"{file}: \"examples\"[{key!r}] must be a list of example calls (strings)")
    return table


def examples_from_recording(path: str | os.PathLike, *, constants: Optional[dict] = None) -> list[Example]:
    """The recorded examples of the file at ``path``, in file order (raises ConfigError for a
    malformed recording, ExampleSyntaxError for a malformed example in it)."""
    recording = find_recording(path)
    if recording is None:
        return []
    try:
        rel = Path(path).resolve().relative_to(recording.parent.resolve()).as_posix()
    except ValueError:
        return []
    texts = read_recording(recording).get(rel, [])
    return [parse_example(text, constants=constants, origin=RECORD_ORIGIN) for text in texts]
