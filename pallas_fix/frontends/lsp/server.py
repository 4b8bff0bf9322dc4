"""`pallas-fix lsp`: the language server (pygls) behind editor diagnostics and quick fixes.

Features:
* diagnostics on open, save and change (debounced; an edit cancels the pending check, and results
  for a version the editor has moved past are dropped), one per finding, with the rule link and
  the finding's fix edits in `data`; a file that does not parse gets one diagnostic at the error;
* code actions: a `quickfix` per fixable finding (preferred when the fix is safe; unsafe fixes
  only with `unsafeFixes`), "ignore this finding" (a `# pallas-fix: ignore[CODE]` comment), and
  `source.fixAll.pallas-fix` applying every safe fix;
* hover on a finding: the rule's documentation;
* settings from `[tool.pallas-fix]` in the nearest pyproject.toml (re-read when it changes), with
  initialization options `select`, `ignore`, `backend`, `unsafeFixes` (and `target`, `debounceMs`)
  on top.

Analysis runs on one worker thread so the protocol stays responsive; it never imports or runs
the user's code (there is no verification here: `pallas-fix --apply` verifies).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Optional

from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol
from pygls.uris import to_fs_path

from pallas_fix import __version__
from pallas_fix.core.config import Config, ConfigError, find_pyproject, load_config, parse_backend
from pallas_fix.frontends.lsp.snapshot import (
    Snapshot,
    analyse,
    diagnostic,
    diagnostics,
    finding_range,
    fill_fix_edits,
    findings_at,
    fix_all_edits,
    hover_text,
    ignore_edit,
    key_of,
    quick_fix_edits,
    quick_fix_title,
)
from pallas_fix.frontends.lsp.text import Edit

log = logging.getLogger(__name__)

FIX_ALL_KIND = "source.fixAll.pallas-fix"
DEFAULT_DEBOUNCE_S = 0.25
# Fix edits carried in diagnostics cost one rewrite of the module each (the codemods rebuild the
# tree); in a file dense with findings the rest are computed on request instead.
EAGER_FIX_BUDGET_S = 3.0


# -- settings --------------------------------------------------------------------------------------
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
        """Settings from initializationOptions / didChangeConfiguration; invalid values are
        reported and skipped rather than failing the session."""
        base = base or cls()
        problems: list[str] = []
        if not isinstance(options, dict):
            if options is not None:
                problems.append("initialization options must be an object; ignored")
            return base, problems
        if isinstance(options.get("pallas-fix"), dict):
            options = options["pallas-fix"]
        elif isinstance(options.get("pallasFix"), dict):
            options = options["pallasFix"]
        values: dict[str, Any] = {}
        for name in ("select", "ignore"):
            if name in options:
                raw = options[name]
                if isinstance(raw, str):
                    raw = [raw]
                if isinstance(raw, list) and all(isinstance(c, str) for c in raw):
                    values[name] = tuple(c.strip().upper() for c in raw if c.strip())
                else:
                    problems.append(f"{name} must be a list of rule codes; ignored")
        if "backend" in options:
            raw = options["backend"]
            try:
                if raw is not None and not isinstance(raw, str):
                    raise ConfigError("backend must be a string")
                parse_backend(raw)
                values["backend"] = raw
            except ConfigError as exc:
                problems.append(f"{exc}; ignored")
        for name in ("unsafeFixes", "unsafe-fixes", "unsafe_fixes"):
            if name in options:
                if isinstance(options[name], bool):
                    values["unsafe_fixes"] = options[name]
                else:
                    problems.append(f"{name} must be true or false; ignored")
        if "target" in options:
            if options["target"] in ("default", "gpu-interpret"):
                values["target"] = options["target"]
            else:
                problems.append("target must be default or gpu-interpret; ignored")
        if "debounceMs" in options:
            raw = options["debounceMs"]
            if isinstance(raw, (int, float)) and not isinstance(raw, bool) and 0 <= raw <= 10_000:
                values["debounce_s"] = raw / 1000.0
            else:
                problems.append("debounceMs must be a number of milliseconds (0..10000); ignored")
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


# -- per-document state ----------------------------------------------------------------------------
@dataclass
class DocState:
    uri: str
    path: str
    file: Optional[Path]
    version: Optional[int] = None
    text: str = ""
    snapshot: Optional[Snapshot] = None
    task: Optional[asyncio.Task] = None
    inflight: Optional[tuple[Optional[int], str, Config, asyncio.Future]] = None
    closed: bool = False
    config_problem_shown: set[str] = field(default_factory=set)


def _uri_path(uri: str) -> tuple[str, Optional[Path]]:
    try:
        fs = to_fs_path(uri) if uri.startswith("file:") else None
    except Exception:
        fs = None
    if fs:
        return fs, Path(fs)
    return uri, None


@dataclass
class _Unreadable:
    """A request whose parameters do not fit its method: answered with the error, not dropped."""

    id: Any
    error: JsonRpcException


class _Protocol(LanguageServerProtocol):
    # pygls 2.1 logs a request it cannot structure and never answers it, leaving the client
    # waiting; JSON-RPC wants an error response with the request's id.
    def structure_message(self, data):
        try:
            return super().structure_message(data)
        except JsonRpcException as exc:
            if isinstance(data, dict) and "method" in data and isinstance(data.get("id"), (int, str)):
                return _Unreadable(data["id"], exc)
            raise

    def handle_message(self, message):
        if isinstance(message, _Unreadable):
            self._send_response(
                message.id,
                error=types.ResponseError(code=message.error.code, message=message.error.message),
            )
            return
        super().handle_message(message)


class PallasFixServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__(
            "pallas-fix",
            __version__,
            text_document_sync_kind=types.TextDocumentSyncKind.Full,
            protocol_cls=_Protocol,
        )
        self.settings = Settings()
        self.docs: dict[str, DocState] = {}
        self.configs = ConfigCache()
        self.worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pallas-fix-analysis")
        self.root: Optional[Path] = None

    # -- client capabilities -----------------------------------------------------------------
    def _caps(self) -> types.ClientCapabilities:
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
        ws = self._caps().workspace
        return bool(ws and ws.workspace_edit and ws.workspace_edit.document_changes)

    def _markdown(self) -> bool:
        td = self._caps().text_document
        formats = td.hover.content_format if td and td.hover else None
        return not formats or types.MarkupKind.Markdown in formats

    # -- configuration ------------------------------------------------------------------------
    def config_for(self, st: DocState) -> Config:
        file = st.file or (self.root / "untitled.py" if self.root else None)
        config, problem = self.configs.get(file)
        if problem and problem not in st.config_problem_shown:
            st.config_problem_shown.add(problem)
            self.window_show_message(
                types.ShowMessageParams(types.MessageType.Warning, f"pallas-fix: {problem}; using defaults")
            )
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
        return analyse(st.uri, st.path, version, text, config, encoding)

    async def _check(self, st: DocState, delay: float) -> None:
        try:
            if delay > 0:
                await asyncio.sleep(delay)
            snap = await self.fresh_snapshot(st)
            if snap is None or self._stale(st, snap.version, snap.text):
                return
            self.publish(snap)
            # Then the fixes' edits for the diagnostics' data, in rounds so a newer edit preempts
            # them; past the budget the rest are computed when a client asks for the action.
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
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # never let one document's failure take the server down
            log.exception("checking %s failed", st.uri)
            self.window_log_message(types.LogMessageParams(types.MessageType.Error, f"pallas-fix: {exc}"))

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


def _wants(only: Optional[list[str]], kind: str) -> bool:
    if not only:
        return True
    return any(kind == o or kind.startswith(o + ".") for o in only)


def create_server() -> PallasFixServer:
    server = PallasFixServer()

    @server.feature(types.INITIALIZE)
    def initialize(ls: PallasFixServer, params: types.InitializeParams) -> None:
        ls.settings, problems = Settings.parse(params.initialization_options)
        for p in problems:
            ls.window_show_message(types.ShowMessageParams(types.MessageType.Warning, f"pallas-fix: {p}"))
        root = params.root_uri or (params.workspace_folders[0].uri if params.workspace_folders else None)
        if root and root.startswith("file:"):
            ls.root = _uri_path(root)[1]

    @server.feature(types.INITIALIZED)
    def initialized(ls: PallasFixServer, params: types.InitializedParams) -> None:
        ws = ls._caps().workspace
        watched = ws.did_change_watched_files if ws else None
        if watched and watched.dynamic_registration:
            ls.client_register_capability(
                types.RegistrationParams(
                    registrations=[
                        types.Registration(
                            id="pallas-fix-pyproject",
                            method=types.WORKSPACE_DID_CHANGE_WATCHED_FILES,
                            register_options=types.DidChangeWatchedFilesRegistrationOptions(
                                watchers=[types.FileSystemWatcher(glob_pattern="**/pyproject.toml")]
                            ),
                        )
                    ]
                )
            )

    def _state(ls: PallasFixServer, uri: str) -> DocState:
        st = ls.docs.get(uri)
        if st is None:
            path, file = _uri_path(uri)
            st = ls.docs[uri] = DocState(uri, path, file)
        doc = ls.workspace.get_text_document(uri)
        st.text, st.version = doc.source, doc.version
        return st

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: PallasFixServer, params: types.DidOpenTextDocumentParams) -> None:
        ls.schedule(_state(ls, params.text_document.uri), 0)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: PallasFixServer, params: types.DidChangeTextDocumentParams) -> None:
        ls.schedule(_state(ls, params.text_document.uri), ls.settings.debounce_s)

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE, types.SaveOptions(include_text=False))
    def did_save(ls: PallasFixServer, params: types.DidSaveTextDocumentParams) -> None:
        if params.text_document.uri in ls.docs:
            ls.schedule(_state(ls, params.text_document.uri), 0)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: PallasFixServer, params: types.DidCloseTextDocumentParams) -> None:
        st = ls.docs.pop(params.text_document.uri, None)
        if st is not None:
            st.closed = True
            if st.task is not None:
                st.task.cancel()
        ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=params.text_document.uri, diagnostics=[]))

    @server.feature(types.WORKSPACE_DID_CHANGE_WATCHED_FILES)
    def did_change_watched(ls: PallasFixServer, params: types.DidChangeWatchedFilesParams) -> None:
        if any(c.uri.endswith("pyproject.toml") for c in params.changes):
            ls.configs.clear()
            ls.recheck_all()

    @server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    def did_change_configuration(ls: PallasFixServer, params: types.DidChangeConfigurationParams) -> None:
        settings, problems = Settings.parse(params.settings, ls.settings)
        for p in problems:
            ls.window_show_message(types.ShowMessageParams(types.MessageType.Warning, f"pallas-fix: {p}"))
        if settings != ls.settings:
            ls.settings = settings
            ls.recheck_all()

    @server.feature(
        types.TEXT_DOCUMENT_CODE_ACTION,
        types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.QuickFix, FIX_ALL_KIND]),
    )
    async def code_action(ls: PallasFixServer, params: types.CodeActionParams) -> Optional[list[types.CodeAction]]:
        st = ls.docs.get(params.text_document.uri)
        if st is None:
            return None
        snap = await ls.fresh_snapshot(st)
        if snap is None or snap.analysis is None:
            return []
        loop = asyncio.get_running_loop()
        only = list(params.context.only) if params.context.only else None
        actions: list[types.CodeAction] = []
        if _wants(only, types.CodeActionKind.QuickFix.value):
            for f in findings_at(snap, params.range.start, params.range.end):
                diag = diagnostic(snap, f)
                fix = snap.fixes.get(key_of(f))
                if fix is not None:
                    edits = await loop.run_in_executor(ls.worker, quick_fix_edits, snap, key_of(f))
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
        # Fixing the whole file re-analyses it once per fix: only when asked for by kind or by hand,
        # not on every automatic (cursor-move) request.
        explicit = bool(only) or params.context.trigger_kind == types.CodeActionTriggerKind.Invoked
        if only and not _wants(only, FIX_ALL_KIND):
            explicit = False
        if explicit and _wants(only, FIX_ALL_KIND) and any(f.safe for f in snap.fixes.values()):
            edits = await loop.run_in_executor(ls.worker, fix_all_edits, snap)
            if edits:
                actions.append(
                    types.CodeAction(
                        title="pallas-fix: fix all safely fixable findings",
                        kind=FIX_ALL_KIND,
                        edit=ls.workspace_edit(snap, edits),
                    )
                )
        return actions

    @server.feature(types.TEXT_DOCUMENT_HOVER)
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
        markdown = ls._markdown()
        parts = [hover_text(f, snap.fixes.get(key_of(f)), markdown) for f in found]
        return types.Hover(
            contents=types.MarkupContent(
                kind=types.MarkupKind.Markdown if markdown else types.MarkupKind.PlainText,
                value=("\n\n---\n\n" if markdown else "\n\n").join(parts),
            ),
            range=finding_range(snap, found[0]),
        )

    @server.feature(types.SHUTDOWN)
    def shutdown(ls: PallasFixServer, params: Any) -> None:
        for st in ls.docs.values():
            st.closed = True
            if st.task is not None:
                st.task.cancel()
        ls.worker.shutdown(wait=False, cancel_futures=True)

    return server


def serve() -> None:
    """Run the server on stdin/stdout until the client says exit."""
    if os.environ.get("PALLAS_FIX_LSP_LOG"):
        logging.basicConfig(filename=os.environ["PALLAS_FIX_LSP_LOG"], level=logging.DEBUG)
    create_server().start_io()
