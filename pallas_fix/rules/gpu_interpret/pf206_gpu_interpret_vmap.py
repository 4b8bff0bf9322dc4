"""`jax.vmap` over a pallas_call, run in GPU interpret mode: TypeError.

What it detects: `jax.vmap(f)` (call or decorator) where `f` is a pallas_call, or a function
of this module that makes one (directly or through the functions it calls), in a module that
runs in GPU interpret mode or under `--target gpu-interpret`.

Why it matters: GPU interpret mode cannot run a batched pallas_call. On jax 0.10.2 and
0.12.0.1 the batching rule fails with "TypeError: _pallas_call_batching_rule() got an unexpected
keyword argument 'kernel_arg_transforms'"; on jax 0.12.1 the batch becomes a grid axis with
per-element blocks, which the interpreter rejects with a bare AssertionError (as PF202). Observed
on CPU.

Example:
    jax.vmap(pl.pallas_call(kernel, out_shape=..., interpret=plgpu.InterpretGPUParams()))(xs)

What to do: check the batched kernel with `interpret=True`, or in GPU interpret mode add the
batch as a dimension of the refs (a loop over it in the kernel) or loop over the batch
outside the pallas_call (`for b in range(B)` / `lax.map`). No automatic fix.
"""

from __future__ import annotations

from typing import Iterator, Optional

import libcst as cst

from pallas_fix.analysis.context import walk
from pallas_fix.core import names as N
from pallas_fix.core.model import KernelSite
from pallas_fix.rules.gpu_interpret.kernel_scope import Issue, KernelScope
from pallas_fix.rules.rule import claims_no_index, make_rule

# How many names, partials and calls are followed from a vmapped function to its pallas_call.
_MAX_DEPTH = 4


def module_issues(scope: KernelScope) -> Iterator[Issue]:
    for node in walk(scope.ctx.module):
        target = _vmapped(scope, node)
        site = _pallas_call_under(scope, target, node, 0, set()) if target is not None else None
        if site is not None:
            message = (
                "`jax.vmap` over a pallas_call: GPU interpret mode cannot run it (jax 0.10.2 to 0.12.0.1: "
                "TypeError in the batching rule; 0.12.1: AssertionError, the batch becomes a grid axis "
                "with blocks)"
            )
            yield Issue("PF206", node, message, site)


def _vmapped(scope: KernelScope, node: cst.CSTNode) -> Optional[cst.CSTNode]:
    """What `node` vmaps: `jax.vmap(f)`, `@functools.partial(jax.vmap, ...)` or `@jax.vmap`."""
    ctx = scope.ctx
    if isinstance(node, cst.Call) and scope.is_(node.func, N.VMAP) and node.args:
        return node.args[0].value
    if isinstance(node, cst.Call) and scope.is_(node.func, N.PARTIAL) and node.args and scope.is_(node.args[0].value, N.VMAP):
        decorated = ctx.parent(ctx.parent(node) or node)
        if isinstance(ctx.parent(node), cst.Decorator) and isinstance(decorated, cst.FunctionDef):
            return decorated
        return None
    if isinstance(node, cst.Decorator) and scope.is_(node.decorator, N.VMAP):
        return ctx.parent(node)
    return None


def _pallas_call_under(scope: KernelScope, target: cst.CSTNode, at: cst.CSTNode, depth: int, seen: set[int]) -> Optional[KernelSite]:
    """The pallas_call that running `target` makes, following names and module functions."""
    if depth > _MAX_DEPTH or id(target) in seen:
        return None
    seen.add(id(target))
    ctx = scope.ctx
    if isinstance(target, cst.BaseExpression):
        value = scope.resolve(target, at)
        if isinstance(value, cst.Name):
            fn = ctx.resolve_def(value.value, at)
            return _pallas_call_under(scope, fn, at, depth + 1, seen) if fn is not None else _decorated_site(scope, value.value)
        if isinstance(value, cst.Call) and scope.is_(value.func, N.PARTIAL) and value.args:
            return _pallas_call_under(scope, value.args[0].value, at, depth + 1, seen)
        target = value
    for site in scope.analysis.sites:
        if site.call is target or any(a is target for a in ctx.ancestors(site.call)):
            return site
        if site.decorated is not None and site.decorated is target:
            return site
    for node in walk(target):
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Name):
            fn = ctx.resolve_def(node.func.value, node)
            found = _pallas_call_under(scope, fn, node, depth + 1, seen) if fn is not None else None
            if found is not None:
                return found
    return None


def _decorated_site(scope: KernelScope, name: str) -> Optional[KernelSite]:
    for site in scope.analysis.sites:
        if site.decorated is not None and site.decorated.name.value == name:
            return site
    return None


INVALID = (
    """\
import jax
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu


def kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2.0


def row(x):
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        interpret=plgpu.InterpretGPUParams(),
    )(x)


def batched(xs):
    return jax.vmap(row)(xs)  # expect: PF206
""",
)

# Edits that make the INVALID example VALID.
FIX = (
    ("import jax\n", "import jax\nfrom jax import lax\n"),
    ("jax.vmap(row)(xs)  # expect: PF206", "lax.map(row, xs)"),
)

RULE = make_rule(__doc__, "PF206", "gpu-interpret-vmap", claims_no_index, invalid=INVALID, fix=FIX)
