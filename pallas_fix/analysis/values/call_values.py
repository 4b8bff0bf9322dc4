"""The value of a call inside a kernel: program_id, casts, traced constants, library functions.

Split from provenance.Env because calls are the largest family of expressions; each function
here takes the environment that evaluates the call's arguments.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

import libcst as cst

from pallas_fix.core import names as N
from pallas_fix.core.model import Origin
from pallas_fix.analysis.values.values import REF, REFLIST, STATIC, STATIC_FLOAT, Val, ValueEnv, combine

_BUILTINS = ("int", "len", "range", "min", "max", "abs", "round")
_ARRAY_METHODS = ("reshape", "sum", "max", "min", "squeeze", "item")
_FILLED = ("jax.numpy.zeros", "jax.numpy.ones", "jax.numpy.full", "jax.numpy.zeros_like")


def call_value(env: ValueEnv, call: cst.Call) -> Val:
    for family in (_load_value, _pallas_value, _cast_value):
        val = family(env, call)
        if val is not None:
            return val
    return _library_value(env, call)


def _traced_const(env: ValueEnv, call: cst.Call, vtype: str = "int") -> Val:
    return Val(Origin.TRACED_CONST, vtype, f"the traced constant `{env.ctx.code(call)}`")


def _load_value(env: ValueEnv, call: cst.Call) -> Optional[Val]:
    """`pltriton.load(ref.at[idx], mask=m)` loads what `ref[idx]` would (the mask only picks
    which lanes are read), and `pltriton.load(ref)` the whole ref: a value loaded from memory,
    as the subscript is, so a start built from it is data-dependent."""
    if not call.args or call.args[0].keyword is not None or not env.ctx.imports.is_(call.func, N.LOADS):
        return None
    view = call.args[0].value
    if isinstance(view, cst.Subscript) and isinstance(view.value, cst.Attribute) and view.value.attr.value == "at":
        return env.ref_load(view) if env.value(view.value.value).is_ref else None
    if env.value(view).is_ref and env.value(view).vtype == "ref":
        return Val(Origin.REF_LOAD, "array", f"a value loaded from `{env.ctx.code(view)}`")
    return None


def _pallas_value(env: ValueEnv, call: cst.Call) -> Optional[Val]:
    """program_id / num_programs, multiple_of, pl.ds, and arange-style index arrays."""
    imports, func = env.ctx.imports, call.func
    args = [a.value for a in call.args]
    if imports.is_(func, N.PROGRAM_ID | N.NUM_PROGRAMS):
        axis = env.static_int(args[0]) if args else None
        which = "program_id" if imports.is_(func, N.PROGRAM_ID) else "num_programs"
        words = f"`pl.{which}({env.ctx.code(args[0]) if args else ''})`"
        return Val(Origin.PROGRAM_ID, "int", words, pid_axis=axis)
    if imports.is_(func, N.AXIS_INDEX):
        # `lax.axis_index("m")` in a `pl.kernel` / `plgpu.kernel` body: the grid cell's position.
        return Val(Origin.TRACED, "int", f"`{env.ctx.code(call)}`")
    if imports.is_(func, N.MULTIPLE_OF) and args:
        inner = env.value(args[0])
        # multiple_of binds a primitive even on a Python int: the result is traced.
        return inner if inner.dynamic else _traced_const(env, call)
    if imports.is_(func, N.DS | N.SLICE):
        return combine([env.value(a) for a in args])
    if imports.is_(func, N.ARANGE):
        base = combine([env.value(a) for a in args if not isinstance(a, cst.Name) or a.value not in ("None",)])
        origin = Origin.TRACED_CONST if not base.dynamic else base.origin
        return Val(origin, "array", f"`{env.ctx.code(call)}`", base.loop, base.pid_axis)
    return None


def _cast_value(env: ValueEnv, call: cst.Call) -> Optional[Val]:
    """`jnp.int32(x)`, `jnp.array(...)`, `jnp.float32(x)`, `x.astype(t)`, convert_element_type."""
    imports, func = env.ctx.imports, call.func
    args = [a.value for a in call.args]
    if imports.is_(func, N.INT_DTYPES | N.ARRAY_CTORS):
        inner = combine([env.value(a) for a in args[:1]])
        if not inner.dynamic:
            vtype = "array" if (args and isinstance(args[0], (cst.List, cst.Tuple))) else "int"
            if imports.is_(func, N.ARRAY_CTORS) and args and isinstance(args[0], cst.Float):
                vtype = "float"
            return _traced_const(env, call, vtype)
        if imports.is_(func, N.INT_DTYPES):
            return replace(inner, vtype="int" if inner.vtype in ("float", "bool") else inner.vtype)
        return inner
    if imports.is_(func, N.FLOAT_DTYPES):
        inner = combine([env.value(a) for a in args[:1]])
        return replace(inner, vtype="float") if inner.dynamic else _traced_const(env, call, "float")
    if imports.is_(func, N.BOOL_DTYPES):
        inner = combine([env.value(a) for a in args[:1]])
        return replace(inner, vtype="bool") if inner.dynamic else Val(Origin.TRACED_CONST, "bool", "traced bool")
    if isinstance(func, cst.Attribute) and func.attr.value == "astype":
        inner = env.value(func.value)
        if not inner.dynamic or not args:
            return inner
        return replace(inner, vtype=_dtype_kind(env, args[0], inner.vtype))
    if imports.qualify(func) == "jax.lax.convert_element_type" and len(args) >= 2:
        inner = env.value(args[0])
        return replace(inner, vtype=_dtype_kind(env, args[1], inner.vtype)) if inner.dynamic else inner
    return None


def _library_value(env: ValueEnv, call: cst.Call) -> Val:
    """Builtins, jnp / lax / pallas / math functions, array methods and local helpers."""
    imports, func = env.ctx.imports, call.func
    refs = _ref_iteration(env, call)
    if refs is not None:
        return refs
    if isinstance(func, cst.Name) and func.value in _BUILTINS:
        vals = [env.value(a.value) for a in call.args]
        return combine(vals) if any(v.dynamic for v in vals) else STATIC
    if isinstance(func, cst.Name) and func.value == "float":
        return STATIC_FLOAT
    qual = imports.qualify(func) or ""
    dyn = [v for v in (env.value(a.value) for a in call.args) if v.dynamic]
    if qual.startswith("jax.numpy.") or qual.startswith("jax.lax."):
        if dyn and call.args and _to_scalar(qual.rsplit(".", 1)[1], call.args[1:]):
            return _scalar_of(env.value(call.args[0].value))
        if dyn:
            return combine(dyn)
        return Val(Origin.TRACED_CONST, "array", f"`{env.ctx.code(call)}`") if qual in _FILLED else STATIC
    if qual.startswith(N.PALLAS) or qual.startswith("math."):
        return combine(dyn) if dyn else STATIC
    if isinstance(func, cst.Attribute) and func.attr.value in _ARRAY_METHODS:
        inner = env.value(func.value)
        return _scalar_of(inner) if _to_scalar(func.attr.value, call.args) else inner
    # A local helper returning a value: only traced when its arguments are.
    return combine(dyn) if dyn else STATIC


def _ref_iteration(env: ValueEnv, call: cst.Call) -> Optional[Val]:
    """`it = iter(refs)`, `x_ref = next(it)`, and a local lambda that returns one
    (`take = lambda present: next(it) if present else None`): refs taken one by one."""
    func = call.func
    if not isinstance(func, cst.Name):
        return None
    args = [a.value for a in call.args if not a.star and a.keyword is None]
    if func.value in ("iter", "next") and args and env.value(args[0]).vtype == "reflist":
        return REFLIST if func.value == "iter" else REF
    single = getattr(env, "single_assignment", None)
    bound = single(func.value) if single is not None else None
    if isinstance(bound, cst.Lambda) and env.value(bound.body).is_ref:
        return REF
    return None


def _to_scalar(op: str, args) -> bool:
    """Does `x.op(*args)` (or `jnp.op(x, *args)`) make a 0-d array of a one-element one?
    `reshape(())`, `squeeze()`, `item()`, and a whole-array `sum()` / `max()` / `min()`."""
    if op == "reshape":
        return len(args) == 1 and isinstance(args[0].value, (cst.Tuple, cst.List)) and not args[0].value.elements
    return op in ("squeeze", "item", "sum", "max", "min") and not args


def _scalar_of(inner: Val) -> Val:
    """A one-element slice made a scalar is an int loaded from memory, as `x_ref[i]` is."""
    if inner.dynamic and inner.vtype == "array1":
        return replace(inner, vtype="int", origin=Origin.REF_LOAD, words=inner.words.replace("a one-element slice ", "a value "))
    return inner


def _dtype_kind(env: ValueEnv, dtype: cst.BaseExpression, current: str) -> str:
    imports = env.ctx.imports
    builtin = dtype.value if isinstance(dtype, cst.Name) else None
    if imports.is_(dtype, N.FLOAT_DTYPES) or builtin == "float":
        return "float"
    if imports.is_(dtype, N.BOOL_DTYPES) or builtin == "bool":
        return "bool"
    if imports.is_(dtype, N.INT_DTYPES) or builtin == "int":
        return "int" if current in ("int", "float", "bool") else current
    if isinstance(dtype, cst.SimpleString):
        text = dtype.evaluated_value
        if isinstance(text, str):
            for kind in ("float", "bool", "int"):
                if kind in text:
                    return kind
    return current
