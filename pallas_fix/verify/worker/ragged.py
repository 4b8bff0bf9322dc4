"""Ragged variants of an example: the shapes the code allows that do not divide.

Examples are usually written with sizes that divide the block sizes, and those hide the bugs of
a ragged tail (a partial last block where the original clamped its slice, a mask computed from
the wrong offset). When the code itself says it allows ragged sizes - it calls ``pl.cdiv`` or it
compares an ``iota``-derived index with a size (a mask) - each verified example gets a variant
where the sizes that feed them are made non-multiples, and is verified again on it.

Which sizes: the original entry is traced once (nothing runs) with ``pl.cdiv`` recording its
integer arguments, and the kernel jaxprs are searched for comparisons of an iota-derived value
with a constant. A numerator that its divisor divides, or a mask bound that is a multiple of 8,
is a size to change (``n -> n - 3``, or the next delta that does not divide); every array
dimension of that size, and every integer argument of that value (unless the value is also a
divisor: a block size), changes in the variant. A variant the original itself does not run on
is dropped, not a failure (:func:`runs_on`).

Padding hides the same bugs: a wrapper that pads to a multiple (`jnp.pad(x, ((0, 0), (0, (-d) %
128)))`) pads nothing on a width of 256, so a rewrite that reads the unpadded width where the
kernel gets the padded one agrees with the original there. The trace also records `jnp.pad`'s
static widths; a dim padded by nothing whose size, made smaller by a few, makes some pad non-zero
is a dim to change as well (:func:`padding_variants`).

A synthesised example's sizes are chosen large (pallas-fix picked them, not the user), which hides
a window that ends past a small array: traced, its start is clamped; made a Python int, it fails
at trace time. So a verdict on a synthesised example is checked again at the smallest shapes the
original runs on, its largest dim halved while the original still runs (:func:`verify_boundary`).
"""

from __future__ import annotations

import contextlib
from dataclasses import replace
from typing import Callable, Iterator, Optional

from pallas_fix.core.examples import ArgSpec, Example, format_value, map_arrays
from pallas_fix.verify.judge.jaxprs import as_jaxprs, open_jaxpr
from pallas_fix.verify.judge.ref_indexers import is_var

# Words in a source that say the code may allow sizes that do not divide.
_RAGGED_WORDS = ("cdiv", "iota", "pad")
_COMPARISONS = frozenset({"lt", "le", "gt", "ge"})
_DELTAS = (3, 1, 5)
_SMALLEST = 8  # the smallest dim a boundary variant tries (a TPU sublane tile)


def may_be_ragged(source: str) -> bool:
    """Cheap gate: only sources that mention ``cdiv``, ``iota`` or ``pad`` get variants."""
    return any(word in source for word in _RAGGED_WORDS)


def ragged_variants(fn: Callable, ex: Example) -> list[Example]:
    """The variants of ``ex`` to verify (all changes at once first, then each change alone when
    there are several); none when every size the code divides already leaves a remainder."""
    numerators, divisors, pads = _observed_sizes(fn, ex)
    changes = {n: m for n, d in numerators if (m := _ragged_size(n, d)) is not None}
    candidates = [changes] + ([{n: m} for n, m in changes.items()] if len(changes) > 1 else [])
    variants = []
    for change in candidates if changes else []:
        variant = _substitute(ex, change, divisors)
        if variant is not None and variant.canonical() not in {v.canonical() for v in variants}:
            variants.append(variant)
    for variant in padding_variants(fn, ex, pads) if pads else []:
        if variant.canonical() not in {v.canonical() for v in variants}:
            variants.append(variant)
    return variants


def _ragged_size(n: int, divisor: Optional[int]) -> Optional[int]:
    """A size near ``n`` that ``divisor`` does not divide, when ``n`` divides evenly today."""
    if divisor is not None and (divisor <= 1 or n % divisor):
        return None
    if divisor is None and n % 8:
        return None  # a mask bound that is already not a round size
    for delta in _DELTAS:
        m = n - delta
        if m > 0 and m % (divisor or 8):
            return m
    return None


# -- observing the sizes -----------------------------------------------------------------------
def _observed_sizes(fn: Callable, ex: Example) -> tuple[list[tuple[int, Optional[int]]], set[int], list]:
    """([(size, divisor or None for a mask bound)], the divisors, the `jnp.pad` calls as
    (shape, widths)) the original uses on ``ex``."""
    recorded: list[tuple[int, int]] = []
    jaxpr, pads = _trace(fn, ex, recorded)
    sizes: list[tuple[int, Optional[int]]] = list(recorded)
    sizes += [(bound, None) for bound in _mask_bounds(jaxpr)]
    return sizes, {d for _, d in recorded}, pads


def _trace(fn: Callable, ex: Example, cdivs: list) -> tuple[object, list]:
    """The original's jaxpr on ``ex`` (nothing runs), recording `pl.cdiv` and `jnp.pad`."""
    from pallas_fix.verify.worker.calls import Call
    from pallas_fix.verify.worker.kernel_survey import trace

    import jax

    call = Call(ex)
    pads: list = []
    jax.clear_caches()  # a jitted entry traced for the verdict would not run its Python again
    with _recording_cdiv(cdivs), _recording_pad(pads):
        jaxpr = trace(call.bind(fn), call.shape_structs())
    return jaxpr, pads


def padding_variants(fn: Callable, ex: Example, pads: list) -> list[Example]:
    """``ex`` with the array dims `jnp.pad` padded by nothing made a little smaller, where that
    makes some padding non-zero (the wrapper rounds the dim up to a multiple): all of them at
    once, then each alone when there are several. One dim at a time, so that the rows of a
    square example stay as they were when only its width is padded."""
    sizes = {shape[k] for shape, widths in pads for k, w in enumerate(widths) if w == (0, 0)}
    base = _padded_count(pads)
    found: dict[tuple[int, int], int] = {}
    for slot, spec in enumerate(_arrays(ex)):
        for dim, n in enumerate(spec.shape):
            m = _reacting_size(fn, ex, slot, dim, n, base) if n in sizes else None
            if m is not None:
                found[(slot, dim)] = m
    changes = [found] + ([{k: m} for k, m in found.items()] if len(found) > 1 else [])
    return [_resized(ex, change) for change in changes if change]


def _reacting_size(fn: Callable, ex: Example, slot: int, dim: int, n: int, base: int) -> Optional[int]:
    """The first of n - 3, n - 1, n - 5 the original traces on (as dim `dim` of array `slot`),
    if it pads more than ``ex`` does."""
    for delta in _DELTAS:
        if n - delta <= 0:
            return None
        try:
            _, after = _trace(fn, _resized(ex, {(slot, dim): n - delta}), [])
        except Exception:  # the original rejects that size: try the next
            continue
        return n - delta if _padded_count(after) > base else None
    return None


def _arrays(ex: Example) -> list[ArgSpec]:
    found: list[ArgSpec] = []
    for v in [*ex.args, *ex.kwargs.values()]:
        map_arrays(v, found.append)
    return found


def _resized(ex: Example, change: dict[tuple[int, int], int]) -> Example:
    """``ex`` with dim d of its k-th array set to m, for every (k, d): m of ``change``."""
    count = iter(range(1 << 30))

    def shape(spec: ArgSpec) -> ArgSpec:
        k = next(count)
        dims = tuple(change.get((k, d), n) for d, n in enumerate(spec.shape))
        return replace(spec, shape=dims)

    args = [map_arrays(a, shape) for a in ex.args]
    kwargs = {k: map_arrays(v, shape) for k, v in ex.kwargs.items()}
    parts = [format_value(a) for a in args] + [f"{k}={format_value(v)}" for k, v in kwargs.items()]
    return Example(entry=ex.entry, args=args, kwargs=kwargs, text=f"{ex.entry}({', '.join(parts)})",
                   origin=f"padding variant of {ex.origin or ex.text}")


def _padded_count(pads: list) -> int:
    return sum(1 for _, widths in pads for w in widths if w != (0, 0))


@contextlib.contextmanager
def _recording_pad(recorded: list) -> Iterator[None]:
    """``jnp.pad`` as user code calls it, recording (shape, ((before, after), ...)) for the calls
    whose widths are Python ints."""
    import jax.numpy as jnp

    original = jnp.pad

    def pad(array, pad_width, *args, **kwargs):
        widths = _static_widths(pad_width, len(getattr(array, "shape", ())))
        if widths is not None:
            recorded.append((tuple(array.shape), widths))
        return original(array, pad_width, *args, **kwargs)

    jnp.pad = pad
    try:
        yield
    finally:
        jnp.pad = original


def _static_widths(pad_width, rank: int) -> Optional[tuple[tuple[int, int], ...]]:
    """numpy's pad_width forms (n, (n,), (a, b), ((a, b), ...)) as one (before, after) per dim."""
    def ints(v) -> bool:
        return isinstance(v, (list, tuple)) and all(type(i) is int for i in v)

    if type(pad_width) is int:
        return ((pad_width, pad_width),) * rank
    if ints(pad_width) and len(pad_width) in (1, 2):
        pair = (pad_width[0], pad_width[-1])
        return (pair,) * rank
    if not (isinstance(pad_width, (list, tuple)) and all(ints(p) and len(p) in (1, 2) for p in pad_width)):
        return None
    if len(pad_width) == 1:
        return ((pad_width[0][0], pad_width[0][-1]),) * rank  # one pair for every dim
    return tuple((p[0], p[-1]) for p in pad_width) if len(pad_width) == rank else None


@contextlib.contextmanager
def _recording_cdiv(recorded: list) -> Iterator[None]:
    """``pl.cdiv`` as user code calls it (an attribute of the pallas module), recording the
    Python-int calls."""
    from jax.experimental import pallas as pl

    original = pl.cdiv

    def cdiv(a, b):
        if type(a) is int and type(b) is int:
            recorded.append((a, b))
        return original(a, b)

    pl.cdiv = cdiv
    try:
        yield
    finally:
        pl.cdiv = original


def _mask_bounds(jaxpr) -> set[int]:
    """Integer constants compared with an iota-derived value anywhere in the traced program."""
    found: set[int] = set()
    seen: set[int] = set()

    def walk(j) -> None:
        j = open_jaxpr(j)
        if id(j) in seen:
            return
        seen.add(id(j))
        derived: set = set()
        for eqn in j.eqns:
            ins = [v for v in eqn.invars if is_var(v)]
            if eqn.primitive.name == "iota" or any(v in derived for v in ins):
                derived.update(eqn.outvars)
            if eqn.primitive.name in _COMPARISONS and any(v in derived for v in ins):
                found.update(b for x in eqn.invars if (b := _int_literal(x)) is not None)
            for value in eqn.params.values():
                for sub in as_jaxprs(value):
                    walk(sub)

    walk(jaxpr)
    return found


def _int_literal(x) -> Optional[int]:
    if is_var(x) or not hasattr(x, "val"):
        return None
    try:
        value = int(x.val)
    except (TypeError, ValueError):
        return None
    return value if value == x.val and value > 0 else None


# -- the variant -------------------------------------------------------------------------------
def _substitute(ex: Example, change: dict[int, int], divisors: set[int]) -> Optional[Example]:
    """``ex`` with the changed sizes; None when none of them appears in it."""
    ints = {n: m for n, m in change.items() if n not in divisors}
    touched = False

    def shape(spec: ArgSpec) -> ArgSpec:
        nonlocal touched
        dims = tuple(change.get(d, d) for d in spec.shape)
        touched |= dims != spec.shape
        return replace(spec, shape=dims)

    def value(v):
        nonlocal touched
        if type(v) is int and v in ints:
            touched = True
            return ints[v]
        return map_arrays(v, shape)

    args = [value(a) for a in ex.args]
    kwargs = {k: value(v) for k, v in ex.kwargs.items()}
    if not touched:
        return None
    parts = [format_value(a) for a in args] + [f"{k}={format_value(v)}" for k, v in kwargs.items()]
    text = f"{ex.entry}({', '.join(parts)})"
    origin = f"ragged variant of {ex.origin or ex.text}"
    return Example(entry=ex.entry, args=args, kwargs=kwargs, text=text, origin=origin)


def runs_on(fn: Callable, ex: Example, seed: int) -> Optional[str]:
    """None when the original runs on ``ex`` under the HLO interpreter, else why not."""
    from pallas_fix.verify.worker.calls import Call, Runner
    from pallas_fix.verify.worker.failures import summarize_exc

    call = Call(ex, reference=fn)
    try:
        Runner(fn, call, True)(call.inputs(seed))
    except Exception as e:
        return summarize_exc(e)
    return None


# -- the verdict -------------------------------------------------------------------------------
def verify_variants(fn: Callable, ex: Example, verdict: dict, seed: int,
                    verify: Callable[[Example], dict], observed: Optional[Callable] = None) -> dict:
    """``verdict`` (a verified example) checked again on each ragged variant: the first variant
    that fails decides the verdict; the shapes that ran and those dropped are said either way.
    ``observed``: the original with its hand-spelled ceilings recorded (verify.examples.ceilings),
    traced only to choose the variants."""
    try:
        variants = ragged_variants(observed or fn, ex)
    except Exception as e:  # the original traced for the verdict; a failure here is ours
        verdict["details"].setdefault("notes", []).append(f"ragged variants not derived ({type(e).__name__}: {e})")
        return verdict
    if not variants:
        return verdict
    ran, dropped = [], []
    for variant in variants:
        why = runs_on(fn, variant, seed)
        if why is not None:
            dropped.append(f"`{variant.canonical()}` (the original does not run on it: {why})")
            continue
        result = verify(variant)
        if result["details"].get("uncompared"):
            # A lift the interpreters can judge only where its blocks divide (verify.judge.partial_blocks).
            dropped.append(f"`{variant.canonical()}` (a partial block the interpreters cannot judge under this lift)")
            continue
        if result["status"] != "verified" and result["details"].get("rejected_by_check"):
            # The rewrite's own check (a guard it added, rewrite.guards.shape_guards) rejects the variant
            # at trace time: outside the contract the fix states, not a wrong result.
            dropped.append(f"`{variant.canonical()}` (the rewrite's check rejects it: {result['message']})")
            continue
        if result["status"] != "verified":
            return _failed_on(verdict, variant, result)
        ran.append(f"`{variant.canonical()}`")
        verdict["seconds"] = round(verdict["seconds"] + result["seconds"], 3)
        verdict["max_abs_err"] = _larger(verdict["max_abs_err"], result["max_abs_err"])
        verdict["max_rel_err"] = _larger(verdict["max_rel_err"], result["max_rel_err"])
    verdict["details"]["ragged"] = {"ran": ran, "dropped": dropped}
    if ran:
        verdict["message"] += f"; also on the ragged shapes {', '.join(ran)}"
    if dropped:
        verdict["message"] += f"; ragged variant{'s' if len(dropped) > 1 else ''} dropped: {'; '.join(dropped)}"
    return verdict


def verify_boundary(fn: Callable, ex: Example, verdict: dict, seed: int, verify: Callable[[Example], dict]) -> dict:
    """``verdict`` (verified on a synthesised example, whose sizes pallas-fix chose large) checked
    again at the smallest size the original runs on: the example's largest dim halved until the
    original no longer runs (a window that ends at the array's end, one block). A start the
    rewrite made static past the end, clamped when traced, fails there."""
    variant = boundary_variant(fn, ex, seed)
    if variant is None:
        return verdict
    result = verify(variant)
    if result["status"] != "verified" and not result["details"].get("rejected_by_check") and not result["details"].get("uncompared"):
        return _failed_on(verdict, variant, result)
    if result["status"] == "verified":
        verdict["message"] += f"; also on the smallest shapes `{variant.canonical()}`"
    return verdict


def boundary_variant(fn: Callable, ex: Example, seed: int) -> Optional[Example]:
    """``ex`` with every dim of its largest size made the smallest fraction of it (down to 8)
    that the original runs on; None when no smaller size runs."""
    sizes = [d for spec in _arrays(ex) for d in spec.shape]
    n = max(sizes, default=0)
    smaller = [n >> k for k in range(1, n.bit_length()) if n >> k >= _SMALLEST and n % (n >> k) == 0]
    for m in reversed(smaller):
        variant = _substitute(ex, {n: m}, set())
        if variant is not None and runs_on(fn, variant, seed) is None:
            return replace(variant, origin=f"boundary variant of {ex.origin or ex.text}")
    return None


def _failed_on(verdict: dict, variant: Example, result: dict) -> dict:
    if variant.origin.startswith("boundary variant"):
        shapes = f"`{variant.canonical()}` (the smallest shapes the original runs on, beside the synthesised example)"
    elif variant.origin.startswith("padding variant"):
        shapes = f"`{variant.canonical()}` (a padding variant: a size the wrapper pads, made one its padding changes)"
    else:
        shapes = f"`{variant.canonical()}` (a ragged variant: sizes the code allows that do not divide)"
    out = dict(result)
    out["entry"] = verdict["entry"]
    out["message"] = f"on {shapes}: {result['message']}; the example as given verified"
    out["seconds"] = round(verdict["seconds"] + result["seconds"], 3)
    out["details"] = {**verdict["details"], "ragged": {"failed": variant.canonical(), "details": result["details"]}}
    return out


def _larger(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return None if a is None or b is None else max(a, b)
