"""`[tool.pallas-fix]` settings from the nearest pyproject.toml, merged with command-line options.

This is the one place that knows each setting's valid values: the pyproject loader, the CLI's
options and the language server's settings all validate through the `parse_*` functions here.
"""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Optional

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from pallas_fix.core.model import Backend
from pallas_fix.core.traced_facts import TracedFacts


class ConfigError(ValueError):
    @property
    def reason(self) -> str:
        """The problem in words that stand without the offending value (the editor's warning)."""
        return str(self)


class SettingError(ConfigError):
    """One setting given a value it cannot take: `KEY must be EXPECTED, not VALUE` (without the
    `not` part when no value is passed). Each front end puts it in its own words: the pyproject
    loader prefixes `[tool.pallas-fix]`, the language server shows `reason` and "; ignored"."""

    def __init__(self, key: str, expected: str, *value) -> None:
        self.key, self.expected = key, expected
        super().__init__(self.reason + (f", not {value[0]!r}" if value else ""))

    @property
    def reason(self) -> str:
        return f"{self.key} must be {self.expected}"


@dataclass(frozen=True)
class Config:
    select: tuple[str, ...] = ()  # code prefixes; empty = all
    ignore: tuple[str, ...] = ()
    backend: Optional[Backend] = None
    target: str = "default"  # "default" | "gpu-interpret" | "compiled"
    unroll_limit: int = 16
    unsafe_fixes: bool = False
    # `--apply` writes a verified lift that only trades speed for memory on TPU (core.speed) too.
    lift_for_memory: bool = False
    examples: dict[str, list[str]] = field(default_factory=dict)  # glob -> example strings
    source: Optional[Path] = None  # the pyproject.toml it came from
    # What tracing the examples showed (core.traced_facts): set by `--apply` only, never read
    # from a file; plans that rest on it are unsafe fixes.
    traced_facts: Optional[TracedFacts] = None

    def enabled(self, code: str) -> bool:
        if self.select and not any(code.startswith(p) for p in self.select):
            return False
        return not any(code.startswith(p) for p in self.ignore)

    def merged(self, **overrides) -> "Config":
        clean = {k: v for k, v in overrides.items() if v is not None and v != ()}
        return replace(self, **clean)


def find_pyproject(start: Path) -> Optional[Path]:
    start = start.resolve()
    for folder in [start] + list(start.parents) if start.is_dir() else list(start.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None


# -- the valid values of each setting: every front end validates through these ------------------
# "compiled": kernels are compiled, never run in GPU interpret mode, whatever the module says.
TARGETS = ("default", "gpu-interpret", "compiled")
_BACKENDS = {"tpu": "tpu", "mosaic_gpu": "mosaic_gpu", "mosaic-gpu": "mosaic_gpu", "gpu": "mosaic_gpu", "triton": "triton"}


def parse_codes(value, key: str) -> tuple[str, ...]:
    """A rule code or a list of them (prefixes allowed), upper-cased."""
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SettingError(key, "a list of rule codes")
    return tuple(v.upper() for v in value)


def parse_backend(value) -> Optional[Backend]:
    if value is None:
        return None
    if not isinstance(value, str):
        raise SettingError("backend", "a string", value)
    key = _BACKENDS.get(value.lower())
    if key is None:
        raise ConfigError(f"unknown backend {value!r}: use tpu, mosaic-gpu or triton")
    return Backend(key)


def parse_target(value) -> str:
    if value not in TARGETS:
        raise SettingError("target", "one of " + ", ".join(TARGETS), value)
    return value


def parse_unroll_limit(value) -> int:
    # bool is an int subclass; `unroll-limit = true` is a mistake, not 1.
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SettingError("unroll-limit", "a non-negative integer", value)
    return value


def parse_flag(value, key: str) -> bool:
    if not isinstance(value, bool):
        raise SettingError(key, "true or false", value)
    return value


def _parse_examples(value) -> dict[str, list[str]]:
    if not isinstance(value, dict) or not all(
        isinstance(v, str) or (isinstance(v, list) and all(isinstance(x, str) for x in v)) for v in value.values()
    ):
        raise ConfigError("[tool.pallas-fix.examples] must be a table of example strings (or lists of them)")
    return {str(k): ([v] if isinstance(v, str) else list(v)) for k, v in value.items()}


# -- pyproject.toml ----------------------------------------------------------------------------------
def load_config(path: Path) -> Config:
    pyproject = find_pyproject(path)
    if pyproject is None:
        return Config()
    try:
        raw = pyproject.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{pyproject}: {exc}") from exc
    # One parse per pyproject.toml content, not one per file checked: parsing costs more than
    # reading a file that has no kernel. Keyed by content so that an edit is always seen (the
    # language server is long-lived; mtimes can repeat within a clock tick).
    return _load_pyproject(pyproject, raw)


@functools.lru_cache(maxsize=32)
def _load_pyproject(pyproject: Path, raw: bytes) -> Config:
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{pyproject}: {exc}") from exc
    tool = data.get("tool", {})
    table = tool.get("pallas-fix", {}) if isinstance(tool, dict) else {}
    if not isinstance(table, dict):
        raise ConfigError(f"{pyproject}: [tool.pallas-fix] must be a table")
    try:
        return _from_table(table, pyproject)
    except ConfigError as exc:
        raise ConfigError(f"{pyproject}: {exc}") from None


def _from_table(table: dict, pyproject: Path) -> Config:
    try:
        examples = _parse_examples(table.get("examples", {}))
        return Config(
            target=parse_target(table.get("target", "default")),
            unroll_limit=parse_unroll_limit(table.get("unroll-limit", 16)),
            unsafe_fixes=parse_flag(table.get("unsafe-fixes", False), "unsafe-fixes"),
            lift_for_memory=parse_flag(table.get("lift-for-memory", False), "lift-for-memory"),
            select=parse_codes(table.get("select", []), "select"),
            ignore=parse_codes(table.get("ignore", []), "ignore"),
            backend=parse_backend(table.get("backend")),
            examples=examples,
            source=pyproject,
        )
    except SettingError as exc:
        raise ConfigError(f"[tool.pallas-fix] {exc}") from None
