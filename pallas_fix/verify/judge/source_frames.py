"""The user's source lines behind a jaxpr equation (for the oracle's DynamicAccess locations).

Imports jax lazily (``source_info_util``), on first use.
"""

from __future__ import annotations

import functools

_MAX_STACK = 16


@functools.lru_cache(maxsize=None)
def _siu():
    from jax._src import source_info_util

    return source_info_util


# A frame is (file, line, column, end_line).  Sub-jaxprs (loop bodies, cond
# branches, run_scoped bodies, the kernel itself) are traced under a
# TracebackScope, so an equation's own traceback stops at the boundary of the
# trace that created it: the user's line calling e.g. ``pltpu.sync_copy`` is only
# in the traceback of the enclosing ``run_scoped`` equation.  Like JAX's MLIR
# lowering (``eqn.traceback + outer_traceback``), we append the enclosing
# equations' user frames to get the full user stack.
Frame = tuple  # (file, line, column, end_line)


def _own_frames(source_info) -> list[Frame]:
    siu = _siu()
    tb = getattr(source_info, "traceback", source_info)
    if tb is None:
        return []
    try:
        it = siu.user_frames(tb)
    except TypeError:  # an API taking the SourceInfo itself
        try:
            it = siu.user_frames(source_info)
        except Exception:
            return []
    except Exception:
        return []
    out: list[Frame] = []
    try:
        for f in it:
            out.append((f.file_name, _frame_line(f), getattr(f, "start_column", None),
                        getattr(f, "end_line", None)))
            if len(out) >= _MAX_STACK:
                break
    except Exception:
        pass
    return out


def _frame_line(f) -> int | None:
    ln = getattr(f, "start_line", None)
    if ln is None:
        ln = getattr(f, "line_num", None)
    return ln


def user_stack(eqn, outer: tuple[Frame, ...]) -> tuple[Frame, ...]:
    """The equation's user frames (innermost first), then those of the enclosing equations."""
    return (tuple(_own_frames(eqn.source_info)) + outer)[:_MAX_STACK]
