"""textDocument/codeAction: a `quickfix` per fixable finding (preferred when the fix is safe),
"ignore this finding" (a `# pallas-fix: ignore[CODE]` comment), and `source.fixAll.pallas-fix`.

Edits not computed yet are computed on the analysis worker, never on the protocol's thread.
"""

from __future__ import annotations

import asyncio
from typing import Optional

from lsprotocol import types

from pallas_fix.core.model import Finding
from pallas_fix.frontends.lsp.language_server import PallasFixServer
from pallas_fix.frontends.lsp.snapshot import (
    Snapshot,
    diagnostic,
    findings_at,
    fix_all_edits,
    ignore_edit,
    key_of,
    quick_fix_edits,
    quick_fix_title,
)

FIX_ALL_KIND = "source.fixAll.pallas-fix"
OPTIONS = types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.QuickFix, FIX_ALL_KIND])


def _wants(only: Optional[list[str]], kind: str) -> bool:
    if not only:
        return True
    return any(kind == o or kind.startswith(o + ".") for o in only)


async def code_action(ls: PallasFixServer, params: types.CodeActionParams) -> Optional[list[types.CodeAction]]:
    st = ls.docs.get(params.text_document.uri)
    if st is None:
        return None
    snap = await ls.fresh_snapshot(st)
    if snap is None or not snap.analysed:
        return []
    only = list(params.context.only) if params.context.only else None
    actions: list[types.CodeAction] = []
    if _wants(only, types.CodeActionKind.QuickFix.value):
        for f in findings_at(snap, params.range.start, params.range.end):
            actions += await _finding_actions(ls, snap, f)
    # Fixing the whole file re-analyses it once per fix: only when asked for by kind or by hand,
    # not on every automatic (cursor-move) request.
    invoked = params.context.trigger_kind == types.CodeActionTriggerKind.Invoked
    if _wants(only, FIX_ALL_KIND) and (bool(only) or invoked):
        fix_all = await _fix_all_action(ls, snap)
        if fix_all is not None:
            actions.append(fix_all)
    return actions


async def _finding_actions(ls: PallasFixServer, snap: Snapshot, f: Finding) -> list[types.CodeAction]:
    """The finding's quick fix (when it has one) and the comment that silences it."""
    actions = []
    diag = diagnostic(snap, f)
    fix = snap.fixes.get(key_of(f))
    if fix is not None:
        edits = await asyncio.get_running_loop().run_in_executor(ls.worker, quick_fix_edits, snap, key_of(f))
        if edits:
            actions.append(
                types.CodeAction(
                    title=quick_fix_title(f, fix),
                    kind=types.CodeActionKind.QuickFix,
                    diagnostics=[diag],
                    is_preferred=fix.safe,
                    edit=ls.workspace_edit(snap, edits),
                )
            )
    ignore = ignore_edit(snap, f)
    if ignore is not None:
        actions.append(
            types.CodeAction(
                title=f"Ignore {f.code} on this line (# pallas-fix: ignore[{f.code}])",
                kind=types.CodeActionKind.QuickFix,
                diagnostics=[diag],
                is_preferred=False,
                edit=ls.workspace_edit(snap, [ignore]),
            )
        )
    return actions


async def _fix_all_action(ls: PallasFixServer, snap: Snapshot) -> Optional[types.CodeAction]:
    if not any(f.safe for f in snap.fixes.values()):
        return None
    edits = await asyncio.get_running_loop().run_in_executor(ls.worker, fix_all_edits, snap)
    if not edits:
        return None
    return types.CodeAction(
        title="pallas-fix: fix all safely fixable findings",
        kind=FIX_ALL_KIND,
        edit=ls.workspace_edit(snap, edits),
    )
