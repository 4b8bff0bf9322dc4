"""The editor's settings (initializationOptions, didChangeConfiguration) and how they override the
pyproject.toml configuration. Values are validated by pallas_fix.core.config, as the CLI's and the
pyproject loader's are; an invalid one is reported and skipped rather than failing the session."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Optional

from pallas_fix.core.config import Config, ConfigError, SettingError, parse_backend, parse_codes, parse_flag, parse_target

DEFAULT_DEBOUNCE_S = 0.25
_UNSAFE_FIXES_NAMES = ("unsafeFixes", "unsafe-fixes", "unsafe_fixes")
# Read in this order, so that problems are reported (and repeated names win) the same way every time.
_OPTION_NAMES = ("select", "ignore", "backend", *_UNSAFE_FIXES_NAMES, "target", "debounceMs")


@dataclass(frozen=True)
class Settings:
    """Editor-side settings; each one given overrides the pyproject.toml value."""

    select: Optional[tuple[str, ...]] = None
    ignore: Optional[tuple[str, ...]] = None
    backend: Optional[str] = None
    unsafe_fixes: Optional[bool] = None
    target: Optional[str] = None
    debounce_s: float = DEFAULT_DEBOUNCE_S

    @classmethod
    def parse(cls, options: Any, base: Optional["Settings"] = None) -> tuple["Settings", list[str]]:
        """Settings from initializationOptions / didChangeConfiguration, and the problems found."""
        base = base or cls()
        if not isinstance(options, dict):
            return base, ([] if options is None else ["initialization options must be an object; ignored"])
        values: dict[str, Any] = {}
        problems: list[str] = []
        options = _own_section(options)
        for name in (n for n in _OPTION_NAMES if n in options):
            try:
                values.update(_setting(name, options[name]))
            except ConfigError as exc:
                problems.append(f"{exc.reason}; ignored")
        return replace(base, **values), problems

    def apply(self, config: Config) -> Config:
        changes: dict[str, Any] = {}
        if self.select is not None:
            changes["select"] = self.select
        if self.ignore is not None:
            changes["ignore"] = self.ignore
        if self.backend is not None:
            changes["backend"] = parse_backend(self.backend)
        if self.unsafe_fixes is not None:
            changes["unsafe_fixes"] = self.unsafe_fixes
        if self.target is not None:
            changes["target"] = self.target
        return replace(config, **changes) if changes else config


def _own_section(options: dict) -> dict:
    """Clients send either our settings or a settings object with a section named after us."""
    for section in ("pallas-fix", "pallasFix"):
        if isinstance(options.get(section), dict):
            return options[section]
    return options


def _setting(name: str, raw: Any) -> dict[str, Any]:
    """The Settings field one option sets; raises ConfigError."""
    if name in ("select", "ignore"):
        return {name: tuple(c for c in (code.strip() for code in parse_codes(raw, name)) if c)}
    if name == "backend":
        parse_backend(raw)
        return {"backend": raw}
    if name in _UNSAFE_FIXES_NAMES:
        return {"unsafe_fixes": parse_flag(raw, name)}
    if name == "target":
        return {"target": parse_target(raw)}
    # debounceMs, the last of _OPTION_NAMES: the pause is the editor's alone, not a Config value.
    if isinstance(raw, (int, float)) and not isinstance(raw, bool) and 0 <= raw <= 10_000:
        return {"debounce_s": raw / 1000.0}
    raise SettingError(name, "a number of milliseconds (0..10000)")
