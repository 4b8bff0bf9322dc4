"""The language server (pygls): protocol, session and settings, open documents and their
snapshots, diagnostics, code actions and hover; `incremental/` re-analyses only what an edit
touched.

May import every layer below frontends and the frontends root modules (service, report, lines)."""
