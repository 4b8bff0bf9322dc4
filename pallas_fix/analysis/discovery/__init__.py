"""Finding the kernels: every pallas_call (and `pl.kernel` / `plgpu.kernel`) site and its kernel,
also one passed in as a parameter of the function holding the call, the part of a module they reach,
which refs are inputs and outputs (also through `*refs`: `varargs` reads the kernel's statements into `star_facts`, and refs forwarded through it into a callee; TPU DMA calls as `dma_calls` reads them), helpers called with refs, the
roles of each function's parameters, and kernel variants (`variants`: one of several defs, picked
when the wrapper runs).

May import core, analysis's root modules (context, tree_index), analysis.values, analysis.loops,
analysis.effects and analysis.relays (kernels handed on through parameters and launcher chains)."""
