"""The part of ``pallas-fix record``'s hook that records the script a process runs as ``__main__``.

``python kernel.py`` (or ``python -m pkg.kernel``) runs the kernel file without importing it
through ``sys.meta_path``, so the hook's finder (:mod:`pallas_fix.frontends.cli.record_hook`) never
wraps its loader, and the calls its ``if __name__ == "__main__":`` block makes of its own entry
functions went unrecorded. :func:`watch` finds the first module-level code run with ``__name__
== "__main__"``; when it is a kernel file under the recorded root, the entry functions in its
namespace are wrapped before each of its own top-level lines runs, once they are bound (a name
bound again is wrapped again), so the block's calls, and those of functions it calls, go through
the wrappers. Any other ``__main__`` (pytest, ``-c``) stops the watch at once.

Copied by ``pallas-fix record`` next to the hook as ``pallas_fix_record_main.py`` and imported by
it: standard library only, every error swallowed. Python 3.12+ uses ``sys.monitoring`` (each
function start, then each line of that module, reported at most once); 3.11 uses ``sys.settrace``
until every entry is wrapped.
"""

import sys

_TOOLS = (4, 3)  # sys.monitoring tool ids no standard tool claims (0-2 and 5 are named)


def watch(hook):
    """Watch for the script run as ``__main__``; ``hook``: the recording hook module (its
    ``_is_kernel_file``, ``_recorded_names`` and ``_patch``)."""
    state = {"hook": hook, "path": None, "names": ()}
    if hasattr(sys, "monitoring"):
        _monitor(state)
    else:
        sys.settrace(_tracer(state))


def _is_main_start(code, frame):
    return code.co_name == "<module>" and frame.f_globals.get("__name__") == "__main__"


def _choose(state, code):
    """The script's entries to wrap, when the ``__main__`` code ``code`` is a kernel file."""
    found = state["hook"]._is_kernel_file("__main__", code.co_filename)
    if found is None:
        return False
    state["path"], source = found
    state["names"] = state["hook"]._recorded_names(source)
    return bool(state["names"])


def _wrap(space, state):
    """Wrap the entries the script has bound so far; True once every one is wrapped."""
    state["hook"]._patch(space, state["path"], state["names"])
    return all(getattr(space.get(n), "__pallas_fix_recorded__", False) for n in state["names"])


def _monitor(state):
    mon = sys.monitoring
    tool = next((t for t in _TOOLS if mon.get_tool(t) is None), None)
    if tool is None:
        return  # both free ids are taken (by a debugger, a profiler): the script is not recorded
    mon.use_tool_id(tool, "pallas-fix record")

    def started(code, offset):
        try:
            if _is_main_start(code, sys._getframe(1)):
                mon.set_events(tool, 0)  # decided: nothing else needs watching
                if _choose(state, code):
                    mon.set_local_events(tool, code, mon.events.LINE)
        except Exception:
            mon.set_events(tool, 0)
        return mon.DISABLE

    def line(code, number):
        try:
            _wrap(sys._getframe(1).f_globals, state)
        except Exception:
            pass
        return mon.DISABLE

    mon.register_callback(tool, mon.events.PY_START, started)
    mon.register_callback(tool, mon.events.LINE, line)
    mon.set_events(tool, mon.events.PY_START)


def _tracer(state):
    def local(frame, event, arg):
        if event != "line":
            return local
        try:
            done = _wrap(frame.f_globals, state)
        except Exception:
            done = True
        if done:
            sys.settrace(None)
            return None
        return local

    def start(frame, event, arg):
        if event != "call" or not _is_main_start(frame.f_code, frame):
            return None
        try:
            chosen = _choose(state, frame.f_code)
        except Exception:
            chosen = False
        if not chosen:
            sys.settrace(None)
            return None
        return local

    return start
