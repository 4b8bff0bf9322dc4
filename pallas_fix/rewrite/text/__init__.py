"""Text-level helpers every rewrite uses: source text of nodes, identity-addressed edits, building
statements, a function's own scope and fresh names, LibCST scope analysis, imports, line width
(`visual_indent.py`: calls aligned with their bracket keep that style), stale comments, and
translating kernel-side expressions to the call site.

May import core and analysis; no other rewrite room (this is the bottom of rewrite/)."""
