"""Kernel-level rules (PF2xx: GPU interpret mode hazards). Filled in by the GPU-interpret work."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .model import Finding

if TYPE_CHECKING:
    from .engine import Analysis


def kernel_findings(analysis: "Analysis") -> list[Finding]:
    return []
