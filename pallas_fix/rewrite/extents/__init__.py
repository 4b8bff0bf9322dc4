"""What the kernel's shape reads of a lifted ref mean after the lift: full-extent reads of a
blocked dim (`x_ref.shape[0]` becomes `pl.num_programs(axis) * x_ref.shape[0]` where the blocks
tile the dim, `extent_reads`), sizes passed in as `functools.partial` keywords where they do not
(`extent_params`), and reads renumbered around squeezed (`None`) block dims (`squeezed_reads`);
and where the call site's rank says which dim a window written after `...` is on (`ellipsis_dims`).

May import core, analysis and the rewrite rooms text, callsite, blocks and proofs."""
