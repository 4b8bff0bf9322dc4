"""Data races reported by TPU interpret mode (``detect_races=True, on_race="warn"``).

The interpreter logs "RACE DETECTED" records and sets a ``races_found`` flag; the worker installs
:data:`RACES` on the root logger and reads both after each run.
"""

from __future__ import annotations

import logging


class _RaceLog(logging.Handler):
    """Collects TPU interpret mode's "RACE DETECTED" log records (on_race="warn")."""

    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            msg = record.getMessage()
        except Exception:  # pragma: no cover
            return
        if "RACE DETECTED" in msg:
            self.messages.append(msg)


RACES = _RaceLog()


def install_race_log() -> None:
    root = logging.getLogger()
    if RACES not in root.handlers:
        root.addHandler(RACES)


def races_found_flag() -> bool:
    try:
        from jax._src.pallas.mosaic.interpret import interpret_pallas_call as ipc
    except ImportError:  # pragma: no cover
        return False
    return bool(ipc.races is not None and ipc.races.races_found)


def summarize_race(msg: str) -> str:
    lines = [ln.strip() for ln in msg.strip().splitlines() if ln.strip() and not ln.strip().startswith("clock:")]
    return " / ".join(lines[:3])
