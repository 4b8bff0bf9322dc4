"""R6, scalar prefetch: windows whose start is a table entry in blocks (or a row start, as varlen
kernels read `cu_seqlens`), the spellings of table reads, the index_map text and data assumption
of a gather, the refusal of a gathered read the kernel guards (guarded: its index_map would run
anyway), and the call-site half (the table as a scalar-prefetch operand).

May import core, analysis and the rewrite rooms text, callsite, blocks, kernel."""
