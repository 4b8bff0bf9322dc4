"""The session around the documents: initialize (settings, workspace root), watching pyproject.toml,
settings changed by the editor, and shutdown."""

from __future__ import annotations

from typing import Any

from lsprotocol import types

from pallas_fix.frontends.lsp.documents import uri_path
from pallas_fix.frontends.lsp.language_server import PallasFixServer
from pallas_fix.frontends.lsp.settings import Settings

_PYPROJECT_WATCHER = types.Registration(
    id="pallas-fix-pyproject",
    method=types.WORKSPACE_DID_CHANGE_WATCHED_FILES,
    register_options=types.DidChangeWatchedFilesRegistrationOptions(
        watchers=[types.FileSystemWatcher(glob_pattern="**/pyproject.toml")]
    ),
)


def initialize(ls: PallasFixServer, params: types.InitializeParams) -> None:
    ls.settings, problems = Settings.parse(params.initialization_options)
    for p in problems:
        ls.warn(p)
    root = params.root_uri or (params.workspace_folders[0].uri if params.workspace_folders else None)
    if root and root.startswith("file:"):
        ls.root = uri_path(root)[1]


def initialized(ls: PallasFixServer, params: types.InitializedParams) -> None:
    ws = ls.caps().workspace
    watched = ws.did_change_watched_files if ws else None
    if watched and watched.dynamic_registration:
        ls.client_register_capability(types.RegistrationParams(registrations=[_PYPROJECT_WATCHER]))


def did_change_watched_files(ls: PallasFixServer, params: types.DidChangeWatchedFilesParams) -> None:
    if any(c.uri.endswith("pyproject.toml") for c in params.changes):
        ls.configs.clear()
        ls.recheck_all()


def did_change_configuration(ls: PallasFixServer, params: types.DidChangeConfigurationParams) -> None:
    settings, problems = Settings.parse(params.settings, ls.settings)
    for p in problems:
        ls.warn(p)
    if settings != ls.settings:
        ls.settings = settings
        ls.recheck_all()


def shutdown(ls: PallasFixServer, params: Any) -> None:
    for st in ls.docs.values():
        st.close()
    ls.worker.shutdown(wait=False, cancel_futures=True)
