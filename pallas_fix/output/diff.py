"""Unified diffs of a proposed rewrite, `a/PATH` against `b/PATH`."""

from __future__ import annotations

import difflib


def unified_diff(path: str, before: str, after: str) -> str:
    return "".join(
        difflib.unified_diff(
            before.splitlines(keepends=True),
            after.splitlines(keepends=True),
            fromfile=f"a/{path}",
            tofile=f"b/{path}",
        )
    )
