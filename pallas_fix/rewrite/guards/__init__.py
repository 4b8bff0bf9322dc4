"""Checks a lift writes into the wrapper before the pallas_call: the shape facts the code leaves
unsaid that a bounds proof needs (`shape_guards`: an equality of two extents, a divisibility, a
squeezed axis's bound), that such a check still reads the values the call reads (`unchanged`),
and the rank checks for ranks a plan took from the examples' trace (`rank_guards`).

May import core, analysis, rewrite.text and rewrite.callsite; the proofs (rewrite.proofs) and
the block edits (rewrite.blocks) sit above this room and use it."""
