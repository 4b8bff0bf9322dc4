"""Rule codes. Each rule's docstring is its documentation (`pallas-fix explain CODE`).

A dynamic index gets exactly one PF1xx code: the rules are tried in `ORDER` and the first that
claims the index wins, so a one-element start inside a fori_loop is PF107 (the GPU interpret mode
error) rather than PF101.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Callable, Optional

from pallas_fix.core.model import IndexUse, Origin
from pallas_fix.analysis.windows import Window


@dataclass(frozen=True)
class Rule:
    code: str
    name: str
    severity: str
    check: Callable[[IndexUse, Window], Optional[str]]  # message or None

    @property
    def doc(self) -> str:
        return inspect.cleandoc(self.check.__doc__ or "")

    @property
    def summary(self) -> str:
        return self.doc.splitlines()[0] if self.doc else self.name


RULES: dict[str, Rule] = {}
ORDER: list[str] = []


def rule(code: str, name: str, severity: str = "warning", ordered: bool = True):
    def register(fn):
        RULES[code] = Rule(code, name, severity, fn)
        if ordered:
            ORDER.append(code)
        return fn

    return register


def _start(use: IndexUse) -> str:
    env = use.env
    if use.start is None:
        return "index"
    return f"`{env.ctx.code(use.start)}`"  # type: ignore[attr-defined]


@rule("PF107", "non-integer-start", severity="error")
def non_integer_start(use: IndexUse, window: Window) -> Optional[str]:
    """A slice start that is not an integer scalar: a one-element slice, a float or a bool.

    What it detects: `pl.ds(start, size)` (or a plain index) whose start is a value of shape (1,)
    loaded with `idx_ref[pl.ds(k, 1)]`, a floating-point value (`i.astype(jnp.float32) * 16`,
    `i / 2`) or a boolean (`i > 3`).

    Why it matters: these are the starts that GPU interpret mode rejects with "Dynamic indexing
    not supported in GPU interpret mode" (integer scalar starts pass that check), that the HLO
    interpreter rejects at lowering for shape-(1,) starts, and that TPU lowering rejects as
    "Advanced indexers". Float starts are silently truncated.

    Example:
        st = idx_ref[pl.ds(k, 1)]          # shape (1,)
        o_ref[...] = x_ref[pl.ds(st, 8)]   # PF107

    Fix (safe): load a scalar instead, `st = idx_ref[k]`, or cast the start with
    `.astype(jnp.int32)` / `jnp.int32(...)`.
    """
    prov = use.provenance
    if prov.origin is not Origin.NON_INT_SCALAR:
        return None
    what = {"one_element": "a one-element array (shape (1,))", "float": "a float", "bool": "a bool"}.get(
        prov.detail or "", "not an integer scalar"
    )
    return f"start {_start(use)} of `{use.ref_name}` is {what}; GPU interpret mode rejects it"


@rule("PF106", "non-block-window")
def non_block_window(use: IndexUse, window: Window) -> Optional[str]:
    """A dynamic window that no BlockSpec can express: dynamic size, overlap, stride or misalignment.

    What it detects: `pl.ds(start, size)` with a traced size, a stride other than 1, or a start
    that is not an integer multiple of the size (`pl.ds(i * 8, 16)` overlapping windows,
    `pl.ds(i + 1, bs)`, `pl.ds(i * bs + 3, bs)`); Python slices with traced bounds.

    Why it matters: a BlockSpec index_map returns block indices, so element offsets must be
    multiples of the block size. Dynamic sizes fail at trace time in every Pallas mode.

    Example:
        halo = x_ref[pl.ds(i * 128, 256), :]   # PF106: windows overlap

    Fix: none automatic. Restructure so each step reads whole blocks (e.g. two BlockSpecs for the
    block and its neighbour, or `pl.Element` block dims on TPU), or keep the manual slice.
    """
    if use.kind == "slice":
        return f"`{use.ref_name}` is sliced with traced Python slice bounds, which are not a block window"
    if window.not_block:
        return f"dynamic window on `{use.ref_name}` is not a block: {window.reason}"
    return None


@rule("PF108", "traced-integer-array-index")
def integer_array_index(use: IndexUse, window: Window) -> Optional[str]:
    """An integer-array index built from traced values (a gather/scatter on a ref).

    What it detects: `x_ref[i * bs + jnp.arange(bs)]`, `x_ref.at[idx]` where `idx` is a traced array.

    Why it matters: only the HLO interpreter runs these; TPU lowering rejects "Advanced indexers"
    and GPU interpret mode fails at run time. When the indices are contiguous, a `pl.ds` window
    (or a BlockSpec) says the same thing and pipelines.

    Example:
        o_ref[...] = x_ref[i * 8 + jnp.arange(8)]   # PF108

    Fix: none automatic; for contiguous indices use `x_ref[pl.ds(i * 8, 8)]`.
    """
    if use.kind != "int_array":
        return None
    return f"`{use.ref_name}` is indexed with a traced integer array {_start(use)}"


@rule("PF105", "data-dependent-start")
def data_dependent_start(use: IndexUse, window: Window) -> Optional[str]:
    """A slice start loaded from a ref: the window depends on data.

    What it detects: `start = idx_ref[b]; x_ref[pl.ds(start, bs)]`, block tables in paged
    attention, scalar-prefetch indices used inside the kernel.

    Why it matters: the window cannot be known before the kernel runs, so Pallas cannot pipeline
    it from a static index_map; the whole array stays resident in on-chip memory.

    Example:
        page = block_table_ref[b, j]
        k = k_ref[pl.ds(page * page_size, page_size), :]   # PF105

    Fix: none automatic. On TPU, move the index into scalar prefetch
    (`pltpu.PrefetchScalarGridSpec(num_scalar_prefetch=1, ...)`) and read it in the index_map.
    """
    if use.provenance.origin is not Origin.REF_LOAD:
        return None
    return f"start {_start(use)} of `{use.ref_name}` is data-dependent ({use.provenance.description})"


@rule("PF101", "independent-loop-slice")
def independent_loop(use: IndexUse, window: Window) -> Optional[str]:
    """A slice driven by the index of a loop whose iterations are independent.

    What it detects: `lax.fori_loop` / `jax.lax.fori_loop` / `@pl.loop` bodies that slice refs
    with `pl.ds(i * bs, bs)` (or `pl.multiple_of(i * bs, bs)`, `(i + c) * bs`, ...) and carry no
    value between iterations.

    Why it matters: the kernel keeps the whole array resident in on-chip memory and walks it by
    hand; Pallas cannot double-buffer the blocks. A grid axis with a BlockSpec index_map lets
    Pallas pipeline the copies and, on TPU, split the axis across cores.

    Example:
        def body(i, _):
            o_ref[pl.ds(i * bs, bs), :] = jnp.tanh(x_ref[pl.ds(i * bs, bs), :])
        lax.fori_loop(0, n // bs, body, None)

    Fix (safe, when every precondition holds): remove the loop, access whole blocks
    (`x_ref[...]`), add a grid axis of the trip count and BlockSpecs
    `pl.BlockSpec((bs, d), lambda ..., i: (i, 0))` at the pallas_call.
    """
    if use.provenance.origin is not Origin.LOOP or use.provenance.loop is None:
        return None
    if use.provenance.loop.carries:
        return None
    return f"`{use.ref_name}` is sliced by a loop index with start {_start(use)}; the loop can become a grid axis"


@rule("PF102", "reduction-loop-slice")
def reduction_loop(use: IndexUse, window: Window) -> Optional[str]:
    """A slice driven by the index of a loop that carries a value (a reduction).

    What it detects: the K loop of a matmul, the KV loop of an attention kernel, row statistics:
    a fori_loop whose body slices refs with its index and returns an updated carry.

    Why it matters: as PF101, the inputs stay resident and unpipelined. The idiomatic form is a
    sequential ("arbitrary") innermost grid axis with the carry in scratch memory, initialised
    under `pl.when(k == 0)` and finalised under `pl.when(k == nk - 1)`.

    Example:
        acc = lax.fori_loop(0, K // bk, lambda k, acc: acc + jnp.dot(
            x_ref[:, pl.ds(k * bk, bk)], y_ref[pl.ds(k * bk, bk), :]), acc0)

    Fix (unsafe on TPU / Mosaic GPU, when every precondition holds; never on Triton, whose grid
    axes run in parallel): lift into a sequential grid axis with scratch carries.
    """
    if use.provenance.origin is not Origin.LOOP or use.provenance.loop is None:
        return None
    if not use.provenance.loop.carries:
        return None
    return f"`{use.ref_name}` is sliced by the index of a reduction loop with start {_start(use)}"


@rule("PF103", "program-id-slice")
def program_id_slice(use: IndexUse, window: Window) -> Optional[str]:
    """A slice whose start comes from `pl.program_id`.

    What it detects: `x_ref[pl.ds(pl.program_id(0) * bs, bs)]` (also through a variable or
    `pl.multiple_of`) on a ref whose BlockSpec is the whole array.

    Why it matters: the grid already iterates, but the ref is brought in whole; the block for
    each step could be selected by the BlockSpec's index_map and pipelined. GPU interpret mode
    computes `pl.program_id` as 0 (see PF201).

    Example:
        pid = pl.program_id(0)
        o_ref[pl.ds(pid * 128, 128)] = x_ref[pl.ds(pid * 128, 128)] + 1

    Fix (safe, when the ref's block is the whole array and the window is a block): move the
    slice into `pl.BlockSpec((128,), lambda i: (i,))` and access `x_ref[...]`.
    """
    if use.provenance.origin is not Origin.PROGRAM_ID:
        return None
    return f"`{use.ref_name}` is sliced by `pl.program_id` with start {_start(use)}; a BlockSpec index_map can select the block"


@rule("PF104", "traced-constant-start")
def traced_constant(use: IndexUse, window: Window) -> Optional[str]:
    """A start computed from a traced constant such as `jnp.int32(3)`.

    What it detects: `pl.ds(jnp.int32(3) * bs, bs)`, `jnp.array(2) * bs` — values fixed when the
    kernel is written but wrapped in a jax constructor, which makes them traced.

    Why it matters: the slice is static in fact but dynamic in the jaxpr, so Pallas treats it as
    a dynamic slice (no static bounds checks, dynamic-offset loads).

    Example:
        o_ref[...] = x_ref[pl.ds(jnp.int32(3) * 128, 128)]

    Fix (safe): use the Python int, `pl.ds(3 * 128, 128)`.
    """
    if use.provenance.origin is not Origin.TRACED_CONST:
        return None
    return f"start {_start(use)} of `{use.ref_name}` is a traced constant; a Python int keeps the slice static"


@rule("PF109", "traced-start")
def traced_start(use: IndexUse, window: Window) -> Optional[str]:
    """A start that is traced but whose origin pallas-fix cannot name.

    What it detects: starts from a `lax.while_loop` carry, a fori_loop carry, a parameter of a
    function pallas-fix could not follow, or any other traced value.

    Why it matters: as PF101/PF105, a dynamic window keeps the ref resident and unpipelined.

    Example:
        def body(carry):
            off, acc = carry
            return off + 8, acc + x_ref[pl.ds(off, 8)]

    Fix: none automatic; rewrite the loop as a fori_loop over block indices first.
    """
    return f"start {_start(use)} of `{use.ref_name}` is traced ({use.provenance.description})"


# -- PF2xx: GPU interpret mode hazards ---------------------------------------------------------------
# Kernel-level rules: pallas_fix/kernel_rules.py produces their findings (a whole kernel, a call site
# or a BlockSpec is at fault, not one index), so the checks here claim no index. They fire when the
# module uses `plgpu.InterpretGPUParams` / `force_gpu_interpret_mode`, or under
# `--target gpu-interpret`. pallas_fix/gpu_interpret.py keeps the jax versions each was seen on.


@rule("PF201", "gpu-interpret-program-id", severity="error", ordered=False)
def gpu_interpret_program_id(use: IndexUse, window: Window) -> Optional[str]:
    """`pl.program_id` in a grid with more than one step, run in GPU interpret mode: silently wrong.

    What it detects: a call to `pl.program_id(axis)` in a kernel (or a helper it calls) whose
    pallas_call has a grid axis `axis` of more than one step (or of a size pallas-fix cannot read),
    in a module that runs in GPU interpret mode (`interpret=plgpu.InterpretGPUParams()`,
    `plgpu.force_gpu_interpret_mode()`) or under `--target gpu-interpret`.

    Why it matters: GPU interpret mode runs every grid step with `pl.program_id` equal to 0. A
    kernel that picks its block with `pl.program_id` computes block 0 over and over; the rest of
    the output is never written (NaN) and nothing raises. Observed on jax 0.10.2 and 0.12.0.1
    (CPU); `pl.num_programs` is correct there.

    Example:
        def kernel(x_ref, o_ref):
            i = pl.program_id(0)                              # PF201: always 0
            o_ref[pl.ds(i * 16, 16)] = x_ref[pl.ds(i * 16, 16)] + 1
        pl.pallas_call(kernel, out_shape=..., grid=(4,), interpret=plgpu.InterpretGPUParams())(x)

    What to do: check this kernel with `interpret=True` (or TPU interpret mode) instead, or make
    the grid an in-kernel loop. Fix (safe, `--target gpu-interpret` only, when every ref is a
    whole-array block): `grid-to-loop` wraps the kernel body in
    `def _step(pid, carry): ...; return carry` + `lax.fori_loop(0, n, _step, None)`, replaces
    `pl.program_id(0)` by the loop index and removes the grid.
    """
    return None


@rule("PF202", "gpu-interpret-blockspec", ordered=False)
def gpu_interpret_blockspec(use: IndexUse, window: Window) -> Optional[str]:
    """A BlockSpec whose window is not the whole array, run in GPU interpret mode: AssertionError.

    What it detects: a `pl.BlockSpec(block_shape, index_map)` in `in_specs` / `out_specs` whose
    index_map returns anything but literal zeros, or whose block shape pallas-fix cannot prove is
    the whole array, in a module that runs in GPU interpret mode or under `--target gpu-interpret`.

    Why it matters: GPU interpret mode only accepts whole-array blocks (`has_trivial_window()`:
    block shape equal to the array shape, index_map returning the literal 0s). Anything else
    fails with a bare `AssertionError` from `mosaic_gpu/interpret/interpret_pallas_call.py`, even
    with grid=(1,). Observed on jax 0.10.2 and 0.12.0.1 (CPU).

    Example:
        in_specs=[pl.BlockSpec((16,), lambda i: (i,))]   # PF202

    What to do: verify BlockSpec kernels with `interpret=True` or TPU interpret mode. To run in
    GPU interpret mode, drop the BlockSpecs (whole-array refs) and walk the blocks in the kernel
    (a loop over `pl.ds(i * bs, bs)`); pallas-fix never lifts loops into BlockSpecs under
    `--target gpu-interpret`. No automatic fix.
    """
    return None


@rule("PF203", "gpu-interpret-tpu-memory-space", ordered=False)
def gpu_interpret_memory_space(use: IndexUse, window: Window) -> Optional[str]:
    """A TPU memory space (VMEM / SMEM scratch, `pl.ANY`), run in GPU interpret mode: KeyError.

    What it detects: `pltpu.VMEM(...)` / `pltpu.SMEM(...)` in `scratch_shapes` or in
    `pl.run_scoped(...)`, and `memory_space=pltpu.VMEM / pltpu.SMEM / pl.ANY` in a
    BlockSpec, in a module that runs in GPU interpret mode or under `--target gpu-interpret`.

    Why it matters: GPU interpret mode knows the Mosaic GPU memory spaces only. Observed on jax
    0.10.2 and 0.12.0.1 (CPU): `KeyError: VMEM` / `KeyError: SMEM` for scratch shapes,
    `NotImplementedError: Unsupported memory space: vmem` for run_scoped, `KeyError:
    <MemorySpace.ANY>` for `memory_space=pl.ANY`.

    Example:
        scratch_shapes=[pltpu.VMEM((128, 128), jnp.float32)]   # PF203

    What to do: a TPU kernel belongs in `interpret=True` or `pltpu.InterpretParams()`. A kernel
    meant for Mosaic GPU takes `plgpu.SMEM(shape, dtype)` scratch (runs in GPU and HLO interpret
    mode) and `plgpu.GMEM` / `plgpu.SMEM` memory spaces. No automatic fix: the memory space
    decides where the kernel can run.
    """
    return None


@rule("PF204", "gpu-interpret-integer-array-index", ordered=False)
def gpu_interpret_int_array(use: IndexUse, window: Window) -> Optional[str]:
    """An integer-array index into a ref, run in GPU interpret mode: TypeError at run time.

    What it detects: `x_ref[idx]` where `idx` is an integer array (`i * 8 + jnp.arange(8)`,
    a loaded index vector), in a module that runs in GPU interpret mode or under
    `--target gpu-interpret`. Also reported as PF108 when the indices are traced.

    Why it matters: GPU interpret mode converts each index to a Python scalar and fails with
    "TypeError: Only scalar arrays can be converted to Python scalars" inside an io_callback,
    even for a constant `jnp.arange`. Observed on jax 0.10.2 and 0.12.0.1 (CPU). The HLO
    interpreter (`interpret=True`) runs these gathers.

    Example:
        o_ref[...] = x_ref[i * 8 + jnp.arange(8)]   # PF204

    What to do: for contiguous indices read a window, `x_ref[pl.ds(i * 8, 8)]` (integer scalar
    starts run in GPU interpret mode); for a true gather, load the whole ref and index the value
    (`x_ref[...][idx]`), or check the kernel with `interpret=True`. No automatic fix.
    """
    return None


@rule("PF205", "gpu-interpret-scalar-prefetch", ordered=False)
def gpu_interpret_scalar_prefetch(use: IndexUse, window: Window) -> Optional[str]:
    """Scalar prefetch, run in GPU interpret mode: NotImplementedError.

    What it detects: `pltpu.PrefetchScalarGridSpec(num_scalar_prefetch=n)` with n > 0 (or a
    count pallas-fix cannot read), in a module that runs in GPU interpret mode or under
    `--target gpu-interpret`.

    Why it matters: GPU interpret mode rejects scalar arguments: "NotImplementedError: Scalar
    arguments not (yet) supported on GPU", with or without BlockSpecs. Observed on jax 0.10.2
    and 0.12.0.1 (CPU).

    Example:
        grid_spec=pltpu.PrefetchScalarGridSpec(num_scalar_prefetch=1, grid=(n,), ...)   # PF205

    What to do: scalar prefetch is a TPU feature; check the kernel with `interpret=True` or
    `pltpu.InterpretParams()`. For GPU interpret mode pass the indices as an ordinary input and
    read them with scalar loads in the kernel (`idx_ref[k]`). No automatic fix.
    """
    return None


@rule("PF206", "gpu-interpret-vmap", ordered=False)
def gpu_interpret_vmap(use: IndexUse, window: Window) -> Optional[str]:
    """`jax.vmap` over a pallas_call, run in GPU interpret mode: TypeError.

    What it detects: `jax.vmap(f)` (call or decorator) where `f` is a pallas_call, or a function
    of this module that makes one (directly or through the functions it calls), in a module that
    runs in GPU interpret mode or under `--target gpu-interpret`.

    Why it matters: the pallas_call batching rule fails under GPU interpret mode with
    "TypeError: _pallas_call_batching_rule() got an unexpected keyword argument
    'kernel_arg_transforms'". Observed on jax 0.10.2 and 0.12.0.1 (CPU).

    Example:
        jax.vmap(pl.pallas_call(kernel, out_shape=..., interpret=plgpu.InterpretGPUParams()))(xs)

    What to do: check the batched kernel with `interpret=True`, or in GPU interpret mode add the
    batch as a dimension of the refs (a loop over it in the kernel) or loop over the batch
    outside the pallas_call (`for b in range(B)` / `lax.map`). No automatic fix.
    """
    return None


def classify(use: IndexUse, window: Window) -> tuple[Rule, str]:
    for code in ORDER:
        r = RULES[code]
        msg = r.check(use, window)
        if msg is not None:
            return r, msg
    raise AssertionError("PF109 claims every index")


def describe(code: str) -> str:
    r = RULES.get(code.upper())
    if r is None:
        raise KeyError(code)
    return f"{r.code} ({r.name}, {r.severity})\n\n{r.doc}\n"
