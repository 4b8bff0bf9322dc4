"""One model of what kernel code writes: an abstract evaluator over the kernel's syntax that
records every ref write and accumulation, with a table of what library calls do to refs.

May import core, analysis's root modules, analysis.values and analysis.discovery."""
