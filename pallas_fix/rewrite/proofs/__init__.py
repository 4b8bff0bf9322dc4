"""Proofs a rewrite needs before it is written: every block stays inside its array (bounds),
ragged program_id grids, the blocks existing BlockSpecs move (spec_blocks), checks the file's own example breaks, whether a guard is necessary (necessity; the guards
themselves live in rewrite.guards, below), and that a
reduction's new axis has a step wherever the original ran (one_step).

May import core, analysis, rewrite.text, rewrite.callsite, rewrite.guards and the data types of
rewrite.blocks.plan."""
