"""Synthesised candidates that the verification worker tries (client side, no jax here).

When the example cache has nothing for a file, synthesis runs nothing itself: it hands
verification one :class:`ExampleCandidates` per entry point. The verification worker runs the
original on them in order and keeps the first one it runs on (see
:mod:`~pallas_fix.verify.worker.candidate_trial`), then verifies the rewrite on it, reusing the
original's outputs for that input: finding the example costs no second process and no second
run of the original. The verdict names the kept candidate and its origin.

Afterwards :func:`store_choices` writes what the worker kept to the example cache (keyed by the
file's content, :mod:`~pallas_fix.verify.examples.cache`), and :func:`settled_from_cache` turns
candidates into the kept example the next time they reach verification (the next kernel of the
same ``--apply``, the next run on an unchanged file), or into :class:`NoCandidateRan` when none
ran.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence, Union

from pallas_fix.core.examples import Example, ExampleSyntaxError, example_to_json, parse_example
from pallas_fix.verify.examples import cache as example_cache

__all__ = ["ExampleCandidates", "NoCandidateRan", "candidates_to_json", "kept_from_payload", "no_example_message",
           "none_ran", "none_ran_message", "settled_from_cache", "store_choices"]


@dataclass(frozen=True, eq=False)
class ExampleCandidates:
    """One entry point's candidate examples, best first, for the worker to try in order."""

    entry: str
    candidates: tuple[Example, ...]
    key: str  # the example cache key of the file's text
    path: str  # the file, as the origins name it
    groups_in_file: int  # how many entries of the file have candidates: all settle, or none is cached
    # why the __main__ block gave no candidate for this entry (an argument it does not follow), for
    # the message when none of the others runs either
    note: str = ""

    @property
    def text(self) -> str:  # what the worker tries first: named when the worker never got to it
        return self.candidates[0].text

    @property
    def origin(self) -> Optional[str]:
        return self.candidates[0].origin


@dataclass(frozen=True)
class NoCandidateRan:
    """An entry none of whose candidates the original ran on (as the cache remembers it)."""

    entry: str
    message: str


ToVerify = Union[Example, ExampleCandidates]


def candidates_to_json(group: ExampleCandidates) -> dict:
    return {"entry": group.entry, "candidates": [example_to_json(e) for e in group.candidates]}


# The cache is keyed by content: the same text under another path names that path.
_PATH = "<path>"


def _to_cache(kept: list[Example], outcomes: list[dict], path: str) -> dict:
    return {"examples": [{"text": e.text, "origin": (e.origin or "").replace(f", {path}:", f", {_PATH}:")}
                         for e in kept],
            "outcomes": [_moved(o, f"(at {path}:", f"(at {_PATH}:") for o in outcomes]}


def _moved(outcome: dict, old: str, new: str) -> dict:
    """An outcome whose message names the file (``(at k.py:37)``, where the original failed)
    naming it another way: the cache keeps ``<path>``, a reader gets its own path back."""
    message = outcome.get("message")
    return {**outcome, "message": message.replace(old, new)} if isinstance(message, str) else outcome


def kept_from_payload(payload: dict, path: str) -> Optional[list[Example]]:
    """The examples a cache payload kept, their origins naming ``path``; None when the payload is
    not what this version writes (then the candidates are tried again)."""
    try:
        return [parse_example(e["text"], origin=e["origin"].replace(f", {_PATH}:", f", {path}:"))
                for e in payload["examples"]]
    except (KeyError, TypeError, AttributeError, ExampleSyntaxError):
        return None


def none_ran_message(entry: str, tried: Sequence[dict], note: str = "", path: str = "") -> str:
    """Why an entry has no example: none of its candidates ran (``tried``: the outcomes); ``note``:
    why its ``__main__`` call gave none (then recording the script's run gives the exact call)."""
    first = f" (first: {tried[0]['example']}: {tried[0].get('message', '')[:200]})" if tried else ""
    record = f"`pallas-fix record -- python {path}`" if note and path else "`pallas-fix record -- CMD`"
    return (f"not verified: the original ran on none of the {len(tried)} example call(s) synthesised for "
            f"{entry}{first}{'; ' + note if note else ''}; add `# pallas-fix: example {entry}(...)` with shapes "
            f"the original runs on, pass --example, or record the calls of a run with {record}")


def no_example_message(path: str, suggestion: str) -> str:
    """Why a file has no example at all, and the example call to add (named after its entry)."""
    return (f"no example call for {path} (add `# pallas-fix: example {suggestion}`, pass --example, list it in "
            "[tool.pallas-fix.examples] in pyproject.toml, or record a run's calls with `pallas-fix record -- CMD`)")


def none_ran(group: ExampleCandidates, outcomes: list[dict]) -> NoCandidateRan:
    """The entry of ``group`` ran on none of its candidates (``outcomes``: what the worker tried,
    fresh or cached); its message is the same either way."""
    texts = {c.text for c in group.candidates}
    tried = [o for o in outcomes if o.get("example") in texts]
    return NoCandidateRan(group.entry, none_ran_message(group.entry, tried, group.note, group.path))


def settled_from_cache(examples: Sequence[ToVerify]) -> list[Union[ToVerify, NoCandidateRan]]:
    """Each candidate group the cache has settled becomes its kept example, or NoCandidateRan."""
    out: list[Union[ToVerify, NoCandidateRan]] = []
    for ex in examples:
        payload = example_cache.load(ex.key) if isinstance(ex, ExampleCandidates) else None
        kept = kept_from_payload(payload, ex.path) if payload is not None else None
        if kept is None:
            out.append(ex)
            continue
        mine = [e for e in kept if e.entry == ex.entry]
        outcomes = [_moved(o, f"(at {_PATH}:", f"(at {ex.path}:") for o in payload.get("outcomes") or []
                    if isinstance(o, dict)]
        out.append(mine[0] if mine else none_ran(ex, outcomes))
    return out


def store_choices(examples: Sequence[ToVerify], choices: Sequence[Optional[dict]]) -> None:
    """Cache what the worker kept, per file, once every candidate group of that file was settled.

    ``choices[i]``: the worker's ``details["candidate"]`` for ``examples[i]`` (``{"index": k or
    None, "outcomes": [...]}``), None when the worker did not finish trying them."""
    by_key: dict[str, list[tuple[ExampleCandidates, Optional[dict]]]] = {}
    for ex, choice in zip(examples, choices):
        if isinstance(ex, ExampleCandidates):
            by_key.setdefault(ex.key, []).append((ex, choice))
    for key, groups in by_key.items():
        if len(groups) < groups[0][0].groups_in_file or any(choice is None for _, choice in groups):
            continue  # not all tried (the worker stopped early, the import failed): a later run tries again
        kept = [g.candidates[c["index"]] for g, c in groups if c.get("index") is not None]
        outcomes = [o for _, c in groups for o in c.get("outcomes") or []]
        example_cache.store(key, _to_cache(kept, outcomes, groups[0][0].path))
