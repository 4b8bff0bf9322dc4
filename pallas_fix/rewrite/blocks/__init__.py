"""Block plans ("ref read in blocks of S along dim d at block index I") and what they become: new
BlockSpecs and index_map parameters, grid axes, renumbered axes, spec slots, the kernel's
whole-block accesses, R2's scratch entries, the wrapper's count of a strip-mined R2's windows
per step (windows_count.py), and block indices that fold a program id into
quotient and remainder (folds.py).

May import core, analysis, rewrite.text, rewrite.callsite, rewrite.guards and rewrite.proofs (a plan's blocks are
proved in bounds before they are written; proofs read the plan's data types from blocks.plan)."""
