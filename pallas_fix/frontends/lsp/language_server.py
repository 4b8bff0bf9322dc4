"""The pygls server object: settings, open documents, client capabilities, and the scheduling of
analyses on one worker thread so the protocol stays responsive.

The handlers (document_sync, session, code_actions, hover) act on it; `server.create_server` wires
them. Diagnostics are published here: after the analysis, and again as the fix edits they carry
are computed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Optional

from lsprotocol import types
from pygls.lsp.server import LanguageServer

from pallas_fix import __version__
from pallas_fix.core.config import Config
from pallas_fix.frontends.lsp.documents import DocState
from pallas_fix.frontends.lsp.protocol import AnsweringProtocol
from pallas_fix.frontends.lsp.pyproject_cache import ConfigCache
from pallas_fix.frontends.lsp.settings import Settings
from pallas_fix.frontends.lsp.snapshot import Snapshot, analyse, diagnostics, fill_fix_edits
from pallas_fix.frontends.lsp.text import Edit

log = logging.getLogger(__name__)

# Fix edits carried in diagnostics cost one rewrite of the module each (the codemods rebuild the
# tree); in a file dense with findings the rest are computed on request instead.
EAGER_FIX_BUDGET_S = 3.0


class PallasFixServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__(
            "pallas-fix",
            __version__,
            text_document_sync_kind=types.TextDocumentSyncKind.Full,
            protocol_cls=AnsweringProtocol,
        )
        self.settings = Settings()
        self.docs: dict[str, DocState] = {}
        self.configs = ConfigCache()
        self.worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pallas-fix-analysis")
        self.root: Optional[Path] = None

    # -- client capabilities -----------------------------------------------------------------
    def caps(self) -> types.ClientCapabilities:
        try:
            return self.client_capabilities
        except Exception:
            return types.ClientCapabilities()

    @property
    def encoding(self) -> str:
        try:
            enc = self.workspace.position_encoding
        except Exception:
            return "utf-16"
        value = getattr(enc, "value", enc)
        return value if value in ("utf-8", "utf-16", "utf-32") else "utf-16"

    def _document_changes(self) -> bool:
        ws = self.caps().workspace
        return bool(ws and ws.workspace_edit and ws.workspace_edit.document_changes)

    def markdown(self) -> bool:
        td = self.caps().text_document
        formats = td.hover.content_format if td and td.hover else None
        return not formats or types.MarkupKind.Markdown in formats

    def warn(self, message: str) -> None:
        self.window_show_message(types.ShowMessageParams(types.MessageType.Warning, f"pallas-fix: {message}"))

    # -- configuration ------------------------------------------------------------------------
    def config_for(self, st: DocState) -> Config:
        file = st.file or (self.root / "untitled.py" if self.root else None)
        config, problem = self.configs.get(file)
        if problem and problem not in st.config_problem_shown:
            st.config_problem_shown.add(problem)
            self.warn(f"{problem}; using defaults")
        return self.settings.apply(config)

    # -- analysis scheduling ------------------------------------------------------------------
    def schedule(self, st: DocState, delay: float) -> None:
        if st.task is not None and not st.task.done():
            st.task.cancel()
        st.task = asyncio.get_running_loop().create_task(self._check(st, delay))

    def _stale(self, st: DocState, version: Optional[int], text: str) -> bool:
        return st.closed or st.version != version or st.text is not text

    async def fresh_snapshot(self, st: DocState) -> Optional[Snapshot]:
        """The analysis of the document as it is now, running it if needed (shared, not repeated)."""
        version, text, config = st.version, st.text, self.config_for(st)
        snap = st.snapshot
        if snap is not None and snap.version == version and snap.text is text and snap.config == config:
            return snap
        if st.inflight is not None:
            v, t, c, fut = st.inflight
            if v == version and t is text and c == config:
                return await asyncio.shield(fut)
        loop = asyncio.get_running_loop()
        encoding = self.encoding
        fut = loop.run_in_executor(
            self.worker, self._analyse_if_current, st, version, text, config, encoding
        )
        st.inflight = (version, text, config, fut)
        try:
            snap = await asyncio.shield(fut)
        finally:
            if st.inflight is not None and st.inflight[3] is fut:
                st.inflight = None
        if snap is not None and not self._stale(st, version, text):
            st.snapshot = snap
        return snap

    def _analyse_if_current(self, st: DocState, version, text, config, encoding) -> Optional[Snapshot]:
        # Runs on the worker: a job queued behind a newer edit is skipped without analysing.
        if self._stale(st, version, text):
            return None
        # The last analysed version: only the kernels the edit touched are analysed again.
        return analyse(st.uri, st.path, version, text, config, encoding, previous=st.snapshot)

    async def _check(self, st: DocState, delay: float) -> None:
        try:
            if delay > 0:
                await asyncio.sleep(delay)
            snap = await self.fresh_snapshot(st)
            if snap is None or self._stale(st, snap.version, snap.text):
                return
            self.publish(snap)
            await self._publish_fix_edits(st, snap)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # never let one document's failure take the server down
            log.exception("checking %s failed", st.uri)
            self.window_log_message(types.LogMessageParams(types.MessageType.Error, f"pallas-fix: {exc}"))

    async def _publish_fix_edits(self, st: DocState, snap: Snapshot) -> None:
        """The fixes' edits for the diagnostics' data, in rounds so a newer edit preempts them;
        past the budget the rest are computed when a client asks for the action."""
        version, text = snap.version, snap.text
        deadline = time.monotonic() + EAGER_FIX_BUDGET_S
        loop = asyncio.get_running_loop()
        while snap.pending_fixes and time.monotonic() < deadline:
            await loop.run_in_executor(
                self.worker, fill_fix_edits, snap, lambda: self._stale(st, version, text)
            )
            if self._stale(st, version, text):
                return
            self.publish(snap)

    def publish(self, snap: Snapshot) -> None:
        if snap.internal_error:
            self.window_log_message(
                types.LogMessageParams(types.MessageType.Error, f"pallas-fix: analysis of {snap.path} failed: {snap.internal_error}")
            )
        self.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(uri=snap.uri, diagnostics=diagnostics(snap), version=snap.version)
        )

    def recheck_all(self) -> None:
        for st in self.docs.values():
            self.schedule(st, 0)

    # -- edits ---------------------------------------------------------------------------------
    def workspace_edit(self, snap: Snapshot, edits: list[Edit]) -> types.WorkspaceEdit:
        text_edits = [
            types.TextEdit(
                range=types.Range(types.Position(*e.start), types.Position(*e.end)),
                new_text=e.new_text,
            )
            for e in edits
        ]
        if self._document_changes():
            return types.WorkspaceEdit(
                document_changes=[
                    types.TextDocumentEdit(
                        text_document=types.OptionalVersionedTextDocumentIdentifier(uri=snap.uri, version=snap.version),
                        edits=text_edits,
                    )
                ]
            )
        return types.WorkspaceEdit(changes={snap.uri: text_edits})
