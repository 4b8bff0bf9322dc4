"""Reading and rewriting what a pallas_call says: its operands (also operand groups and an
out_shape passed in by name: `out_leaves.py`), grid, specs, compiler params, ranks, and call-site
expressions written inside the kernel, and a call's kernel variants planned each against its own
arm of the `if` that picks it (`variant_arms.py`). The room `spelling/` holds how the call's pieces are
written (block dims, operand and spec types, lists built by code, repeated specs, keywords).

May import core, analysis and rewrite.text."""
