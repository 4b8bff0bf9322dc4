"""Examples found without being told: candidates from the code, probed, cached.

The last example source (:func:`pallas_fix.verify.example_sources.collect_examples`). For every
entry point (:mod:`~pallas_fix.verify.entry_points`, and any function that reaches a
``pallas_call`` the ``__main__`` block calls) the candidates are, best first, the calls of the
``__main__`` block (:mod:`~pallas_fix.verify.main_examples`) and then calls built from the code
(:mod:`~pallas_fix.verify.example_synthesis`), at most :data:`MAX_CANDIDATES` each. The probe
(:mod:`~pallas_fix.verify.example_probe`) keeps the first candidate per entry that the original
runs on; the result is cached by file content (:mod:`~pallas_fix.verify.example_cache`), so a
second run does not probe again. Each example's origin says where it came from.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Optional

from pallas_fix.core.examples import Example, ExampleSyntaxError, parse_example
from pallas_fix.verify import example_cache
from pallas_fix.verify.annotation_examples import entry_hints
from pallas_fix.verify.ast_reading import FUNCTIONS
from pallas_fix.verify.call_facts import ModuleInfo
from pallas_fix.verify.entry_points import entry_points, module_entry_candidates, reaching_pallas_call
from pallas_fix.verify.example_probe import ProbeResult, probe_candidates
from pallas_fix.verify.example_synthesis import code_candidates
from pallas_fix.verify.main_examples import main_examples
from pallas_fix.verify.module_constants import module_constants

MAX_CANDIDATES = 4


@dataclass
class Synthesis:
    examples: list[Example]  # what the original runs on: one per entry point
    outcomes: list[dict]  # what each probed candidate did (from the cache: as it did then)
    cached: bool


def synthesis_candidates(source: str, path: str) -> list[Example]:
    """Every entry point's candidates, best first, entries in source order."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    hints = entry_hints(source)
    candidates = module_entry_candidates(tree)
    reach = reaching_pallas_call(candidates)
    callable_from_main = (set(hints) if hints else set(reach)) & set(reach)
    mains = main_examples(tree, callable_from_main, path=path)
    chosen = entry_points(tree, hints)
    chosen += [candidates[e.entry] for e in mains if e.entry not in {ep.name for ep in chosen}]
    module = ModuleInfo(module_constants(tree), {s.name: s for s in tree.body if isinstance(s, FUNCTIONS)})
    found: list[Example] = []
    for ep in sorted(dict.fromkeys(chosen), key=lambda ep: ep.line):
        unique: dict[str, Example] = {}
        for e in [e for e in mains if e.entry == ep.name] + code_candidates(ep, module, tree, path=path):
            unique.setdefault(e.text, e)
        found += list(unique.values())[:MAX_CANDIDATES]
    return found


# The cache is keyed by content: the same text under another path names that path.
_PATH = "<path>"


def _to_cache(result: ProbeResult, path: str) -> dict:
    return {"examples": [{"text": e.text, "origin": (e.origin or "").replace(f", {path}:", f", {_PATH}:")}
                         for e in result.kept],
            "outcomes": result.outcomes}


def _from_cache(payload: dict, path: str) -> Optional[list[Example]]:
    try:
        return [parse_example(e["text"], origin=e["origin"].replace(f", {_PATH}:", f", {path}:"))
                for e in payload["examples"]]
    except (KeyError, TypeError, AttributeError, ExampleSyntaxError):
        return None  # not what this version writes: probe again


def synthesise(path: str, source: str, *, timeout_s: float = 120) -> Synthesis:
    """The file's synthesised examples (see the module docstring)."""
    key = example_cache.cache_key(source)
    payload = example_cache.load(key)
    if payload is not None:
        examples = _from_cache(payload, path)
        if examples is not None:
            return Synthesis(examples, list(payload.get("outcomes") or []), cached=True)
    candidates = synthesis_candidates(source, path)
    result = probe_candidates(source, path, candidates, timeout_s=timeout_s)
    if result.complete:
        example_cache.store(key, _to_cache(result, path))
    return Synthesis(result.kept, result.outcomes, cached=False)


def synthesised_examples(path: str, source: str, *, timeout_s: float = 120) -> list[Example]:
    return synthesise(path, source, timeout_s=timeout_s).examples
