"""The value model inside a kernel: what a name is bound to, which binding a read sees
(reaching definitions), where a value comes from (provenance: Python value, loop index,
program_id, ref load), call values, integer arrays that are contiguous ranges (`ranges.py`), and
whether one expression means the same in two places.

May import core, analysis's root modules and analysis.loops."""
