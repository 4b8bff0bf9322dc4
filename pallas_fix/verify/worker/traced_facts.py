"""Facts from the examples, worker side: trace the original on each example (nothing runs) and
record every pallas_call's kernel and the (shape, dtype) of its operands and results
(:mod:`pallas_fix.core.traced_facts` says what the client makes of them).

A job with ``"facts_only": true`` emits, per example, ``{"type": "facts", "index": i, "example":
"entry(...) (origin)", "calls": [{"kernel", "line" (of its def), "num_scalar_prefetch", "operands":
[[shape, dtype]...], "results": [...]}]}`` and ``"error"`` instead of ``"calls"`` when the example does not trace. For an
entry's synthesised candidates the one the original runs on is traced (as verification keeps it).
"""

from __future__ import annotations

from typing import Callable

from pallas_fix.core.example_values import origin_phrase
from pallas_fix.verify.judge.jaxprs import as_jaxprs, open_jaxpr
from pallas_fix.verify.worker.calls import Call
from pallas_fix.verify.worker.candidate_trial import try_candidates
from pallas_fix.verify.worker.failures import summarize_exc
from pallas_fix.verify.worker.kernel_survey import kernel_name, trace
from pallas_fix.verify.worker.user_modules import resolve_entry


def _arrays(variables) -> list:
    return [[list(getattr(v.aval, "shape", ())), str(getattr(v.aval, "dtype", ""))] for v in variables]


def kernel_line(eqn):
    """The line of the kernel's `def` (its first decorator's, when decorated), from the kernel
    jaxpr's debug info ("name at path:line"), or None: two defs of one name in a module (one per
    arm of a static `if`) are told apart by it."""
    info = getattr(eqn.params.get("jaxpr"), "debug_info", None)
    line = (getattr(info, "func_src_info", None) or "").rpartition(":")[2]
    return int(line) if line.isdigit() else None


def traced_calls(jaxpr) -> list[dict]:
    """Every pallas_call of a traced entry: its kernel's name and def line and its operands' avals."""
    out: list[dict] = []
    seen: set[int] = set()

    def walk(j) -> None:
        if id(j) in seen:
            return
        seen.add(id(j))
        for eqn in j.eqns:
            if eqn.primitive.name == "pallas_call":
                gm = eqn.params.get("grid_mapping")
                out.append({"kernel": kernel_name(eqn), "line": kernel_line(eqn), "operands": _arrays(eqn.invars),
                            "results": _arrays(eqn.outvars), "num_scalar_prefetch": getattr(gm, "num_index_operands", 0)})
            for p in eqn.params.values():
                for sub in as_jaxprs(p):
                    walk(sub)

    walk(open_jaxpr(jaxpr))
    return out


def facts_job(mod, items: list, seed: int, emit: Callable[[dict], None]) -> None:
    """One ``"facts"`` record per example (or candidate list) of the job, on module ``mod``."""
    for i, item in enumerate(items):
        ex = try_candidates(mod, item, seed).example if isinstance(item, list) else item
        if ex is None:
            emit({"type": "facts", "index": i, "example": "", "error": "no candidate runs the original"})
            continue
        told = f"{ex.text} ({origin_phrase(ex.origin)})" if ex.origin else ex.text
        try:
            call = Call(ex, reference=resolve_entry(mod, ex.entry))
            calls = traced_calls(trace(call.bind(resolve_entry(mod, ex.entry)), call.shape_structs()))
        except Exception as e:  # the example does not fit the code: it shows nothing
            emit({"type": "facts", "index": i, "example": told, "error": summarize_exc(e)})
            continue
        emit({"type": "facts", "index": i, "example": told, "calls": calls})
