"""Proofs a rewrite needs before it is written: every block stays inside its array (bounds),
ragged program_id grids, and checks the file's own example breaks.

May import core, analysis, rewrite.text, rewrite.callsite and the data types of rewrite.blocks.plan."""
