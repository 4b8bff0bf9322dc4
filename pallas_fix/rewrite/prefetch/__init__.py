"""R6, scalar prefetch: windows whose start is a table entry in blocks, the spellings of table
reads, and the call-site half (the table as a scalar-prefetch operand).

May import core, analysis and the rewrite rooms text, callsite, blocks, kernel."""
