"""Finding the kernels: every pallas_call site and its kernel, the part of a module they reach,
which refs are inputs and outputs (also through `*refs`), helpers called with refs, and the
roles of each function's parameters.

May import core, analysis's root modules (context, tree_index), analysis.values, analysis.loops
and analysis.effects."""
