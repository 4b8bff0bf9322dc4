"""Splitting text into lines the way Python, LibCST and the language server protocol do: only at
`\\r\\n`, `\\r` and `\\n`, not at the other characters `str.splitlines` splits at (form feed,
U+2028, ...). Notebook cells and editor documents are both counted this way."""

from __future__ import annotations

import re

_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


def split_lines(text: str) -> list[str]:
    """Lines with their terminators."""
    return _LINE.findall(text)
