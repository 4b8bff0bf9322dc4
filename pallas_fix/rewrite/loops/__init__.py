"""The region of a kernel a loop lift rewrites (R1, R2, static unroll): the loop and what stands
before and after it, the preconditions on its shape, nesting, threaded carries and an unrolled
index; and whether a loop is a deliberate strip-mine of a block the grid moves (strip_mines,
index_walks), a reason given before the others.

May import core, analysis, rewrite.common and the rewrite rooms text, callsite, blocks, kernel; and
rewrite.reduction.carry_names (a reduction's result names, read by the loop checks)."""
