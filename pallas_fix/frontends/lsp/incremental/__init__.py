"""The language server's incremental analysis: a module cut into top-level blocks, the kernel
units of analysis, splicing freshly parsed blocks into the last tree, and re-analysing only the
units an edit touched.

May import core, analysis and rules; not the rest of frontends.lsp."""
