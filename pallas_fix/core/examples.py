"""Example calls: which concrete arguments an entry point is verified with.

The jax-free grammar, in one import: the values (:mod:`pallas_fix.core.example_values`: ArgSpec,
Example, ExampleSyntaxError, the JSON form the worker receives) and the parser
(:mod:`pallas_fix.core.example_parser`, whose docstring has the grammar). Where a file's examples
come from (directives, ``[tool.pallas-fix.examples]``, annotations) is verification's business:
:mod:`pallas_fix.verify.examples.sources`.
"""

from __future__ import annotations

from pallas_fix.core.example_parser import parse_example
from pallas_fix.core.example_values import (
    DTYPES,
    ArgSpec,
    Example,
    ExampleSyntaxError,
    contains_array,
    example_from_json,
    example_to_json,
    format_value,
    leaves,
    map_arrays,
)

__all__ = [
    "ArgSpec",
    "Example",
    "ExampleSyntaxError",
    "DTYPES",
    "parse_example",
    "format_value",
    "contains_array",
    "leaves",
    "map_arrays",
    "example_to_json",
    "example_from_json",
]
