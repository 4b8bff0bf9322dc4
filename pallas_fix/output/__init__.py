"""How findings and rewrites are shown: one module per output format."""

from pallas_fix.output.diff import unified_diff
from pallas_fix.output.github import render_github
from pallas_fix.output.json_format import render_json
from pallas_fix.output.sarif import render_sarif
from pallas_fix.output.text import render_text

__all__ = ["render_github", "render_json", "render_sarif", "render_text", "unified_diff"]
