"""The values the effects model (analysis.effects.model) computes with, and the writes it records.

An `AbsVal` says, of one Python value inside a kernel, only what matters for ref writes: which
refs it is (or contains, for a tuple of refs or `*refs`), which functions it may be (with the
scope they close over and the arguments `functools.partial` bound), which library names it
stands for, and which refs a DMA descriptor will write when it is started. Everything else
(arrays, ints, shapes) is `NOTHING`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import libcst as cst


@dataclass(frozen=True)
class Root:
    """The ref a value aliases: a kernel parameter, by name; `view` is the first `name.at[...]`
    taken of it on the way (the window the value covers, when a planner needs it)."""

    name: str
    view: Optional[cst.Subscript] = None


@dataclass(frozen=True, eq=False)
class Fn:
    """A function value: its def or lambda, the frame it closes over, and partial-bound arguments."""

    node: cst.FunctionDef | cst.Lambda
    frame: "Frame"
    bound: tuple["AbsVal", ...] = ()
    bound_kw: tuple[tuple[str, "AbsVal"], ...] = ()


@dataclass(frozen=True)
class AbsVal:
    refs: frozenset[Root] = frozenset()  # the value is one of these refs
    lists: frozenset[Root] = frozenset()  # the value holds these refs (a tuple, `*refs`)
    fns: frozenset[Fn] = frozenset()
    quals: frozenset[str] = frozenset()  # library names (`jax.experimental.pallas.tpu.store`)
    pending: frozenset[Root] = frozenset()  # a DMA descriptor writes these on .start() / .wait()
    runs: bool = False  # `pl.when(c)`, `pl.loop(...)`: applied to a function, runs it

    def __or__(self, other: "AbsVal") -> "AbsVal":
        return AbsVal(
            self.refs | other.refs, self.lists | other.lists, self.fns | other.fns, self.quals | other.quals,
            self.pending | other.pending, self.runs or other.runs,
        )

    @property
    def every_ref(self) -> frozenset[Root]:
        return self.refs | self.lists | self.pending

    def elements(self) -> "AbsVal":
        """What indexing or iterating the value gives: a ref of a tuple of refs; a load of a ref
        is an array, which is nothing here."""
        return AbsVal(lists=frozenset(), refs=self.lists, fns=self.fns)

    def container(self) -> "AbsVal":
        """The value as an element of a tuple, list or dict."""
        return AbsVal(lists=self.refs | self.lists, fns=self.fns, pending=self.pending)

    def anything(self) -> "AbsVal":
        """What code the model cannot see may make of the value: any of its refs, as a ref or
        inside a container, and any of its functions."""
        every = self.every_ref
        return AbsVal(refs=every, lists=every, fns=self.fns)


NOTHING = AbsVal()


def union(values) -> AbsVal:
    out = NOTHING
    for v in values:
        out = out | v
    return out


@dataclass(frozen=True)
class Write:
    """One ref write a piece of kernel code performs, directly or through calls.

    `how`: "assign" / "augassign" (`ref[...] = v`, `ref[...] += v`), "store", "atomic", "copy"
    (a DMA or copy into it), "semaphore", or "unknown" (handed to a call pallas-fix cannot see
    into, which may write it). `node` is what writes (the subscript target, or the call);
    `path` the calls from the code asked about down to it (empty: written right there)."""

    ref: str
    how: str
    node: cst.CSTNode
    path: tuple[cst.CSTNode, ...] = ()
    view: Optional[cst.Subscript] = None
    callee: Optional[cst.CSTNode] = None  # "unknown": the function as written

    @property
    def entry(self) -> cst.CSTNode:
        """The node in the code asked about that leads to the write (a call, or the write itself)."""
        return self.path[0] if self.path else self.node

    @property
    def opaque(self) -> bool:
        return self.how == "unknown"


@dataclass(eq=False)
class Frame:
    """One running function (or the module): what its parameters are, and its lexical parent."""

    scope: cst.CSTNode
    params: dict[str, AbsVal]
    parent: Optional["Frame"]
    values: dict[str, AbsVal] = field(default_factory=dict)  # names, once evaluated
    busy: set[str] = field(default_factory=set)
    calls: dict[int, AbsVal] = field(default_factory=dict)  # id(call) -> its value (evaluated quietly)
