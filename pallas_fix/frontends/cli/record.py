"""`pallas-fix record [--output FILE] [--max-per-entry N] -- CMD [ARGS...]`: example calls
recorded from the user's own runs (tests, scripts), for verification to use.

CMD runs in a subprocess whose environment puts a directory holding the recording hook
(:mod:`pallas_fix.frontends.cli.record_hook`, copied as ``sitecustomize.py``, with
:mod:`pallas_fix.frontends.cli.record_main` beside it) first on ``PYTHONPATH``, so every Python
process CMD starts records the calls of the entry functions of the kernel modules it imports
from under the current directory, and of the kernel file it runs as ``__main__``. A run that
records no call says what is recorded. Each process writes its records
to its own file in a temporary directory; once CMD has exited they are merged here, at most N
examples per entry (distinct array shapes first, in the order they were first seen), and written
to ``pallas-fix-examples.json`` (:mod:`pallas_fix.verify.examples.recorded` has the format and
reads it), new examples first, then the ones already there, without duplicates; an entry that was
recorded again keeps at most N. The exit status is CMD's (the recording is written when CMD
fails too); 2 when the existing output file is not a recording, 127 when CMD cannot be started.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

from pallas_fix.core.config import ConfigError
from pallas_fix.core.examples import ExampleSyntaxError, parse_example
from pallas_fix.verify.examples.recorded import RECORD_FILE, VERSION, read_recording

__all__ = ["Recording", "merge_records", "record_command", "select_examples"]

_HOOK = Path(__file__).with_name("record_hook.py")
_MAIN_HOOK = Path(__file__).with_name("record_main.py")  # imported by the hook under this name:
_MAIN_HOOK_NAME = "pallas_fix_record_main.py"


@dataclass
class Recording:
    """What the processes of one run recorded, by absolute file path and entry name."""

    calls: dict[tuple[str, str], int] = field(default_factory=dict)
    skipped: dict[tuple[str, str], int] = field(default_factory=dict)
    # (file, entry) -> [(first seen, text, array signature)], first seen first
    examples: dict[tuple[str, str], list[tuple[float, str, str]]] = field(default_factory=dict)


def read_process_records(folder: Path) -> Recording:
    """Merge the per-process files the hook wrote (unreadable ones are ignored)."""
    rec = Recording()
    for file in sorted(folder.glob("*.json")):
        try:
            doc = json.loads(file.read_text(encoding="utf-8"))
            files = doc["files"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        for path, entries in files.items():
            for name, entry in entries.items():
                key = (path, name)
                rec.calls[key] = rec.calls.get(key, 0) + int(entry.get("calls", 0))
                rec.skipped[key] = rec.skipped.get(key, 0) + int(entry.get("skipped", 0))
                seen = rec.examples.setdefault(key, [])
                for ex in entry.get("examples", []):
                    seen.append((float(ex.get("t", 0.0)), str(ex["text"]), str(ex.get("shapes", ""))))
    for key, seen in rec.examples.items():
        first: dict[str, tuple[float, str, str]] = {}
        for item in sorted(seen):
            first.setdefault(item[1], item)
        rec.examples[key] = sorted(first.values())
    return rec


def select_examples(seen: Sequence[tuple[float, str, str]], limit: int) -> list[str]:
    """At most ``limit`` texts: one per distinct array signature first, then the rest, each group
    in first-seen order; the chosen ones keep their first-seen order."""
    chosen: list[int] = []
    signatures: set[str] = set()
    for i, (_, _, sig) in enumerate(seen):
        if len(chosen) < limit and sig not in signatures:
            chosen.append(i)
            signatures.add(sig)
    for i in range(len(seen)):
        if len(chosen) >= limit:
            break
        if i not in chosen:
            chosen.append(i)
    return [seen[i][1] for i in sorted(chosen)]


def _entry(text: str) -> str:
    return text.split("(", 1)[0].strip()


def merge_records(old: dict[str, list[str]], new: dict[str, list[str]], limit: int) -> dict[str, list[str]]:
    """``old`` with ``new`` merged in: per file, the recorded entries first (new examples, then the
    old ones of that entry, deduplicated, at most ``limit``), then the entries not recorded again,
    as they were. Keys sorted."""
    merged: dict[str, list[str]] = {}
    for rel in sorted(set(old) | set(new)):
        before = old.get(rel, [])
        recorded = new.get(rel, [])
        names = list(dict.fromkeys(_entry(t) for t in recorded))
        texts: list[str] = []
        for name in names:
            mine = [t for t in recorded if _entry(t) == name] + [t for t in before if _entry(t) == name]
            texts.extend(list(dict.fromkeys(t.strip() for t in mine))[:limit])
        texts.extend(t for t in before if _entry(t) not in names)
        merged[rel] = texts
    return merged


def _valid(text: str) -> bool:
    try:
        parse_example(text)
    except ExampleSyntaxError:
        return False
    return True


def _run(cmd: Sequence[str], env: dict) -> int:
    """CMD's exit status (128 + N when signal N ended it); Ctrl-C waits for CMD to finish."""
    try:
        proc = subprocess.Popen(list(cmd), env=env)
    except OSError as exc:
        print(f"pallas-fix record: cannot run {cmd[0]!r}: {exc}", file=sys.stderr)
        return 127
    while True:
        try:
            code = proc.wait()
            break
        except KeyboardInterrupt:
            proc.send_signal(signal.SIGINT)
    return 128 - code if code < 0 else code


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def record_command(cmd: Sequence[str], output: Optional[str] = None, max_per_entry: int = 3) -> int:
    """Run ``cmd`` recording entry calls, write the merged recording, print a summary; the exit
    status (see the module docstring)."""
    if not cmd:
        print("pallas-fix record: give the command to run after --, e.g. pallas-fix record -- pytest tests", file=sys.stderr)
        return 2
    out = Path(output) if output else Path.cwd() / RECORD_FILE
    try:
        old = read_recording(out) if out.exists() else {}
    except ConfigError as exc:
        print(f"pallas-fix record: {exc}; not overwriting it", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="pallas-fix-record-"))
    try:
        hook_dir, records = work / "hook", work / "records"
        hook_dir.mkdir()
        records.mkdir()
        shutil.copyfile(_HOOK, hook_dir / "sitecustomize.py")
        shutil.copyfile(_MAIN_HOOK, hook_dir / _MAIN_HOOK_NAME)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(hook_dir)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        env.update(PALLAS_FIX_RECORD_DIR=str(records), PALLAS_FIX_RECORD_ROOT=os.getcwd(),
                   PALLAS_FIX_RECORD_MAX=str(max(1, max_per_entry)))
        code = _run(cmd, env)
        rec = read_process_records(records)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    _write(rec, out, old, max(1, max_per_entry))
    return code


# Said when nothing was recorded: what would have been.
_NOTHING_SEEN = (
    "pallas-fix record: it records the calls of public module-level functions (plain or jitted) that take "
    "arguments and reach a pallas_call, defined in .py files under {root} (modules the command imports, or the "
    "script it runs as __main__) and made from outside another recorded call; run it from your project's "
    "directory, or give the file an example call: `# pallas-fix: example ENTRY(f32[...])`"
)


def _write(rec: Recording, out: Path, old: dict[str, list[str]], limit: int) -> None:
    base = out.resolve().parent
    new: dict[str, list[str]] = {}
    outside: set[str] = set()
    for (path, name), seen in sorted(rec.examples.items(), key=lambda kv: kv[1][0][0] if kv[1] else 0.0):
        try:
            rel = Path(path).resolve().relative_to(base).as_posix()
        except ValueError:
            outside.add(path)
            continue
        new.setdefault(rel, []).extend(t for t in select_examples(seen, limit) if _valid(t))
    calls = sum(n for (path, _), n in rec.calls.items() if path not in outside)
    entries = {key for key, n in rec.calls.items() if n and key[0] not in outside}
    files = {path for path, _ in entries}
    skipped = sum(n for (path, _), n in rec.skipped.items() if path not in outside)
    err = sys.stderr
    summary = f"pallas-fix record: {_plural(calls, 'call')} of {_plural(len(entries), 'entry')}"
    summary = summary.replace("entrys", "entries") + f" in {_plural(len(files), 'file')} recorded"
    if skipped:
        summary += f" ({_plural(skipped, 'call')} skipped: arguments the example grammar cannot write)"
    for path in sorted(outside):
        print(f"pallas-fix record: {path} is not under {base}; its calls are not written", file=err)
    if not new:
        print(summary + "; nothing written", file=err)
        if not calls:
            print(_NOTHING_SEEN.format(root=Path.cwd()), file=err)
        return
    fresh = sum(1 for rel, texts in new.items() for t in texts if t not in old.get(rel, []))
    doc = {"version": VERSION, "examples": merge_records(old, new, limit)}
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, out)
    print(f"{summary}; {_plural(fresh, 'new example')} written to {out}", file=err)
