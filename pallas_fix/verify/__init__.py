"""Verification: prove a rewrite by running original and rewritten kernels through the Pallas
interpreters (in a subprocess; see :mod:`pallas_fix.verify.runner`). Importing this package does
not import jax."""

from pallas_fix.core.examples import ArgSpec, Example, ExampleSyntaxError, parse_example
from pallas_fix.verify.example_sources import collect_examples
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
