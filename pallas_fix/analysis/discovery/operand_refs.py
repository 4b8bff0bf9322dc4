"""Which of a kernel's ref parameters are the pallas_call's inputs and outputs.

A kernel's positional refs are, in order, the scalar prefetch refs (`num_scalar_prefetch` of a
`PrefetchScalarGridSpec`), the inputs, the outputs, then one per entry of `scratch_shapes`.
Only inputs and outputs have BlockSpecs, so only their indices can become block dims; and not
those the user placed whole in a memory space (`pl.BlockSpec(memory_space=pltpu.SMEM)`: a table
read by scalar, an HBM ref copied by hand). When a count cannot be read statically every ref
counts as an operand: a planner then finds out which slot the ref is and refuses what it cannot
block.
"""

from __future__ import annotations

from typing import Callable, Optional

import libcst as cst

from pallas_fix.core import names as N
from pallas_fix.core.names import call_arg

from pallas_fix.analysis.values.provenance import Env
from pallas_fix.analysis.discovery.helper_calls import kernel_ref_name
from pallas_fix.analysis.discovery.varargs import bound_names
from pallas_fix.core.model import KernelSite


def operand_ref(site: KernelSite, env: Env, ref_expr: cst.BaseExpression) -> bool:
    """`ref_expr` names one of the kernel's own ref parameters that is an input or an output."""
    if site.kernel is None or not isinstance(ref_expr, cst.Name):
        return False
    # The kernel's own name, also where a helper or a loop body receives the ref as an argument.
    name = kernel_ref_name(env, ref_expr.value, site.kernel)
    if name is None:
        return False
    refs = _positional_refs(site)
    if name not in refs:
        # A name bound from `*refs`: its slot needs the call's counts, which the planner's
        # CallSite reads (analysis.discovery.varargs); it refuses what it cannot block.
        return name in bound_names(env.ctx, site.kernel)
    position = refs.index(name)
    prefetch = _count(env, site.kw("num_scalar_prefetch"), default=0)
    scratch = scratch_count(site)
    if prefetch is None or scratch is None:
        return True
    if not prefetch <= position < len(refs) - scratch:
        return False
    spec = _spec_of(site, position - prefetch)
    return spec is None or not _memory_space_only(spec)


def scalar_block_refs(site: KernelSite, env: Env) -> set[str]:
    """The kernel's ref parameters whose BlockSpec squeezes every dim (`pl.BlockSpec((None,),
    lambda i, j: (j,))`): each is a 0-d ref in the kernel, and `ref[...]` reads one scalar."""
    if site.kernel is None:
        return set()
    refs = _positional_refs(site)
    prefetch = _count(env, site.kw("num_scalar_prefetch"), default=0)
    scratch = scratch_count(site)
    if prefetch is None or scratch is None:
        return set()
    found = set()
    for position in range(prefetch, len(refs) - scratch):
        spec = _spec_of(site, position - prefetch)
        if isinstance(spec, cst.Call) and env.ctx.imports.is_(spec.func, N.BLOCK_SPEC) and _all_squeezed(spec):
            found.add(refs[position])
    return found


def _all_squeezed(spec: cst.Call) -> bool:
    shape = call_arg(spec, 0, "block_shape")
    return (isinstance(shape, cst.Tuple) and bool(shape.elements)
            and all(isinstance(e.value, cst.Name) and e.value.value == "None" for e in shape.elements))


def _spec_of(site: KernelSite, operand: int) -> Optional[cst.BaseExpression]:
    """The BlockSpec expression written for operand number `operand` (inputs, then outputs),
    when the spec lists are literal."""
    ins = _literal_items(site.kw("in_specs"))
    if ins is None:
        return None
    if operand < len(ins):
        return ins[operand]
    out_specs = site.kw("out_specs")
    outs = _literal_items(out_specs)
    if outs is None:
        return out_specs if isinstance(out_specs, cst.Call) and operand == len(ins) else None
    index = operand - len(ins)
    return outs[index] if index < len(outs) else None


def _literal_items(expr: Optional[cst.BaseExpression]) -> Optional[list[cst.BaseExpression]]:
    if expr is None:
        return []
    if isinstance(expr, (cst.List, cst.Tuple)) and not any(isinstance(e, cst.StarredElement) for e in expr.elements):
        return [e.value for e in expr.elements]
    return None


def _memory_space_only(spec: cst.BaseExpression) -> bool:
    """`pl.BlockSpec(memory_space=...)` with no block shape: the whole array, placed by hand."""
    if not isinstance(spec, cst.Call):
        return False
    keywords = {a.keyword.value for a in spec.args if a.keyword is not None}
    positional = [a for a in spec.args if a.keyword is None]
    return "memory_space" in keywords and not positional and "block_shape" not in keywords


def _positional_refs(site: KernelSite) -> list[str]:
    """The kernel's positional parameters that no functools.partial or default binds."""
    fn = site.kernel
    assert fn is not None
    positional = [*fn.params.posonly_params, *fn.params.params]
    names = [p.name.value for p in positional[len(site.partial_args):] if p.default is None]
    return [n for n in names if n not in site.partial_kwargs]


def _count(env: Env, expr: Optional[cst.BaseExpression], default: int) -> Optional[int]:
    return default if expr is None else env.static_int(expr)


def scratch_count(site: KernelSite, resolve: Callable[[cst.BaseExpression], cst.BaseExpression] = lambda e: e) -> Optional[int]:
    """How many scratch refs the kernel receives, when `scratch_shapes` is a literal list
    (`resolve` may look through the name it is bound to)."""
    expr = site.kw("scratch_shapes")
    if expr is None:
        return 0
    expr = resolve(expr)
    if not isinstance(expr, (cst.List, cst.Tuple)):
        return None
    counts = [_repeated_count(e.value, resolve) if isinstance(e, cst.StarredElement) else 1 for e in expr.elements]
    return None if None in counts else sum(counts)


def _repeated_count(expr: cst.BaseExpression, resolve) -> Optional[int]:
    """`*([pltpu.SemaphoreType.DMA] * NUM_SEMS)` in a scratch list: a literal list of n items
    repeated a count that is an integer literal or a name bound to one."""
    if not isinstance(expr, cst.BinaryOperation) or not isinstance(expr.operator, cst.Multiply):
        return None
    for seq, times in ((expr.left, expr.right), (expr.right, expr.left)):
        times = resolve(times) if isinstance(times, cst.Name) else times
        if (isinstance(seq, (cst.List, cst.Tuple)) and isinstance(times, cst.Integer)
                and not any(isinstance(e, cst.StarredElement) for e in seq.elements)):
            return len(seq.elements) * int(times.evaluated_value)
    return None
