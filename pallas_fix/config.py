"""`[tool.pallas-fix]` settings from the nearest pyproject.toml, merged with command-line options."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Optional

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from .model import Backend


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
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{pyproject}: {exc}") from exc
    table = data.get("tool", {}).get("pallas-fix", {})
    if not isinstance(table, dict):
        raise ConfigError(f"{pyproject}: [tool.pallas-fix] must be a table")
    examples = table.get("examples", {})
    if not isinstance(examples, dict):
        raise ConfigError(f"{pyproject}: [tool.pallas-fix.examples] must be a table")
    return Config(
        select=_codes(table.get("select", []), "select"),
        ignore=_codes(table.get("ignore", []), "ignore"),
        backend=parse_backend(table.get("backend")),
        target=str(table.get("target", "default")),
        unroll_limit=int(table.get("unroll-limit", 16)),
        unsafe_fixes=bool(table.get("unsafe-fixes", False)),
        examples={str(k): ([v] if isinstance(v, str) else list(v)) for k, v in examples.items()},
        source=pyproject,
    )
