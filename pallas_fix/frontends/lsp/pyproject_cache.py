"""`[tool.pallas-fix]` for the language server: read once per pyproject.toml version, with the
reason when it is broken (the document is then checked with the defaults)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from pallas_fix.core.config import Config, ConfigError, find_pyproject, load_config


class ConfigCache:
    """`[tool.pallas-fix]` per pyproject.toml, re-read when the file's mtime or size changes."""

    def __init__(self) -> None:
        self._entries: dict[Path, tuple[tuple[int, int], Config, Optional[str]]] = {}

    def clear(self) -> None:
        self._entries.clear()

    def get(self, file: Optional[Path]) -> tuple[Config, Optional[str]]:
        """The config for `file` and, when the pyproject.toml is broken, why (defaults apply)."""
        if file is None:
            return Config(), None
        try:
            pyproject = find_pyproject(file)
        except OSError:
            return Config(), None
        if pyproject is None:
            return Config(), None
        try:
            st = pyproject.stat()
        except OSError:
            return Config(), None
        stamp = (st.st_mtime_ns, st.st_size)
        cached = self._entries.get(pyproject)
        if cached is not None and cached[0] == stamp:
            return cached[1], cached[2]
        try:
            config, problem = load_config(file), None
        except (ConfigError, ValueError, TypeError) as exc:
            config, problem = Config(source=pyproject), f"{exc}"
        self._entries[pyproject] = (stamp, config, problem)
        return config, problem
