"""How a lifted loop or program_id window touches the kernel's refs, and the kernel-side edits
that follow: ref accesses and views, helpers given refs, outputs read before they are written,
scalar indices, dead stores and parameters, scratch temporaries, windows at an offset inside a
program's block, outputs left in HBM that DMAs write (the shape reads those accesses change live in the room below, `extents`).

May import core, analysis and the rewrite rooms text, callsite, blocks, proofs and extents."""
