"""PF301 at verification time: a kernel over its backend's default on-chip limit, per grid step.

From the pallas_calls both sides made on the example (``pallas_call_infos``, each with its
``"on_chip"`` record, :mod:`~pallas_fix.verify.judge.footprint`): one finding per original call over
its limit, saying whether the same kernel in the rewrite is under it ("the rewrite brings it
under"), and one per rewrite call over a limit its original kept (the rewrite made it worse).
The two sides' calls are paired by kernel name, else by position. A finding is a dict (it travels
in the verdict's JSON): ``code``, ``severity``, ``message``, ``kernel``, ``side`` (which side is
over), ``file`` / ``line`` of that side's pallas_call, ``space``, ``limit_bytes``,
``limit_source``, ``before_bytes``, ``after_bytes`` (None when not counted), ``brought_under``.
"""

from __future__ import annotations

from typing import Optional

from pallas_fix.rules.registry import RULES
from pallas_fix.verify.judge.footprint import format_bytes, limit_phrase, over_limit

CODE = "PF301"


def partner(call: dict, index: int, mine: list[dict], others: list[dict]) -> Optional[dict]:
    """The other side's call of the same kernel: the one of the same name, else the one at the
    same position when both sides make as many calls."""
    name = call.get("kernel")
    named = [c for c in others if name is not None and c.get("kernel") == name]
    if len(named) == 1:
        return named[0]
    return others[index] if len(others) == len(mine) else None


def _bytes_in(call: Optional[dict], space: str) -> Optional[int]:
    on_chip = (call or {}).get("on_chip")
    return on_chip["by_space"].get(space, 0) if on_chip else None


def _finding(side: str, call: dict, other: Optional[dict], example: str) -> dict:
    o = call["on_chip"]
    space = o["limit_space"]
    mine, theirs = o["by_space"].get(space, 0), _bytes_in(other, space)
    before, after = (mine, theirs) if side == "original" else (theirs, mine)
    under = after is not None and after <= o["limit_bytes"]
    kernel = f"kernel `{call['kernel']}`" if call.get("kernel") else "a kernel"
    over = (f"holds {format_bytes(mine)} of {space.upper()} per grid step on {example}, over"
            f" {limit_phrase(o)}")
    if side == "rewrite":
        message = f"the rewrite of {kernel} {over}; the original holds {format_bytes(before or 0)}, within it"
    elif after is None:
        message = f"{kernel} {over}; the rewrite's footprint was not counted"
    elif under:
        message = f"{kernel} {over}; the rewrite brings it under: {format_bytes(after)} per step"
    else:
        message = (f"{kernel} {over}; the rewrite does not bring it under: {format_bytes(after)} per step"
                   f" (smaller blocks would, or a larger pltpu.CompilerParams(vmem_limit_bytes=...))")
    site = call.get("source") or {}
    return {"code": CODE, "severity": RULES[CODE].severity, "message": message, "kernel": call.get("kernel"),
            "side": side, "file": site.get("file"), "line": site.get("line"), "space": space,
            "limit_bytes": o["limit_bytes"], "limit_source": o["limit_source"], "before_bytes": before,
            "after_bytes": after, "brought_under": side == "original" and under}


def footprint_findings(before: Optional[list[dict]], after: Optional[list[dict]], example: str) -> list[dict]:
    """The PF301 findings of one example (see the module docstring); ``example`` names the call."""
    before, after = list(before or ()), list(after or ())
    found = [_finding("original", c, partner(c, i, before, after), example)
             for i, c in enumerate(before) if over_limit(c.get("on_chip"))]
    for i, c in enumerate(after):
        other = partner(c, i, after, before)
        if over_limit(c.get("on_chip")) and other is not None and other.get("on_chip") and not over_limit(other["on_chip"]):
            found.append(_finding("rewrite", c, other, example))
    return found


def format_finding(f: dict) -> str:
    """``PF301 warning (original, k.py:23): kernel `k` holds ...`` for the verdict's text."""
    where = f", {f['file']}:{f['line']}" if f.get("file") and f.get("line") else ""
    return f"{f['code']} {f['severity']} ({f['side']}{where}): {f['message']}"
