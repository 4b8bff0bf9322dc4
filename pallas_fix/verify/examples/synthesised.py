"""Examples found without being told: candidates from the code, tried in verification, cached.

The last example source (:func:`pallas_fix.verify.examples.sources.collect_examples`). For every
entry point (:mod:`~pallas_fix.verify.examples.entry_points`, and any function that reaches a
``pallas_call`` the ``__main__`` block calls) the candidates are, best first, the calls of the
``__main__`` block (:mod:`~pallas_fix.verify.examples.main_block`) and then calls built from the code
(:mod:`~pallas_fix.verify.examples.synthesis`), at most :data:`MAX_CANDIDATES` each. Nothing runs
here: the verification worker tries an entry's candidates and keeps the first one the original
runs on (:mod:`~pallas_fix.verify.examples.candidates`); what it kept is cached by file content
(:mod:`~pallas_fix.verify.examples.cache`), so a second run finds the example, or that none ran
(with the message the first run gave), without trying again. Each example's origin says where it
came from. :func:`suggested_example` is the example call messages suggest for a file without one.
"""

from __future__ import annotations

import ast
from typing import Optional, Union

from pallas_fix.core.examples import Example
from pallas_fix.verify.examples import cache as example_cache
from pallas_fix.verify.examples.annotations import entry_hints
from pallas_fix.verify.examples.ast_reading import FUNCTIONS, positional_params
from pallas_fix.verify.examples.call_facts import ModuleInfo
from pallas_fix.verify.examples.entry_points import entry_points, module_entry_candidates, reaching_pallas_call, takes_arguments
from pallas_fix.verify.examples.candidates import ExampleCandidates, NoCandidateRan, ToVerify, settled_from_cache
from pallas_fix.verify.examples.synthesis import code_candidates
from pallas_fix.verify.examples.main_block import read_main
from pallas_fix.verify.examples.module_constants import module_constants

MAX_CANDIDATES = 4


def _synthesis(source: str, path: str) -> tuple[list[Example], dict[str, str]]:
    """Every entry point's candidates, best first, entries in source order; and, per entry whose
    ``__main__`` calls gave none, why (the first argument not followed)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return [], {}
    hints = entry_hints(source)
    candidates = module_entry_candidates(tree)
    reach = reaching_pallas_call(candidates)
    callable_from_main = {n for n in (set(hints) if hints else set(reach)) & set(reach)
                          if n in hints or takes_arguments(candidates[n].node)}
    reading = read_main(tree, callable_from_main, path=path)
    mains = reading.examples
    chosen = entry_points(tree, hints)
    chosen += [candidates[e.entry] for e in mains if e.entry not in {ep.name for ep in chosen}]
    module = ModuleInfo(module_constants(tree), {s.name: s for s in tree.body if isinstance(s, FUNCTIONS)})
    found: list[Example] = []
    for ep in sorted(dict.fromkeys(chosen), key=lambda ep: ep.line):
        unique: dict[str, Example] = {}
        for e in [e for e in mains if e.entry == ep.name] + code_candidates(ep, module, tree, path=path):
            unique.setdefault(e.text, e)
        found += list(unique.values())[:MAX_CANDIDATES]
    with_main = {e.entry for e in mains}
    notes: dict[str, str] = {}
    for u in reading.unread:
        if u.entry not in with_main:
            notes.setdefault(u.entry, u.describe(path))
    return found, notes


def synthesis_candidates(source: str, path: str) -> list[Example]:
    """Every entry point's candidates, best first, entries in source order."""
    return _synthesis(source, path)[0]


def synthesised_examples(path: str, source: str) -> list[Union[ToVerify, NoCandidateRan]]:
    """One :class:`ExampleCandidates` per entry point, which verification tries (see the module
    docstring); where an earlier run settled them, what the cache says: the kept example, or
    :class:`NoCandidateRan` with the same message as the run that tried them."""
    key = example_cache.cache_key(source)
    found, notes = _synthesis(source, path)
    per_entry: dict[str, list[Example]] = {}
    for e in found:
        per_entry.setdefault(e.entry, []).append(e)
    groups = [ExampleCandidates(entry, tuple(cands), key, path, len(per_entry), notes.get(entry, ""))
              for entry, cands in per_entry.items()]
    return settled_from_cache(groups)


def suggested_example(source: str, path: str) -> Optional[str]:
    """An example call to suggest for a file without one: its first entry point's best candidate
    (its ``__main__`` call, else one built from the code), else the entry with one ``f32[...]``
    per parameter it requires; None without an entry point."""
    found = synthesis_candidates(source, path)
    if found:
        return found[0].text
    try:
        entries = entry_points(ast.parse(source), entry_hints(source))
    except SyntaxError:
        entries = []
    if not entries:
        return None
    fn = entries[0].node
    required = [p for p in positional_params(fn)[: len(positional_params(fn)) - len(fn.args.defaults)]
                if p.arg not in entries[0].static_names]
    return f"{entries[0].name}({', '.join('f32[...]' for _ in required)})"
