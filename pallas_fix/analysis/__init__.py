"""Reading a module without running it. The root holds the parse and its indexes (`context.py`,
`tree_index.py`, `binders.py`: the names a binding other than `name = value` binds), dynamic-index detection (`detection.py`, `accesses.py`; `in_place.py` says
whether an index can be rewritten where it is written) and the frozen `Analysis` (`result.py`);
the rooms are `discovery/` (pallas_call sites and kernels), `relays/` (kernels handed on to
their pallas_call: parameters, launcher chains, `**kwargs` dicts; below discovery), `values/` (bindings and provenance),
`loops/` (loops, affine windows, size proofs) and `effects/` (what kernel code writes).

May import core only; nothing above analysis."""
