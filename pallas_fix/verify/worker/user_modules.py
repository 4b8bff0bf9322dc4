"""Loading the original and the rewritten source as two in-memory modules (worker only)."""

from __future__ import annotations

import os
import sys
import types
from typing import Any, Callable

_MODULE_NAMES = {"original": "_pallas_fix_verify_original", "rewritten": "_pallas_fix_verify_rewritten",
                 "observed": "_pallas_fix_verify_observed"}  # the original as ragged variants observe it (main)


def load_module(kind: str, source: str, path: str, tmpdir: str) -> types.ModuleType:
    """Exec ``source`` as a fresh module. The code's file name is a copy under ``tmpdir`` (so
    tracebacks and source lines show this source); ``__file__`` is the user's path when it exists
    (so ``Path(__file__).parent / "data"`` keeps working); the user's directory is on sys.path."""
    name = _MODULE_NAMES[kind]
    base = os.path.basename(path) if path and not path.startswith("<") else "kernel.py"
    if not base.endswith(".py"):
        base += ".py"
    d = os.path.join(tmpdir, kind)
    os.makedirs(d, exist_ok=True)
    code_file = os.path.join(d, base)
    with open(code_file, "w", encoding="utf-8") as f:
        f.write(source)
    user_file = os.path.abspath(path) if path and os.path.exists(path) else code_file
    user_dir = os.path.dirname(user_file)
    if user_dir not in sys.path:
        sys.path.insert(0, user_dir)
    mod = types.ModuleType(name)
    mod.__file__ = user_file
    mod.__dict__["__pallas_fix_source_file__"] = code_file
    sys.modules[name] = mod
    code = compile(source, code_file, "exec", dont_inherit=True)
    exec(code, mod.__dict__)
    return mod


def resolve_entry(mod: types.ModuleType, entry: str) -> Callable:
    obj: Any = mod
    for part in entry.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise LookupError(f"entry point {entry!r} not found in the module (no attribute {part!r})") from None
    if not callable(obj):
        raise LookupError(f"entry point {entry!r} is not callable ({type(obj).__name__})")
    return obj
