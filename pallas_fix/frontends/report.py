"""What the per-file service finds out about one file: its findings, the proposed rewrite (for
a notebook, the cells it changes) and what went wrong. Front ends present it; workers return it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from pallas_fix.core.config import Config
from pallas_fix.core.model import Finding
from pallas_fix.frontends.files.notebook import NotebookEdit


@dataclass
class FileReport:
    path: str
    findings: list[Finding] = field(default_factory=list)
    original: Optional[str] = None
    proposed: Optional[str] = None
    applied: list[str] = field(default_factory=list)
    remaining: list[Finding] = field(default_factory=list)
    error: Optional[str] = None
    error_place: Optional[tuple[int, int]] = None  # a syntax error's (line, 1-based column), as Python reports it
    fix_error: Optional[str] = None
    config: Optional[Config] = None
    notebook: Optional[NotebookEdit] = None  # what --apply writes into a .ipynb
    example_hint: str = "entry(f32[...])"  # an example call to suggest, named after the file's entry
    gpu_interpret: bool = False  # its kernels may run in GPU interpret mode: verify there too
    # The proposal holds a lift the interpreters judge only where its blocks divide
    # (core.plans.FixPlan.divided_only): verification compares no example with a partial block.
    divided_only: bool = False
