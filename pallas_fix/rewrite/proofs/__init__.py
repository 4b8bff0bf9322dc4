"""Proofs a rewrite needs before it is written: every block stays inside its array (bounds),
ragged program_id grids, the blocks existing BlockSpecs move (spec_blocks), checks the file's own example breaks, checks in the wrapper for the
ranks a plan took from the examples' trace (rank_guards), and the shape facts a guard states
(guards; unchanged: sizes bound in branches that a check before the call still reads), and that a
reduction's new axis has a step wherever the original ran (one_step).

May import core, analysis, rewrite.text, rewrite.callsite and the data types of rewrite.blocks.plan."""
