"""textDocument/didOpen, didChange, didSave, didClose: keep the documents' state and (re)check them."""

from __future__ import annotations

from lsprotocol import types

from pallas_fix.frontends.lsp.documents import DocState, uri_path
from pallas_fix.frontends.lsp.language_server import PallasFixServer


def _state(ls: PallasFixServer, uri: str) -> DocState:
    """The document's state, updated to the text and version the workspace holds now."""
    st = ls.docs.get(uri)
    if st is None:
        path, file = uri_path(uri)
        st = ls.docs[uri] = DocState(uri, path, file)
    doc = ls.workspace.get_text_document(uri)
    st.text, st.version = doc.source, doc.version
    return st


def did_open(ls: PallasFixServer, params: types.DidOpenTextDocumentParams) -> None:
    ls.schedule(_state(ls, params.text_document.uri), 0)


def did_change(ls: PallasFixServer, params: types.DidChangeTextDocumentParams) -> None:
    ls.schedule(_state(ls, params.text_document.uri), ls.settings.debounce_s)


def did_save(ls: PallasFixServer, params: types.DidSaveTextDocumentParams) -> None:
    if params.text_document.uri in ls.docs:
        ls.schedule(_state(ls, params.text_document.uri), 0)


def did_close(ls: PallasFixServer, params: types.DidCloseTextDocumentParams) -> None:
    st = ls.docs.pop(params.text_document.uri, None)
    if st is not None:
        st.close()
    ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=params.text_document.uri, diagnostics=[]))
