"""The recording hook of ``pallas-fix record``: copied as ``sitecustomize.py`` into a directory
that the recorded command gets on ``PYTHONPATH``, so every Python process it starts runs it.

Standard library only, and nothing from pallas_fix: it must cost next to nothing at start-up and
work under any Python the command uses. Imported under any other name it does nothing.

What it does, in a process whose environment has ``PALLAS_FIX_RECORD_DIR``:

* chains to the ``sitecustomize`` it shadows, if there is one further along ``sys.path``;
* puts a finder first in ``sys.meta_path`` that asks the finders after it for each module's spec
  and, for a ``.py`` file under ``PALLAS_FIX_RECORD_ROOT`` (not in site-packages, not pallas_fix
  itself) whose source mentions ``pallas_call``, wraps that module's loader so that once the
  module has run, its public module-level functions that reach a ``pallas_call`` (read with
  :mod:`ast`: a function naming ``pallas_call``, or naming one that does) are replaced by
  recording wrappers. Plain functions get a ``functools.wraps`` wrapper; other callables (jitted
  functions) a proxy that forwards every attribute (``.lower``, ``.trace``, ``__wrapped__``).
  The script run as ``__main__`` (``python kernel.py``) is imported by no finder: the module
  copied next to this one (:mod:`pallas_fix.frontends.cli.record_main`) wraps its names instead;
* a wrapper calls through unchanged. When the call is not nested inside another recorded call and
  returns without raising, it records the arguments in the example grammar: arrays (anything with
  an integer ``.shape`` and a known ``.dtype``: numpy and jax arrays, tracers, ShapeDtypeStructs)
  as ``f32[128, 256]`` (concrete integer arrays with their value range, ``i32[8] in [0, 4)``),
  ints, floats, bools, strings and None as literals, tuples and lists of these as tuples and
  lists, keyword arguments as ``name=value``. A call with any other argument is counted as skipped;
* writes this process's records (per file and entry: calls, skipped calls, distinct examples with
  their array signature and first-seen time) as JSON to its own file in ``PALLAS_FIX_RECORD_DIR``
  when a new example appears and at exit; a forked child starts afresh under its own name.

Every error inside the recording is swallowed: the recorded program behaves as without it.
"""

import ast
import atexit
import functools
import json
import os
import sys
import threading
import time

_DTYPES = {
    "float32": "f32", "bfloat16": "bf16", "float16": "f16", "float64": "f64",
    "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64",
    "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64", "bool": "bool",
}
_RANGE_MAX_SIZE = 1 << 20  # integer arrays up to this size get a value range
_state = {}  # abs path -> entry -> {"calls", "skipped", "examples": [{"text", "shapes", "t"}]}
_lock = threading.Lock()
_local = threading.local()
_config = {}


class _Skip(Exception):
    """An argument the example grammar cannot write."""


# --------------------------------------------------------------------------- describing calls

def _array(x):
    dtype = getattr(x, "dtype", None)
    name = _DTYPES.get(str(getattr(dtype, "name", None) or dtype))
    if name is None:
        raise _Skip()
    dims = []
    for d in tuple(x.shape):
        if isinstance(d, bool) or not isinstance(d, int):
            try:
                d = int(d.__index__())
            except Exception:
                raise _Skip()  # a symbolic dimension
        dims.append(str(d))
    text = "%s[%s]" % (name, ", ".join(dims))
    return text + _value_range(x, name), text


def _value_range(x, name):
    """`` in [lo, hi)`` for a concrete integer numpy or jax array; "" otherwise (tracers)."""
    if name == "bool" or name[0] not in "iu":
        return ""
    kind = type(x)
    if not ((kind.__module__ == "numpy" and kind.__name__ == "ndarray") or kind.__name__ == "ArrayImpl"):
        return ""
    np = sys.modules.get("numpy")
    try:
        if np is None or not 0 < int(x.size) <= _RANGE_MAX_SIZE:
            return ""
        values = np.asarray(x)
        return " in [%d, %d)" % (int(values.min()), int(values.max()) + 1)
    except Exception:
        return ""


def _value(v, shapes):
    if v is None or type(v) is bool:
        return repr(v)
    if type(v) is int:
        return repr(v)
    if type(v) is float:
        if v != v or v in (float("inf"), float("-inf")):
            raise _Skip()
        return repr(v)
    if type(v) is str:
        return repr(v)
    if isinstance(v, (tuple, list)) and type(v) in (tuple, list):
        items = [_value(x, shapes) for x in v]
        if type(v) is list:
            return "[%s]" % ", ".join(items)
        return "(%s,)" % items[0] if len(items) == 1 else "(%s)" % ", ".join(items)
    if hasattr(v, "shape") and hasattr(v, "dtype"):
        text, signature = _array(v)
        shapes.append(signature)
        return text
    raise _Skip()


def _describe(name, args, kwargs):
    """(example text, array signature) of a call, or None when an argument cannot be written."""
    try:
        shapes = []
        parts = [_value(a, shapes) for a in args]
        for key, v in kwargs.items():
            if not (isinstance(key, str) and key.isidentifier()):
                return None
            parts.append("%s=%s" % (key, _value(v, shapes)))
        return "%s(%s)" % (name, ", ".join(parts)), "; ".join(shapes)
    except Exception:
        return None


# --------------------------------------------------------------------------- keeping records

def _commit(path, name, described):
    try:
        with _lock:
            entry = _state.setdefault(path, {}).setdefault(name, {"calls": 0, "skipped": 0, "examples": []})
            if described is None:
                entry["skipped"] += 1
                return
            entry["calls"] += 1
            text, shapes = described
            examples = entry["examples"]
            if any(e["text"] == text for e in examples):
                return
            same_shapes = sum(1 for e in examples if e["shapes"] == shapes)
            distinct = len({e["shapes"] for e in examples})
            keep = _config["max"]
            if same_shapes >= keep or (same_shapes == 0 and distinct >= 4 * keep + 16):
                return
            examples.append({"text": text, "shapes": shapes, "t": time.time()})
            _write_locked()
    except Exception:
        pass


def _write_locked():
    target = os.path.join(_config["dir"], "%d-%s.json" % (os.getpid(), _config["tag"]))
    tmp = target + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"pid": os.getpid(), "files": _state}, f)
    os.replace(tmp, target)


def _write_at_exit():
    try:
        with _lock:
            if _state:
                _write_locked()
    except Exception:
        pass


def _after_fork_in_child():
    global _lock
    _lock = threading.Lock()
    _state.clear()
    _config["tag"] = "%x" % int(time.time() * 1e6)


# --------------------------------------------------------------------------- wrappers

def _enter():
    depth = getattr(_local, "depth", 0)
    _local.depth = depth + 1
    return depth == 0


def _leave():
    _local.depth -= 1


def _call(target, path, name, args, kwargs):
    outer = _enter()
    try:
        described = _describe(name, args, kwargs) if outer else None
        result = target(*args, **kwargs)
        if outer:
            _commit(path, name, described)
        return result
    finally:
        _leave()


def _function_wrapper(fn, path, name):
    @functools.wraps(fn)
    def recorded(*args, **kwargs):
        return _call(fn, path, name, args, kwargs)

    recorded.__pallas_fix_recorded__ = True
    return recorded


class _Recorded:
    """A callable object (a jitted function) that records its calls and forwards the rest."""

    def __init__(self, target, path, name):
        object.__setattr__(self, "_pf_target", target)
        object.__setattr__(self, "_pf_where", (path, name))
        for attr in ("__module__", "__doc__", "__name__", "__qualname__"):
            try:
                object.__setattr__(self, attr, getattr(target, attr))
            except Exception:
                pass

    def __call__(self, *args, **kwargs):
        path, name = self._pf_where
        return _call(self._pf_target, path, name, args, kwargs)

    def __getattr__(self, attr):
        return getattr(object.__getattribute__(self, "_pf_target"), attr)

    def __setattr__(self, attr, value):
        setattr(self._pf_target, attr, value)

    def __get__(self, obj, objtype=None):
        getter = getattr(type(self._pf_target), "__get__", None)
        return self if getter is None or obj is None else getter(self._pf_target, obj, objtype)

    def __repr__(self):
        return repr(self._pf_target)

    __pallas_fix_recorded__ = True


# --------------------------------------------------------------------------- which modules, which names

def _mentions(node):
    return any(
        (isinstance(n, ast.Name) and n.id == "pallas_call") or (isinstance(n, ast.Attribute) and n.attr == "pallas_call")
        for n in ast.walk(node)
    )


def _recorded_names(source):
    """The public module-level names bound by a ``def`` or an assignment from a call (``jax.jit(f)``)
    that reach a ``pallas_call``; not a ``def`` without parameters (a script's ``main()``): its
    call has no shapes to record, and would hide the calls of the entries it makes."""
    tree = ast.parse(source)
    nodes = {}
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            nodes[stmt.name] = stmt
        elif isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call):
            for t in stmt.targets:
                if isinstance(t, ast.Name):
                    nodes[t.id] = stmt.value
    uses = {
        name: {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and n.id in nodes and n.id != name}
        for name, node in nodes.items()
    }
    reach = {name for name, node in nodes.items() if _mentions(node)}
    grown = True
    while grown:
        more = {name for name, used in uses.items() if name not in reach and used & reach}
        grown = bool(more)
        reach |= more
    takes_nothing = {n for n, node in nodes.items() if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                     and not any(getattr(node.args, a) for a in ("posonlyargs", "args", "vararg", "kwonlyargs", "kwarg"))}
    return sorted(n for n in reach if not n.startswith("_") and n not in takes_nothing)


def _is_kernel_file(name, origin):
    if not origin or not origin.endswith(".py") or name == "pallas_fix" or name.startswith("pallas_fix."):
        return None
    path = os.path.realpath(origin)
    root = _config["root"]
    if not path.startswith(root.rstrip(os.sep) + os.sep):
        return None
    parts = path.split(os.sep)
    if "site-packages" in parts or "dist-packages" in parts:
        return None
    with open(path, "rb") as f:
        source = f.read()
    if b"pallas_call" not in source:
        return None
    return path, source


def _patch(space, path, names):
    """Wrap ``names`` in a module's namespace (those that are functions not wrapped yet)."""
    for name in names:
        obj = space.get(name)
        if obj is None or isinstance(obj, type) or not callable(obj) or getattr(obj, "__pallas_fix_recorded__", False):
            continue
        if type(obj).__name__ == "function":
            space[name] = _function_wrapper(obj, path, name)
        else:
            space[name] = _Recorded(obj, path, name)


def _wrap_loader(spec):
    found = _is_kernel_file(spec.name, spec.origin)
    loader = spec.loader
    if found is None or loader is None or not hasattr(loader, "exec_module"):
        return
    path, source = found
    exec_module = loader.exec_module

    def exec_and_patch(module):
        exec_module(module)
        try:
            _patch(module.__dict__, path, _recorded_names(source))
        except Exception:
            pass

    loader.exec_module = exec_and_patch


class _Finder:
    """First in ``sys.meta_path``: finds a spec with the finders after it, then wraps its loader."""

    def find_spec(self, name, path=None, target=None):
        meta = sys.meta_path
        start = next((i for i, f in enumerate(meta) if f is self), -1) + 1
        for finder in meta[start:]:
            find = getattr(finder, "find_spec", None)
            if find is None:
                continue
            spec = find(name, path, target)
            if spec is not None:
                try:
                    _wrap_loader(spec)
                except Exception:
                    pass
                return spec
        return None

    def invalidate_caches(self):
        pass


# --------------------------------------------------------------------------- start-up

def _chain():
    """Run the ``sitecustomize`` this file shadows (the next one on sys.path), if any."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


def _install():
    directory = os.environ.get("PALLAS_FIX_RECORD_DIR")
    if not directory:
        return
    try:
        _config.update(
            dir=directory,
            root=os.path.realpath(os.environ.get("PALLAS_FIX_RECORD_ROOT") or os.getcwd()),
            max=max(1, int(os.environ.get("PALLAS_FIX_RECORD_MAX") or 3)),
            tag="%x" % int(time.time() * 1e6),
        )
        sys.meta_path.insert(0, _Finder())
        atexit.register(_write_at_exit)
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=_after_fork_in_child)
        import pallas_fix_record_main  # copied next to this file: watches the script run as __main__

        pallas_fix_record_main.watch(sys.modules[__name__])
    except Exception:
        pass


if __name__ == "sitecustomize":
    _install()
    try:
        _chain()
    except Exception:
        pass
