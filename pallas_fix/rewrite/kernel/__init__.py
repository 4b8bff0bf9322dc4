"""How a lifted loop or program_id window touches the kernel's refs, and the kernel-side edits
that follow: ref accesses and views, helpers given refs, outputs read before they are written,
scalar indices, dead stores and parameters, scratch temporaries (the shape reads those accesses
change live in the room below, `extents`; windows at an offset inside a program's block and
outputs left in HBM that DMAs write, in `inblock`); on Triton, a program_id window of an input
the kernel also reads elsewhere, moved onto a second operand (`twin_refs`); what R3 reads of one program_id
window: its block index, squeezed dims and the ref's other reads (`pid_windows`).

May import core, analysis and the rewrite rooms text, callsite, blocks, proofs and extents."""
