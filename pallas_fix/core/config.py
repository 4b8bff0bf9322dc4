"""`[tool.pallas-fix]` settings from the nearest pyproject.toml, merged with command-line options."""

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


class ConfigError(ValueError):
    pass


@dataclass(frozen=True)
class Config:
    select: tuple[str, ...] = ()  # code prefixes; empty = all
    ignore: tuple[str, ...] = ()
    backend: Optional[Backend] = None
    target: str = "default"  # "default" | "gpu-interpret"
    unroll_limit: int = 16
    unsafe_fixes: bool = False
    examples: dict[str, list[str]] = field(default_factory=dict)  # glob -> example strings
    source: Optional[Path] = None  # the pyproject.toml it came from

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


def _codes(value, key: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"[tool.pallas-fix] {key} must be a list of rule codes")
    return tuple(v.upper() for v in value)


def parse_backend(value: Optional[str]) -> Optional[Backend]:
    if value is None:
        return None
    aliases = {"tpu": "tpu", "mosaic_gpu": "mosaic_gpu", "mosaic-gpu": "mosaic_gpu", "gpu": "mosaic_gpu", "triton": "triton"}
    key = aliases.get(value.lower())
    if key is None:
        raise ConfigError(f"unknown backend {value!r}: use tpu, mosaic-gpu or triton")
    return Backend(key)


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


TARGETS = ("default", "gpu-interpret")


def _from_table(table: dict, pyproject: Path) -> Config:
    examples = table.get("examples", {})
    if not isinstance(examples, dict) or not all(
        isinstance(v, str) or (isinstance(v, list) and all(isinstance(x, str) for x in v)) for v in examples.values()
    ):
        raise ConfigError("[tool.pallas-fix.examples] must be a table of example strings (or lists of them)")
    target = table.get("target", "default")
    if target not in TARGETS:
        raise ConfigError(f"[tool.pallas-fix] target must be one of {', '.join(TARGETS)}, not {target!r}")
    unroll_limit = table.get("unroll-limit", 16)
    # bool is an int subclass; `unroll-limit = true` is a mistake, not 1.
    if isinstance(unroll_limit, bool) or not isinstance(unroll_limit, int) or unroll_limit < 0:
        raise ConfigError(f"[tool.pallas-fix] unroll-limit must be a non-negative integer, not {unroll_limit!r}")
    backend = table.get("backend")
    if backend is not None and not isinstance(backend, str):
        raise ConfigError(f"[tool.pallas-fix] backend must be a string, not {backend!r}")
    unsafe_fixes = table.get("unsafe-fixes", False)
    if not isinstance(unsafe_fixes, bool):
        raise ConfigError(f"[tool.pallas-fix] unsafe-fixes must be true or false, not {unsafe_fixes!r}")
    return Config(
        select=_codes(table.get("select", []), "select"),
        ignore=_codes(table.get("ignore", []), "ignore"),
        backend=parse_backend(backend),
        target=target,
        unroll_limit=unroll_limit,
        unsafe_fixes=unsafe_fixes,
        examples={str(k): ([v] if isinstance(v, str) else list(v)) for k, v in examples.items()},
        source=pyproject,
    )
