"""One analysed module: its parse, its pallas_call sites and the dynamic indices in their kernels.

Built once per source text by `analyze` and never changed afterwards: rules read it, planners read
it, and the engine derives findings and plans from it into a result of its own.
"""

from __future__ import annotations

import ast
import re
import warnings
from dataclasses import dataclass
from typing import Optional

import libcst as cst

from pallas_fix.analysis.context import ModuleContext
from pallas_fix.analysis.detection import Detection, detect
from pallas_fix.analysis.discovery.discovery import discover
from pallas_fix.analysis.discovery.reachable import reachable_source
from pallas_fix.core.config import Config
from pallas_fix.core.model import IndexUse, KernelSite


class SourceError(Exception):
    """The source cannot be analysed (syntax error): the message names the place."""

    def __init__(self, path: str, message: str, line: int = 1, column: int = 0) -> None:
        super().__init__(f"{path}:{line}:{column + 1}: {message}")
        self.path = path
        self.line = line
        self.column = column
        self.reason = message


@dataclass(frozen=True)
class Analysis:
    path: str
    source: str
    config: Config
    # None when the source never mentions pallas_call: such files are not even parsed.
    ctx: Optional[ModuleContext] = None
    sites: tuple[KernelSite, ...] = ()
    detection: Optional[Detection] = None

    @property
    def uses(self) -> list[IndexUse]:
        return self.detection.uses if self.detection else []


def mentions_pallas(source: str) -> bool:
    """Could the module hold a kernel: a pallas_call, or a `pl.kernel` / `plgpu.kernel` entry."""
    return "pallas_call" in source or (".kernel(" in source and "pallas" in source)


# LibCST's message repeats the place in its own numbering ("parser error: error at 14:4: ..."),
# which disagrees with the line and column every front end reports; only the reason is kept.
_PLACE_IN_MESSAGE = re.compile(r"^(?:parser error: )?error at \d+:\d+: ")


def parse_error(path: str, exc: cst.ParserSyntaxError, source: Optional[str] = None) -> SourceError:
    """The syntax error of `source` where Python itself puts it (`ast.parse`'s line, offset and
    message): LibCST's position can be a line or two later, and a report parses a reduced text
    whose lines are not the file's. LibCST's own place only when Python accepts the text."""
    python = python_syntax_error(source) if source is not None else None
    if python is not None:
        return python_error(path, python)
    reason = _PLACE_IN_MESSAGE.sub("", exc.message)
    return SourceError(path, f"syntax error: {reason}", exc.raw_line, exc.raw_column)


def python_syntax_error(source: str) -> Optional[SyntaxError]:
    """What `ast.parse` raises for `source`, or None when it parses."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the user's invalid escapes are not ours to report
            ast.parse(source)
    except SyntaxError as exc:  # IndentationError and TabError too
        return exc
    except (ValueError, MemoryError, RecursionError):  # null bytes; nesting past the parser's limit
        return None
    return None


def python_error(path: str, exc: SyntaxError) -> SourceError:
    """`exc` as a SourceError: Python's 1-based line, its 1-based offset as a 0-based column."""
    return SourceError(path, f"syntax error: {exc.msg}", exc.lineno or 1, max((exc.offset or 1) - 1, 0))


def analyze(source: str, path: str = "<string>", config: Optional[Config] = None, *, reach: bool = False) -> Analysis:
    """`reach`: parse only the statements the analysis can reach (`analysis.discovery.reachable`); the
    result then cannot be rewritten (its tree is not the file's), only reported."""
    config = config or Config()
    if not mentions_pallas(source):
        return Analysis(path, source, config)
    # Under --target gpu-interpret every kernel is held to that mode's rules: analysed whole, as
    # before the reduction (a module naming the mode keeps the statements that do).
    reached = reachable_source(source) if reach and config.target != "gpu-interpret" else None
    try:
        ctx = ModuleContext(source, path, cst.parse_module(reached) if reached is not None else None, reduced=reached is not None)
    except cst.ParserSyntaxError as exc:
        raise parse_error(path, exc, source) from exc
    return analyze_sites(ctx, config, discover(ctx, config.backend))


def analyze_sites(ctx: ModuleContext, config: Config, sites) -> Analysis:
    """The analysis of some of an indexed module's sites (all of them for `analyze`; the language
    server re-analyses only the kernels an edit touched)."""
    sites = tuple(sites)
    ctx.traced_facts = config.traced_facts
    return Analysis(ctx.path, ctx.source, config, ctx, sites, detect(ctx, list(sites)))
