"""The kernel model: plain data passed between discovery, analysis, rules, codemods and front ends.

Nothing here imports jax or executes user code. Syntax nodes are LibCST nodes of the module the
model was built from; a model is only valid together with that module tree.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Optional

import libcst as cst


class Backend(str, enum.Enum):
    TPU = "tpu"
    MOSAIC_GPU = "mosaic_gpu"
    TRITON = "triton"
    UNKNOWN = "unknown"


class Origin(str, enum.Enum):
    """Where a slice start (or size) comes from, ordered from least to most troublesome."""

    STATIC = "static"  # Python value: literal, module constant, partial-bound keyword, shape
    PROGRAM_ID = "program_id"  # pl.program_id / pl.num_programs
    LOOP = "loop"  # induction variable of lax.fori_loop / pl.loop
    TRACED_CONST = "traced_const"  # jnp.int32(3) and friends
    TRACED = "traced"  # some other traced value (function argument, while_loop, ...)
    REF_LOAD = "ref_load"  # a value loaded from a ref (data-dependent)
    NON_INT_SCALAR = "non_int_scalar"  # float / bool / one-element array used as a start


# Larger wins when an expression combines several origins.
ORIGIN_RANK = {o: n for n, o in enumerate(Origin)}


@dataclass(frozen=True)
class Span:
    line: int  # 1-based
    column: int  # 0-based, as LibCST reports it
    end_line: int
    end_column: int


@dataclass(frozen=True)
class TextEdit:
    """One replacement in a file's text: the `length` code points from `offset` (`span`: from
    its start to its end, exclusive) become `text`."""

    span: Span
    offset: int
    length: int
    text: str


@dataclass(frozen=True)
class FixEdits:
    """A finding's own fix as edits of the text that was analysed, and what the fix does."""

    description: str
    edits: tuple[TextEdit, ...]


@dataclass
class LoopInfo:
    """A lax.fori_loop / pl.loop whose induction variable drives a slice."""

    kind: str  # "fori_loop" | "pl.loop"
    call: cst.Call  # the fori_loop call, or the pl.loop(...) decorator call
    body: cst.FunctionDef | cst.Lambda
    index_name: str
    lower: cst.BaseExpression
    upper: cst.BaseExpression
    step: Optional[cst.BaseExpression]
    carries: bool  # the body threads a value through the loop
    statement: Optional[cst.BaseStatement] = None  # the statement holding the loop (for removal)
    init: Optional[cst.BaseExpression] = None
    result_target: Optional[cst.BaseExpression] = None  # `acc = fori_loop(...)` -> acc


@dataclass
class Provenance:
    origin: Origin
    description: str  # human words: "loop index `i` of lax.fori_loop(0, n // bk, body)"
    loop: Optional[LoopInfo] = None
    program_id_axis: Optional[int] = None
    # For NON_INT_SCALAR: "one_element" | "float" | "bool"
    detail: Optional[str] = None


@dataclass
class IndexUse:
    """One dynamic index into a ref inside a kernel (or a helper it calls)."""

    ref_name: str  # as written at the access
    # The whole `ref[...]` / `ref.at[...]` node; for an integer-array index passed to an atomic
    # (`atomic_add(o_ref, idx, v)`, kind "int_array" only) the call, which no planner rewrites.
    subscript: cst.Subscript
    dim: int  # position of the dynamic element in the index tuple
    element: cst.BaseExpression  # the pl.ds(...) / index expression as written (may be a Name)
    start: Optional[cst.BaseExpression]  # resolved start expression
    size: Optional[cst.BaseExpression]  # resolved size expression (None for integer-array index)
    kind: str  # "ds" | "int_array" | "slice" | "scalar" (a traced integer index: a window of one element)
    provenance: Provenance
    size_provenance: Optional[Provenance]
    span: Span
    function: cst.FunctionDef  # the function the access sits in
    via_at: bool = False  # ref.at[...]
    stride: Optional[cst.BaseExpression] = None
    env: object = None  # provenance.Env of `function`: codemods reuse it to reason about names
    kernel_site: Optional["KernelSite"] = None
    starred: bool = False  # index tuple built with *unpacking: dims are not known statically
    after_ellipsis: bool = False  # starred because a `...` before it stands for dims only the rank counts
    positions: int = 0  # after_ellipsis: how many entries the index has, `...` among them


@dataclass
class KernelSite:
    """One pallas_call and the kernel it runs."""

    call: cst.Call  # pl.pallas_call(...) itself
    span: Span
    form: str  # "direct" | "stored" | "decorator"
    kernel_name: Optional[str]
    kernel: Optional[cst.FunctionDef]
    partial_kwargs: dict[str, cst.BaseExpression] = field(default_factory=dict)
    partial_args: list[cst.BaseExpression] = field(default_factory=list)
    # `**kernel_kwargs` in the partial, `kernel_kwargs` bound to a dict literal in each arm of the `if`
    # that picks the kernel: (the argument, the partial) to read once a variant's arm is known
    # (analysis.discovery.variants)
    partial_splats: list[tuple[cst.Arg, cst.Call]] = field(default_factory=list)
    kernel_expr: Optional[cst.BaseExpression] = None  # first positional argument as written
    keywords: dict[str, cst.Arg] = field(default_factory=dict)  # pallas_call keywords
    grid_spec: Optional[cst.Call] = None  # pl.GridSpec(...) / pltpu.PrefetchScalarGridSpec(...)
    grid_spec_keywords: dict[str, cst.Arg] = field(default_factory=dict)
    backend: Backend = Backend.UNKNOWN
    backend_reason: str = ""
    invocation: Optional[cst.Call] = None  # pallas_call(...)(args): the call that runs it
    invocation_issue: Optional[str] = None  # why the invocation is not the only one (a stored call run twice)
    enclosing: Optional[cst.FunctionDef] = None  # the wrapper function holding the call
    decorated: Optional[cst.FunctionDef] = None  # decorator form: the decorated kernel def
    factory: Optional[cst.Call] = None  # `make_kernel(tile)`: the call whose returned def is the kernel
    # `if transpose: def kernel(...) ... else: def kernel(...)`: every def of the kernel's name in
    # its scope, the kernel among them, when there are several (discovery makes one site for each)
    variants: tuple[cst.FunctionDef, ...] = ()
    # `call_kernel(kernel=_dq_kernel, ...)`: the call of the function holding the pallas_call that
    # passes the kernel in as a parameter (discovery makes one site for each kernel passed)
    passed_by: Optional[cst.Call] = None
    # `call_kernel(kernel=k, grid=(...), in_specs=specs)` into `pl.pallas_call(..., grid=grid, ...)`:
    # the pallas_call keywords whose value is a parameter the passing call supplies; `keywords`
    # then holds that call's argument, so the lift reads and edits it there (analysis.relays.passed_in)
    forwarded: tuple[str, ...] = ()
    # `launch(kernel=_fwd)` whose `launch` hands its parameter on to `make_call(kernel)`, which
    # holds the pallas_call: the outer calls the kernel came through, outermost first (`passed_by`
    # is the innermost); such a kernel is analysed, its fixes refused (kernel_entry)
    relayed_by: tuple[cst.Call, ...] = ()
    # why the chain cannot hand each kernel its own grid and specs (analysis.relays.relay_chain)
    relay_issue: str = ""
    # `def _call(kernel, args): return pl.pallas_call(kernel, grid=...)(*args)`, called with kernels
    # whose windows differ: the spec keywords (among `forwarded`, absent from `keywords`) that the
    # lift threads through the helper as parameters defaulting to `pl.no_block_spec`, so each call
    # passes its own (rewrite.callsite.spec_params)
    thread: tuple[str, ...] = ()
    # `kwargs["compiler_params"] = ...` under `if config.backend == "triton":` before
    # `pl.pallas_call(kernel, **kwargs)`: (keyword, value, the `if` tests) of settings made only on
    # some runs (analysis.relays.splat_dict); a test discovery reads as true makes it a keyword
    conditional_settings: tuple[tuple[str, cst.BaseExpression, tuple[cst.BaseExpression, ...]], ...] = ()
    # `def run(x, kernel=_plain, fast=False): if fast: kernel = _fast`: the assignment that names the
    # kernel, which not every run makes (the caller's kernel reaches the same pallas_call otherwise)
    maybe_argument: Optional[cst.BaseExpression] = None
    # `plgpu.kernel` / `pl.kernel` as written, where that (not pallas_call) runs the kernel: a grid
    # or mesh without BlockSpecs, so the kernel is analysed and its fixes refused
    entry: Optional[str] = None
    # `lambda *refs: _kernel(*refs, capacity=capacity)`: a lambda that forwards every ref to the
    # kernel, its keywords read as partial keywords (written in the pallas_call, it lifts like one;
    # analysis.discovery.kernel_entry refuses the others)
    forwarder: Optional[cst.Lambda] = None
    # ref -> the rank every access of it in the kernel spells (rewrite.callsite.ranks): the kernel's
    # tree never changes, and each plan of a site asks again (not an init field: a site copied for
    # another kernel by dataclasses.replace starts empty)
    kernel_ranks: dict[str, Optional[int]] = field(default_factory=dict, init=False, compare=False, repr=False)

    def kw(self, name: str) -> Optional[cst.BaseExpression]:
        """A pallas_call setting, looked up on the call first, then on its grid_spec."""
        if name in self.keywords:
            return self.keywords[name].value
        if name in self.grid_spec_keywords:
            return self.grid_spec_keywords[name].value
        return None


class FixSafety(str, enum.Enum):
    SAFE = "safe"
    UNSAFE = "unsafe"


@dataclass
class Finding:
    code: str
    message: str
    path: str
    span: Span
    provenance: str  # words
    origin: str
    fixable: bool
    fix_safety: Optional[FixSafety] = None
    refusal: Optional[str] = None  # why no fix is offered, when it is not
    severity: str = "warning"  # "error" | "warning" | "info"
    fix_id: Optional[str] = None  # which codemod fixes it
    kernel: Optional[str] = None
    # Fixed only once another fix has been applied: what that fix does (`fix_id` and
    # `fix_safety` are those of the fix that then fixes it).
    fix_after: Optional[str] = None
    # Its own fix as edits of the analysed text, when a front end asked for them (SARIF).
    fix_edits: Optional[FixEdits] = field(default=None, compare=False, repr=False)
    # What a fix plan is attached to (core.plans.use_key / site_key), and the plan the engine
    # attached: the finding carries its own fix, so every front end applies the same one.
    anchor: Optional[tuple[int, int]] = field(default=None, compare=False, repr=False)
    plan: Optional[object] = field(default=None, compare=False, repr=False)  # core.plans.FixPlan

    def __getstate__(self) -> dict:
        # A plan closes over the analysed tree: it means something only in the process that made
        # it, so findings sent to another process (`--workers`) travel without it.
        return {**self.__dict__, "plan": None}

    def to_json(self) -> dict:
        return {
            "path": self.path,
            "line": self.span.line,
            "column": self.span.column + 1,
            "end_line": self.span.end_line,
            "end_column": self.span.end_column + 1,
            "code": self.code,
            "message": self.message,
            "severity": self.severity,
            "provenance": self.provenance,
            "origin": self.origin,
            "kernel": self.kernel,
            "fix": {
                "available": self.fixable,
                "safety": self.fix_safety.value if self.fix_safety else None,
                "codemod": self.fix_id,
                "refusal": self.refusal,
                "after": self.fix_after,
            },
        }
