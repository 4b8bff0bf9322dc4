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
the user's code (there is no verification here: `pallas-fix --apply` verifies). This module wires
the handlers, each in the module of its job, to the server object (language_server.py).
"""

from __future__ import annotations

import logging
import os

from lsprotocol import types

from pallas_fix.frontends.lsp import code_actions, document_sync, hover, session
from pallas_fix.frontends.lsp.language_server import PallasFixServer

_FEATURES = (
    (types.INITIALIZE, None, session.initialize),
    (types.INITIALIZED, None, session.initialized),
    (types.TEXT_DOCUMENT_DID_OPEN, None, document_sync.did_open),
    (types.TEXT_DOCUMENT_DID_CHANGE, None, document_sync.did_change),
    (types.TEXT_DOCUMENT_DID_SAVE, types.SaveOptions(include_text=False), document_sync.did_save),
    (types.TEXT_DOCUMENT_DID_CLOSE, None, document_sync.did_close),
    (types.WORKSPACE_DID_CHANGE_WATCHED_FILES, None, session.did_change_watched_files),
    (types.WORKSPACE_DID_CHANGE_CONFIGURATION, None, session.did_change_configuration),
    (types.TEXT_DOCUMENT_CODE_ACTION, code_actions.OPTIONS, code_actions.code_action),
    (types.TEXT_DOCUMENT_HOVER, None, hover.hover),
    (types.SHUTDOWN, None, session.shutdown),
)


def create_server() -> PallasFixServer:
    server = PallasFixServer()
    for method, options, handler in _FEATURES:
        server.feature(method, options)(handler)
    return server


def serve() -> None:
    """Run the server on stdin/stdout until the client says exit."""
    if os.environ.get("PALLAS_FIX_LSP_LOG"):
        logging.basicConfig(filename=os.environ["PALLAS_FIX_LSP_LOG"], level=logging.DEBUG)
    create_server().start_io()
