"""The judgement of a run: comparing outputs dtype-aware, the jaxpr oracle of what stays dynamic
(and its report), the on-chip footprint per grid step against the backend's limit (PF301), and the
partial blocks at which a lift keeping the kernel's position reads cannot be judged
(`partial_blocks.py`).

May import core and rules; not verify.worker (the worker calls the judge, not the other way)."""
