"""What users meet: the per-file service every front end shares (`service.py`, `report.py`,
`kernel_rewrites.py`), the rewrites as LibCST commands (`libcst_commands.py`), and the rooms
`cli/`, `files/` and `lsp/`.

May import every layer below (core to output)."""
