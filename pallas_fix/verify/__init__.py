"""Verification: prove a rewrite by running original and rewritten kernels through the Pallas
interpreters (in a subprocess; see :mod:`pallas_fix.verify.runner`). Importing this package does
not import jax.

Rooms: `examples/` (where example calls come from; client side), `worker/` (what runs in the
subprocess and imports jax), `judge/` (comparison, the jaxpr oracle, the on-chip footprint) and
`device/` (original and rewrite compiled and timed on a TPU the worker sees).
`worker_process.py` runs one worker on a job and reads its records (`zygote_client.py` forks it
from a server that has imported jax, `zygote_server.py`); `runner.py` asks it to verify
and turns the records into verdicts, `facts.py` asks it to trace the original on the examples
(facts from the examples, core.traced_facts).

May import core, analysis and rules; never output or frontends."""

from pallas_fix.core.examples import ArgSpec, Example, ExampleSyntaxError, parse_example
from pallas_fix.verify.examples.sources import collect_examples
from pallas_fix.verify.runner import Verdict, format_verdict, verify_sources

__all__ = [
    "ArgSpec",
    "Example",
    "ExampleSyntaxError",
    "Verdict",
    "collect_examples",
    "format_verdict",
    "parse_example",
    "verify_sources",
]
