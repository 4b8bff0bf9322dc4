"""Reading and rewriting what a pallas_call says: its operands (also lists built by code, operand
groups, repeated spec lists, an out_shape passed in by name: `out_leaves.py`), grid, specs,
keywords, compiler params, ranks, and call-site expressions written inside the kernel.

May import core, analysis and rewrite.text."""
