""".gitignore patterns, matched the way git matches them (last match wins, `!` re-includes,
a trailing `/` for folders only, `**` across folders), for the folders a run walks."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Pattern:
    base: str  # absolute folder of the .gitignore that holds it
    regex: "re.Pattern[str]"
    negate: bool
    dir_only: bool


def _translate(pat: str) -> str:
    """A gitignore glob (no leading slash) as a regex over '/'-separated relative paths."""
    out = []
    i, n = 0, len(pat)
    while i < n:
        c = pat[i]
        at_segment_start = i == 0 or pat[i - 1] == "/"
        if c == "*" and pat.startswith("**", i) and at_segment_start and (i + 2 == n or pat[i + 2] == "/"):
            if i + 2 == n:
                out.append(".*")
                i += 2
            else:
                out.append("(?:.*/)?")
                i += 3
        elif c == "*":
            out.append("[^/]*")
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[":
            j = i + 1
            if j < n and pat[j] in "!^":
                j += 1
            if j < n and pat[j] == "]":
                j += 1
            while j < n and pat[j] != "]":
                j += 1
            if j >= n:
                out.append(re.escape(c))
                i += 1
                continue
            body = pat[i + 1 : j]
            if body[:1] in ("!", "^"):
                body = "^" + body[1:]
            out.append("[" + body.replace("\\", "\\\\") + "]")
            i = j + 1
        elif c == "\\" and i + 1 < n:
            out.append(re.escape(pat[i + 1]))
            i += 2
        else:
            out.append(re.escape(c))
            i += 1
    return "".join(out)


def parse_gitignore(folder: str) -> list[Pattern]:
    try:
        with open(os.path.join(folder, ".gitignore"), encoding="utf-8", errors="replace") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return []
    patterns = []
    for line in lines:
        if not line.strip() or line.startswith("#"):
            continue
        line = re.sub(r"(?<!\\)\s+$", "", line)  # unescaped trailing spaces are not part of it
        negate = line.startswith("!")
        if negate:
            line = line[1:]
        elif line.startswith("\\"):
            line = line[1:] if line[1:2] in ("!", "#") else line
        dir_only = line.endswith("/")
        line = line.rstrip("/")
        if not line:
            continue
        anchored = "/" in line
        body = _translate(line.lstrip("/"))
        regex = re.compile(body if anchored else "(?:.*/)?" + body, re.DOTALL)
        patterns.append(Pattern(folder, regex, negate, dir_only))
    return patterns


def ignored(path: str, is_dir: bool, patterns: list[Pattern]) -> bool:
    """Last matching pattern wins, as in git."""
    verdict = False
    for p in patterns:
        if p.dir_only and not is_dir:
            continue
        prefix = p.base.rstrip(os.sep) + os.sep
        if not path.startswith(prefix):
            continue
        rel = path[len(prefix) :]
        if p.regex.fullmatch(rel if os.sep == "/" else rel.replace(os.sep, "/")):
            verdict = not p.negate
    return verdict


def ancestor_patterns(root: str) -> list[Pattern]:
    """.gitignore files of the folders above `root`, up to the top of its git work tree.

    Outside a git work tree none apply: git itself would not read them.
    """
    if os.path.exists(os.path.join(root, ".git")):
        return []
    chain = []
    folder = root
    while True:
        parent = os.path.dirname(folder)
        if parent == folder:
            return []
        folder = parent
        chain.append(folder)
        if os.path.exists(os.path.join(folder, ".git")):
            break
    patterns: list[Pattern] = []
    for folder in reversed(chain):
        patterns += parse_gitignore(folder)
    return patterns
