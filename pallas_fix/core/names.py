"""Resolve import aliases to the dotted names pallas-fix recognises.

A hand-rolled import table instead of LibCST's QualifiedNameProvider: the provider resolves scopes
for every node of the module, which costs more than the parse itself, while kernels only need the
handful of names bound by `import` statements (`pl`, `pltpu`, `lax`, `jnp`, `functools`, ...).
"""

from __future__ import annotations

from typing import Iterable, Optional

import libcst as cst

PALLAS = "jax.experimental.pallas"
TPU = PALLAS + ".tpu"
MOSAIC_GPU = PALLAS + ".mosaic_gpu"
TRITON = PALLAS + ".triton"


def _alts(*names: str) -> frozenset[str]:
    return frozenset(names)


PALLAS_CALL = _alts(PALLAS + ".pallas_call", "jax._src.pallas.pallas_call.pallas_call")
# Kernel entries with a grid (or a mesh) but no BlockSpecs: `pl.kernel(body, out_shape=..., mesh=...)`,
# `plgpu.kernel(body, out_type=..., grid=..., grid_names=...)`. Their kernels are analysed, not rewritten.
KERNEL_ENTRY = _alts(PALLAS + ".kernel", MOSAIC_GPU + ".kernel")
AXIS_INDEX = _alts("jax.lax.axis_index")
DS = _alts(PALLAS + ".ds", PALLAS + ".dslice", "jax.ds", "jax._src.state.indexing.ds")
SLICE = _alts(PALLAS + ".Slice", "jax._src.state.indexing.Slice")
FORI_LOOP = _alts("jax.lax.fori_loop", "jax._src.lax.control_flow.loops.fori_loop")
COND = _alts("jax.lax.cond")
SWITCH = _alts("jax.lax.switch")
PL_LOOP = _alts(PALLAS + ".loop")
PL_WHEN = _alts(PALLAS + ".when")
PROGRAM_ID = _alts(PALLAS + ".program_id")
NUM_PROGRAMS = _alts(PALLAS + ".num_programs")
MULTIPLE_OF = _alts(PALLAS + ".multiple_of")
# Compiler hints whose value is their first argument (`pltriton.max_contiguous(x, n)`, `pl.multiple_of(x, n)`).
VALUE_HINTS = MULTIPLE_OF | _alts(TRITON + ".max_contiguous", PALLAS + ".max_contiguous")
BLOCK_SPEC = _alts(PALLAS + ".BlockSpec")
# `BlockSpec()` with nothing set: the whole array, as an absent spec is.
NO_BLOCK_SPEC = _alts(PALLAS + ".no_block_spec", "jax._src.pallas.core.no_block_spec")
GRID_SPEC = _alts(PALLAS + ".GridSpec", TPU + ".PrefetchScalarGridSpec")
PREFETCH_GRID_SPEC = _alts(TPU + ".PrefetchScalarGridSpec")
PARTIAL = _alts("functools.partial")
TPU_PARAMS = _alts(TPU + ".CompilerParams", TPU + ".TPUCompilerParams", PALLAS + ".tpu.CompilerParams")
MOSAIC_GPU_PARAMS = _alts(MOSAIC_GPU + ".CompilerParams", MOSAIC_GPU + ".GPUCompilerParams")
TRITON_PARAMS = _alts(TRITON + ".CompilerParams", TRITON + ".TritonCompilerParams")
ARANGE = _alts("jax.numpy.arange", "jax.lax.iota", "jax.lax.broadcasted_iota")
RAVEL = _alts("jax.numpy.ravel")
RESHAPE = _alts("jax.numpy.reshape")
INT_DTYPES = frozenset(
    "jax.numpy." + t for t in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
)
# Integer quotient and remainder: `b = lax.div(pid, H)` is index arithmetic, as `pid // H` is.
INDEX_FOLDS = frozenset({"jax.lax.div", "jax.lax.rem", "jax.numpy.floor_divide", "jax.numpy.remainder", "jax.numpy.mod"})
FLOAT_DTYPES = frozenset(
    "jax.numpy." + t for t in ("float16", "bfloat16", "float32", "float64")
)
# Contractions: an argument of one is an array with dims, never a table entry read as a scalar.
CONTRACTIONS = _alts("jax.numpy.dot", "jax.numpy.matmul", "jax.numpy.einsum", "jax.lax.dot", "jax.lax.dot_general")
ARRAY_CTORS = _alts("jax.numpy.array", "jax.numpy.asarray")
BOOL_DTYPES = _alts("jax.numpy.bool_", "jax.numpy.bool")
# Copy primitives whose ref arguments index memory (detection looks inside their arguments anyway;
# the names let the detector tell "copy" from "load" in messages).
COPIES = frozenset(
    {
        TPU + ".sync_copy",
        TPU + ".async_copy",
        TPU + ".make_async_copy",
        TPU + ".make_async_remote_copy",
        MOSAIC_GPU + ".copy_gmem_to_smem",
        MOSAIC_GPU + ".copy_smem_to_gmem",
        MOSAIC_GPU + ".load",
        TRITON + ".load",
        TRITON + ".store",
        PALLAS + ".load",
        PALLAS + ".store",
    }
)
# Loads that take the ref (or a view of it, `ref.at[idx]`) as their first argument and return
# what `ref[idx]` would: `pltriton.load(ref.at[pl.ds(i, 1)], mask=m)`, `pltpu.load(ref.at[i])`.
LOADS = _alts(TRITON + ".load", TPU + ".load", MOSAIC_GPU + ".load", "jax._src.pallas.primitives.load")
# Atomics that index their ref by an argument, `atomic_add(x_ref_or_view, idx, val, mask=...)`:
# `idx` indexes the ref as a subscript would (Triton's, and the older `pl.` spellings).
INDEXED_ATOMICS = frozenset(
    f"{p}.atomic_{op}" for p in (TRITON, PALLAS) for op in ("add", "and", "max", "min", "or", "xchg", "xor")
)
VMEM = _alts(TPU + ".VMEM")
SMEM_TPU = _alts(TPU + ".SMEM")
SMEM_GPU = _alts(MOSAIC_GPU + ".SMEM")
# Words a module holds wherever it may run its kernels in GPU interpret mode (the names below
# and their private spellings): the rules for that mode look at the whole module.
GPU_INTERPRET_WORDS = ("InterpretGPUParams", "gpu_interpret_mode")
INTERPRET_GPU = _alts(MOSAIC_GPU + ".InterpretGPUParams")
FORCE_GPU_INTERPRET = _alts(MOSAIC_GPU + ".force_gpu_interpret_mode", PALLAS + ".force_gpu_interpret_mode")
VMAP = _alts("jax.vmap")


def dotted(node: cst.BaseExpression) -> Optional[str]:
    """`a.b.c` as written, or None when the expression is not a plain dotted name."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        base = dotted(node.value)
        return None if base is None else f"{base}.{node.attr.value}"
    return None


def _module_name(node: cst.BaseExpression) -> str:
    return dotted(node) or ""


class ImportTable:
    """Local name -> dotted module path, from the module's import statements (any nesting level)."""

    def __init__(self, module: cst.Module) -> None:
        self.bindings: dict[str, str] = {}
        self.modules: set[str] = set()
        module.visit(_ImportCollector(self))

    def add_import(self, node: cst.Import) -> None:
        for alias in node.names:
            full = _module_name(alias.name)
            self.modules.add(full)
            if alias.asname is not None:
                self.bindings[alias.asname.name.value] = full  # type: ignore[union-attr]
            else:
                top = full.split(".")[0]
                self.bindings.setdefault(top, top)

    def add_import_from(self, node: cst.ImportFrom) -> None:
        if node.relative or node.module is None:
            return
        base = _module_name(node.module)
        self.modules.add(base)
        if isinstance(node.names, cst.ImportStar):
            return
        for alias in node.names:
            name = _module_name(alias.name)
            local = alias.asname.name.value if alias.asname is not None else name  # type: ignore[union-attr]
            self.bindings[local] = f"{base}.{name}"
            self.modules.add(f"{base}.{name}")

    def qualify(self, node: cst.BaseExpression) -> Optional[str]:
        """The dotted name `node` refers to through the imports, or None."""
        written = dotted(node)
        if written is None:
            return None
        head, _, rest = written.partition(".")
        if head not in self.bindings:
            return None
        base = self.bindings[head]
        return f"{base}.{rest}" if rest else base

    def is_(self, node: cst.BaseExpression, names: Iterable[str]) -> bool:
        q = self.qualify(node)
        return q is not None and q in names

    def imports_any(self, prefix: str) -> bool:
        return any(m == prefix or m.startswith(prefix + ".") for m in self.modules)


class _ImportCollector(cst.CSTVisitor):
    def __init__(self, table: ImportTable) -> None:
        self.table = table

    def visit_Import(self, node: cst.Import) -> None:
        self.table.add_import(node)

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        self.table.add_import_from(node)


def call_arg(call: cst.Call, pos: int, name: str) -> Optional[cst.BaseExpression]:
    """The argument a call passes for parameter `name`, given by keyword or at position `pos`."""
    for a in call.args:
        if a.keyword is not None and a.keyword.value == name:
            return a.value
    positional = [a for a in call.args if a.keyword is None and not a.star]
    return positional[pos].value if pos < len(positional) else None
