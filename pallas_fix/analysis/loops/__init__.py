"""Loops and windows: fori_loop / pl.loop bodies, induction carries, affine decomposition of
slice starts, whether a dynamic slice is a block, and symbolic proofs about sizes.

May import core, analysis's root modules and analysis.values."""
