"""Where a file's example calls come from; no example at all means "not verified".

Sources, first non-empty wins (:func:`collect_examples`):

1. ``--example`` strings given on the command line;
2. directives anywhere in the file, in comments, several allowed::

       # pallas-fix: example matmul(f32[256, 512], f32[512, 256], block_k=128)

3. ``[tool.pallas-fix.examples]`` in the nearest ``pyproject.toml`` at or above the file (read by
   :func:`pallas_fix.core.config.load_config`): a table from a *file glob* or a *module path* to
   an example string or a list of them::

       [tool.pallas-fix.examples]
       "kernels/matmul.py" = ["matmul(f32[256, 512], f32[512, 256])"]
       "kernels/attn_*.py" = "flash(bf16[1, 4, 256, 64], bf16[1, 4, 256, 64], bf16[1, 4, 256, 64])"
       "mypkg.ops.softmax" = ["softmax(f32[64, 1024])"]

   A key containing ``/``, a glob character (``*?[``) or ending in ``.py`` is a glob matched
   (``fnmatch``: ``*`` also crosses ``/``) against the file's path relative to the directory of
   ``pyproject.toml``; a glob without ``/`` is also tried against the file's base name. Any other
   key is a dotted module path, equal to the file's module name computed from that relative path
   (``src/`` prefix and ``__init__`` dropped). Every matching key contributes, in table order.
4. recorded by ``pallas-fix record -- CMD``: the file's entries in the nearest
   ``pallas-fix-examples.json`` at or above it, keyed by the path relative to that file's directory
   (:mod:`pallas_fix.verify.examples.recorded`; origin ``recorded (pallas-fix-examples.json)``);
5. inferred from jaxtyping annotations, best effort
   (:mod:`pallas_fix.verify.examples.annotations`);
6. synthesised, when asked (``synthesise=True``; the CLI asks unless ``--no-synthesise``): the
   calls of the module's ``if __name__ == "__main__":`` block and calls built from the code,
   kept when the original runs on them (:mod:`pallas_fix.verify.examples.synthesised`): the
   cached examples, else one :class:`~pallas_fix.verify.examples.candidates.ExampleCandidates`
   per entry, which the verification worker tries before it verifies with the first that runs.

Every example carries its origin (``Example.origin``), which the verdict line repeats.

Bare names in examples resolve against the file's module constants
(:mod:`pallas_fix.verify.examples.module_constants`). Nothing here imports jax or runs user code in this
process.
"""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path
from typing import Optional, Sequence

from pallas_fix.core.config import Config, load_config
from pallas_fix.core.directives import extract_directives
from pallas_fix.core.examples import Example, parse_example
from pallas_fix.verify.examples.annotations import infer_examples
from pallas_fix.verify.examples.module_constants import safe_module_constants
from pallas_fix.verify.examples.recorded import examples_from_recording
from pallas_fix.verify.examples.synthesised import synthesised_examples

__all__ = ["collect_examples", "examples_from_directives", "examples_from_pyproject"]


def examples_from_directives(
    source: str, *, path: str = "<kernel>", constants: Optional[dict] = None
) -> list[Example]:
    """Parse the example directives of a file (raises ExampleSyntaxError on the first bad one)."""
    if constants is None:
        constants = safe_module_constants(source)
    return [
        parse_example(
            d.text,
            constants=constants,
            origin=f"{path}:{d.line}",
            line_text=d.line_text.rstrip("\n"),
            line_offset=d.column,
        )
        for d in extract_directives(source)
        if d.kind == "example"
    ]


def _module_names(rel: str) -> set[str]:
    parts = rel[:-3].split("/") if rel.endswith(".py") else rel.split("/")
    if parts and parts[-1] == "__init__":
        parts = parts[:-1]
    names = {".".join(parts)}
    if parts and parts[0] == "src":
        names.add(".".join(parts[1:]))
    return names


def _key_matches(key: str, rel: str) -> bool:
    """Does a ``[tool.pallas-fix.examples]`` key name the file at ``rel`` (see the docstring)?"""
    if "/" in key or key.endswith(".py") or any(c in key for c in "*?["):
        base = rel.rsplit("/", 1)[-1]
        return fnmatch.fnmatchcase(rel, key) or ("/" not in key and fnmatch.fnmatchcase(base, key))
    return key in _module_names(rel)


def examples_from_pyproject(
    path: str | os.PathLike,
    *,
    constants: Optional[dict] = None,
    config: Optional[Config] = None,
) -> list[Example]:
    """Examples for ``path`` from ``[tool.pallas-fix.examples]`` (see the module docstring).

    ``config`` defaults to the one :func:`load_config` finds for ``path`` (raises ConfigError
    for a malformed pyproject.toml)."""
    if config is None:
        config = load_config(Path(path))
    pyproject = config.source
    if pyproject is None:
        return []
    try:
        rel = Path(path).resolve().relative_to(pyproject.parent.resolve()).as_posix()
    except ValueError:
        rel = Path(path).as_posix()
    return [
        parse_example(text, constants=constants, origin=f"{pyproject.name} [tool.pallas-fix.examples] {key!r}")
        for key, texts in config.examples.items()
        if _key_matches(key, rel)
        for text in texts
    ]


def collect_examples(
    path: str | os.PathLike,
    source: Optional[str] = None,
    *,
    cli_examples: Sequence[str] = (),
    pyproject: bool = True,
    recorded: bool = True,
    synthesise: bool = False,
) -> list[Example]:
    """Examples for one file, from the first non-empty source in priority order.

    ``pyproject=False`` skips ``[tool.pallas-fix.examples]``; ``recorded=False`` skips
    ``pallas-fix-examples.json``; ``synthesise=True`` adds the last source (nothing runs here:
    uncached candidates are tried by :func:`~pallas_fix.verify.runner.verify_sources`).
    Raises :class:`ExampleSyntaxError` for a malformed example in the winning source, ConfigError
    for a malformed pyproject.toml or recording.
    """
    if source is None:
        source = Path(path).read_text(encoding="utf-8")
    constants = safe_module_constants(source)
    if cli_examples:
        return [parse_example(t, constants=constants, origin="--example") for t in cli_examples]
    found = examples_from_directives(source, path=str(path), constants=constants)
    if not found and pyproject:
        found = examples_from_pyproject(path, constants=constants)
    if not found and recorded:
        found = examples_from_recording(path, constants=constants)
    found = found or infer_examples(source, path=str(path), constants=constants)
    if not found and synthesise:
        found = synthesised_examples(str(path), source)
    return found
