"""The consoles the CLI prints on, and the spinner shown while interpreters run."""

from __future__ import annotations

import os
import sys


def console(stderr: bool = False):
    from rich.console import Console

    # markup=False: paths and messages are printed as they are (`[...]` in them is not markup);
    # lines that want style escape what they interpolate (`_e`).
    return Console(stderr=stderr, highlight=False, soft_wrap=True, markup=False)


def escape(value) -> str:
    from rich.markup import escape as rich_escape

    return rich_escape(str(value))


def progress(message: str):
    """A spinner on a terminal while the interpreters run; nothing when output is piped."""
    import contextlib

    if not sys.stderr.isatty() or os.environ.get("CI"):
        return contextlib.nullcontext()
    return console(stderr=True).status(message, spinner="dots")
