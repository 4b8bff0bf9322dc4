"""Short, readable descriptions of what went wrong inside the worker (for Verdict messages).

jax errors carry long tracebacks and interpreter dumps; a verdict message keeps the last error
line, a race summary, or for a bare ``assert`` the line that fired.
"""

from __future__ import annotations

import os
import re
import traceback

from pallas_fix.verify.worker.races import summarize_race

# The errors a non-integer-scalar slice start raises (see PF107 and pallas-notes.md).
NON_SCALAR_START = re.compile(
    r"start_indices arguments to dynamic_slice must be scalars|Dynamic indexing not supported in GPU interpret mode"
    r"|Advanced indexers are not supported"
)

_ERROR_LINE = re.compile(r"^\s*[A-Za-z_.]*(Error|Exception|Warning)\b:?")


def _race_summary(lines: list[str]) -> str | None:
    race = [ln for ln in lines if "RACE DETECTED" in ln]
    if not race:
        return None
    return "race detected: " + summarize_race("\n".join(lines[lines.index(race[0]):]))


def _last_error_line(lines: list[str], text: str) -> str:
    """The one line of a long message that says what failed."""
    errs = [ln.strip() for ln in lines if _ERROR_LINE.match(ln)]
    if errs:
        return errs[-1]
    return lines[-1] if lines else text


def _assert_site(e: BaseException) -> str:
    """For a bare ``assert``: where it fired, and the asserted line."""
    tb = traceback.extract_tb(e.__traceback__)
    if not tb:
        return ""
    fr = tb[-1]
    parts = fr.filename.replace(os.sep, "/").split("/")
    short = "/".join(parts[parts.index("jax"):]) if "jax" in parts else os.path.basename(fr.filename)
    return f"at {short}:{fr.lineno}" + (f": `{fr.line.strip()}`" if fr.line else "")


def summarize_exc(e: BaseException) -> str:
    text = str(e).strip()
    if "Traceback (most recent call last)" in text or len(text.splitlines()) > 6:
        lines = [ln for ln in text.splitlines() if ln.strip()]
        race = _race_summary(lines)
        if race is not None:
            return race
        text = _last_error_line(lines, text)
    text = text if len(text) < 600 else text[:600] + "..."
    if not text:
        text = _assert_site(e)
    return f"{type(e).__name__}: {text}"


def raised_by_user(e: BaseException) -> bool:
    """The innermost frame of `e` is the user's (original or rewritten) code: an explicit check."""
    tb = traceback.extract_tb(e.__traceback__)
    return bool(tb) and _is_user_file(tb[-1].filename)


def _is_user_file(filename: str) -> bool:
    return "_pallas_fix_verify_" in filename or "/original/" in filename or "/rewritten/" in filename


def user_frame(e: BaseException) -> str:
    """`` (at kernel.py:12)``: the innermost frame in the user's (original or rewritten) code."""
    tb = traceback.extract_tb(e.__traceback__)
    for fr in reversed(tb):
        if "_pallas_fix_verify_" in fr.filename or "/original/" in fr.filename or "/rewritten/" in fr.filename:
            return f" (at {os.path.basename(fr.filename)}:{fr.lineno})"
    return ""
