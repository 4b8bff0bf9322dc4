"""Examples found without being told: candidates from the code, tried in verification, cached.

The last example source (:func:`pallas_fix.verify.examples.sources.collect_examples`). For every
entry point (:mod:`~pallas_fix.verify.examples.entry_points`, and any function that reaches a
``pallas_call`` the ``__main__`` block calls) the candidates are, best first, the calls of the
``__main__`` block (:mod:`~pallas_fix.verify.examples.main_block`) and then calls built from the code
(:mod:`~pallas_fix.verify.examples.synthesis`), at most :data:`MAX_CANDIDATES` each. Nothing runs
here: the verification worker tries an entry's candidates and keeps the first one the original
runs on (:mod:`~pallas_fix.verify.examples.candidates`); what it kept is cached by file content
(:mod:`~pallas_fix.verify.examples.cache`), so a second run finds the example without trying
again. Each example's origin says where it came from.
"""

from __future__ import annotations

import ast

from pallas_fix.core.examples import Example
from pallas_fix.verify.examples import cache as example_cache
from pallas_fix.verify.examples.annotations import entry_hints
from pallas_fix.verify.examples.ast_reading import FUNCTIONS
from pallas_fix.verify.examples.call_facts import ModuleInfo
from pallas_fix.verify.examples.entry_points import entry_points, module_entry_candidates, reaching_pallas_call
from pallas_fix.verify.examples.candidates import ExampleCandidates, ToVerify, kept_from_payload
from pallas_fix.verify.examples.synthesis import code_candidates
from pallas_fix.verify.examples.main_block import main_examples
from pallas_fix.verify.examples.module_constants import module_constants

MAX_CANDIDATES = 4


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


def synthesised_examples(path: str, source: str) -> list[ToVerify]:
    """The file's examples from the cache when an earlier run settled them; else one
    :class:`ExampleCandidates` per entry point, which verification tries (see the module docstring)."""
    key = example_cache.cache_key(source)
    payload = example_cache.load(key)
    kept = kept_from_payload(payload, path) if payload is not None else None
    if kept is not None:
        return kept
    per_entry: dict[str, list[Example]] = {}
    for e in synthesis_candidates(source, path):
        per_entry.setdefault(e.entry, []).append(e)
    return [ExampleCandidates(entry, tuple(found), key, path, len(per_entry)) for entry, found in per_entry.items()]
