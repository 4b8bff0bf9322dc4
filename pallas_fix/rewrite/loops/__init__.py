"""The region of a kernel a loop lift rewrites (R1, R2, static unroll): the loop and what stands
before and after it, the preconditions on its shape, nesting, threaded carries and an unrolled
index.

May import core, analysis, rewrite.common and the rewrite rooms text, callsite, blocks, kernel; and
rewrite.reduction.carry_names (a reduction's result names, read by the loop checks)."""
