"""textDocument/hover: on a finding, its rule's documentation and the fix it has (or why none)."""

from __future__ import annotations

from typing import Optional

from lsprotocol import types

from pallas_fix.frontends.lsp.language_server import PallasFixServer
from pallas_fix.frontends.lsp.snapshot import finding_range, findings_at, hover_text, key_of


async def hover(ls: PallasFixServer, params: types.HoverParams) -> Optional[types.Hover]:
    st = ls.docs.get(params.text_document.uri)
    if st is None:
        return None
    snap = await ls.fresh_snapshot(st)
    if snap is None:
        return None
    found = findings_at(snap, params.position)
    if not found:
        return None
    markdown = ls.markdown()
    parts = [hover_text(f, snap.fixes.get(key_of(f)), markdown) for f in found]
    return types.Hover(
        contents=types.MarkupContent(
            kind=types.MarkupKind.Markdown if markdown else types.MarkupKind.PlainText,
            value=("\n\n---\n\n" if markdown else "\n\n").join(parts),
        ),
        range=finding_range(snap, found[0]),
    )
