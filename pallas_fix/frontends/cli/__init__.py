"""The command line (`pallas-fix`, Typer): options, `--apply` per file, the consoles, and
`pallas-fix record` with the hook it installs as sitecustomize.

May import everything below frontends and the frontends root modules (service, report, lines,
files); it starts the language server (frontends.lsp)."""
