"""Reading and rewriting what a pallas_call says: its operands (also lists built by code, operand
groups, repeated spec lists), grid, specs, keywords, compiler params, ranks, and call-site
expressions written inside the kernel.

May import core, analysis and rewrite.text."""
