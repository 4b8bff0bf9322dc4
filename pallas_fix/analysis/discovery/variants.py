"""Kernel variants: a call whose kernel is one of several defs, chosen when the wrapper runs
(a def of the same name in each arm of an `if`, or a name bound to a different def in each arm).
Each def is analysed as the call's kernel, unless the call sits in one arm and so runs that arm's
def alone. Only program-id-blocks rewrites variants, each against its own arm (`ArmPin`,
rewrite.callsite.variant_arms); kernel_entry refuses every other fix."""

from __future__ import annotations

import dataclasses
from contextlib import contextmanager
from typing import Iterator, Optional

import libcst as cst

from pallas_fix.analysis.context import ModuleContext
from pallas_fix.analysis.relays.splat_dict import dict_keywords
from pallas_fix.analysis.values.bindings import Unpack
from pallas_fix.core.model import KernelSite


def variant_sites(ctx: ModuleContext, site: KernelSite) -> list[KernelSite]:
    """The site, or one site per def when the kernel's name is defined more than once in its scope
    (`if transpose: def kernel(...) ... else: def kernel(...)`): which def the call runs is decided
    when the wrapper runs, so every def is analysed (and rewritten only against its own arm:
    ArmPin)."""
    kernel = site.kernel
    if kernel is None or site.factory is not None or site.decorated is not None:
        return [site]
    if site.variants:  # picked by a name bound to a def in each arm (picked_kernels)
        return [_with_arm_keywords(ctx, site if d is kernel else dataclasses.replace(site, kernel=d)) for d in site.variants]
    scope = ctx.scope_of(kernel)
    defs = tuple(d for d in ctx.nodes_of(cst.FunctionDef)
                 if d.name.value == kernel.name.value and ctx.scope_of(d) is scope)  # type: ignore[attr-defined]
    if len(defs) < 2 or len({id(ctx.parent(d)) for d in defs}) < len(defs):
        return [site]  # one def, or a def redefined in one block (only the last one runs)
    own = _def_in_call_arm(ctx, site.call, defs, scope)
    if own is not None:
        site.kernel = own
        return [site]
    site.variants = defs  # type: ignore[assignment]
    return [_with_arm_keywords(ctx, site if d is kernel else dataclasses.replace(site, kernel=d)) for d in defs]


def _with_arm_keywords(ctx: ModuleContext, site: KernelSite) -> KernelSite:
    """The variant with the keywords its arm's `**kernel_kwargs` hands the partial (a dict literal
    bound once in each arm: `kernel_kwargs = {"group_size": group_size}` beside `kernel_fn =
    _quantized_kernel`), read with the arm pinned; none when no arm is found."""
    pin = variant_arm(ctx, site) if site.partial_splats else None
    if pin is None:
        return site
    site.partial_kwargs = dict(site.partial_kwargs)  # dataclasses.replace shares the original's
    with pin.pinned(ctx):
        for arg, partial in site.partial_splats:
            for each in dict_keywords(ctx, arg, partial) or ():
                site.partial_kwargs.setdefault(each.keyword.value, each.value)
    return site


def _def_in_call_arm(ctx: ModuleContext, call: cst.Call, defs: tuple[cst.FunctionDef, ...],
                     scope) -> Optional[cst.FunctionDef]:
    """The def the pallas_call runs when every def sits in its own arm of one `if` / `elif` /
    `else` chain and the call sits in one of those arms, after that arm's def (directly, or in a
    function defined there: `if transpose: def kernel(...) ...; def run(w): pl.pallas_call(kernel,
    ...)`). Only that arm's def is ever bound when the call runs, so the call runs it alone; None
    when that is not certain (a chain inside a loop, which could run another arm in between, or the
    name also bound otherwise)."""
    if ctx.assignments(defs[0].name.value, scope):
        return None
    arms = [_chain_arm(ctx, d) for d in defs]
    if any(a is None for a in arms) or len({id(a[0]) for a in arms}) != 1:  # type: ignore[index]
        return None
    root = arms[0][0]  # type: ignore[index]
    for anc in ctx.ancestors(root):
        if anc is scope:
            break
        if isinstance(anc, (cst.For, cst.While)):
            return None
    ancestors = list(ctx.ancestors(call))
    for d, (_, block) in zip(defs, arms):  # type: ignore[misc]
        if block not in ancestors:
            continue
        holder = ancestors[ancestors.index(block) - 1] if ancestors.index(block) > 0 else call
        body = list(block.body)
        if holder in body and body.index(holder) > body.index(d):
            return d
        return None
    return None


def _chain_arm(ctx: ModuleContext, d: cst.FunctionDef) -> Optional[tuple[cst.If, cst.IndentedBlock]]:
    """The outermost `if` of the `if` / `elif` / `else` chain whose arm holds `d` directly, and
    that arm's block; None when `d` is not directly in such an arm."""
    block = ctx.parent(d)
    arm = ctx.parent(block) if isinstance(block, cst.IndentedBlock) else None
    if isinstance(arm, cst.Else):
        arm = ctx.parent(arm)
    if not isinstance(arm, cst.If):
        return None
    while True:
        up = ctx.parent(arm)
        if not (isinstance(up, cst.If) and up.orelse is arm):
            return arm, block  # type: ignore[return-value]
        arm = up


def picked_kernels(ctx: ModuleContext, site: KernelSite, values: list) -> None:
    """`kernel_fn = _quantized_kernel` in one arm of an `if`, `kernel_fn = _full_kernel` in the
    other, then `functools.partial(kernel_fn, ...)`: which def the call runs is decided when the
    wrapper runs, so each def is analysed as a variant of the call (and rewritten only against
    its own arm: ArmPin), as a kernel defined once per arm is."""
    blocks = {id(ctx.parent(ctx.statement_of(v))) for v in values}
    if len(blocks) < len(values):
        return  # bound twice in one block: the later binding is the one that runs (or a loop rebinds it)
    defs = []
    for value in values:
        d = ctx.resolve_def(value.value, value) if isinstance(value, cst.Name) else None
        if d is None:
            return  # one binding is not a def: what the call runs is not known
        if all(d is not other for other in defs):
            defs.append(d)
    if len(defs) > 1:
        site.kernel, site.variants = defs[0], tuple(defs)  # type: ignore[assignment]


@dataclasses.dataclass(frozen=True)
class ArmPin:
    """One variant's arm of the `if` chain that picks the kernel (`root`): while it is set on the
    context (`ctx.arm_pin`), a name bound once in each arm of that chain and read after it (the
    spec lists, the out_shape, the operands `if quantize: in_specs = [...] else: in_specs = [...]`)
    resolves to this arm's value, which is what the pallas_call reads whenever it runs this
    variant. Any other pattern of bindings (one before the `if` too, two in one arm, a read
    inside the chain) is left unresolved, as without the pin."""

    root: cst.If
    block: cst.IndentedBlock
    blocks: tuple[cst.IndentedBlock, ...]  # every arm's block, this one among them

    @contextmanager
    def pinned(self, ctx: ModuleContext) -> Iterator[None]:
        """This arm's values are what the context resolves while the block runs."""
        ctx.arm_pin = self
        try:
            yield
        finally:
            ctx.arm_pin = None

    def pick(self, ctx: ModuleContext, values: list, at: cst.CSTNode) -> list:
        k = self._own(ctx, values)
        i, j = ctx._pos.get(id(at)), ctx._pos.get(id(self.root))
        if k is None or i is None or j is None or i < ctx._end[j]:
            return values  # read inside the chain (or before it): not the value the chain leaves
        return [values[k]]

    def reaching(self, ctx: ModuleContext, binds: list, at: cst.CSTNode) -> Optional[int]:
        """Which of `binds` (`(how, value)` pairs, one plain assignment per arm of the chain) a
        read at `at` sees on this variant's path: this arm's, read after it in the arm or after
        the chain; None otherwise."""
        if any(how != "assign" for how, _ in binds):
            return None
        # `layout, state = pack(...)` in each arm: the statement that binds it is the unpacking's
        values = [v.value if isinstance(v, Unpack) else v for _, v in binds]
        k = self._own(ctx, values)
        if k is None:
            return None
        i, stmt = ctx._pos.get(id(at)), ctx.statement_of(values[k])
        after_chain = i is not None and i >= ctx._end[ctx._pos[id(self.root)]]
        after_mine = i is not None and any(a is self.block for a in ctx.ancestors(at)) and i >= ctx._end[ctx._pos[id(stmt)]]
        return k if after_chain or after_mine else None

    def _own(self, ctx: ModuleContext, values: list) -> Optional[int]:
        """Which of `values` this arm binds, where each is bound by a statement of its own arm
        of the chain (one per arm at most) and one is this arm's; None otherwise."""
        owners = [ctx.parent(ctx.statement_of(v)) for v in values]
        if len({id(b) for b in owners}) < len(owners) or any(all(b is not arm for arm in self.blocks) for b in owners):
            return None
        mine = [k for k, b in enumerate(owners) if b is self.block]
        return mine[0] if len(mine) == 1 else None

    def elsewhere(self, ctx: ModuleContext, node: cst.CSTNode) -> bool:
        """`node` lies in another arm of the chain: it does not run when this variant does."""
        return any(a is b and b is not self.block for a in ctx.ancestors(node) for b in self.blocks)


def variant_arm(ctx: ModuleContext, site: KernelSite) -> Optional[ArmPin]:
    """The arm that makes the pallas_call run `site.kernel`, one of its variants: the arm whose
    `kernel_fn = <def>` names it (picked by name), or that holds its def (a def per arm). None
    unless every variant's binding is a plain statement of its own arm of one `if` / `elif` /
    `else` chain that sits directly in the wrapper's body, before the call."""
    if len(site.variants) < 2 or site.kernel is None:
        return None
    if len({d.name.value for d in site.variants}) > 1:
        values = ctx.assignments(site.kernel_name or "", ctx.scope_of(site.call))
        binders = [ctx.statement_of(v) for v in values]
        mine = [s for v, s in zip(values, binders)
                if isinstance(v, cst.Name) and ctx.resolve_def(v.value, v) is site.kernel]
    else:
        binders = list(site.variants)
        mine = [site.kernel]
    if len(mine) != 1:
        return None
    arms = [_chain_arm(ctx, s) for s in binders]  # type: ignore[arg-type]
    if any(a is None for a in arms) or len({id(a[0]) for a in arms}) != 1:  # type: ignore[index]
        return None
    root = arms[0][0]  # type: ignore[index]
    scope = ctx.scope_of(site.call)
    if ctx.scope_of(root) is not scope or not any(st is root for st in ctx.body_statements(scope)):
        return None  # inside a loop, a `with` or another `if`: which arm ran last is not fixed
    i, j = ctx._pos.get(id(site.call)), ctx._pos.get(id(root))
    if i is None or j is None or i < ctx._end[j]:
        return None
    blocks, arm = [], root
    while True:
        blocks.append(arm.body)
        if isinstance(arm.orelse, cst.If):
            arm = arm.orelse
            continue
        if isinstance(arm.orelse, cst.Else):
            blocks.append(arm.orelse.body)
        break
    block = ctx.parent(mine[0])
    if not isinstance(block, cst.IndentedBlock) or all(b is not block for b in blocks):
        return None
    # A def (or class) beside the kernel in an arm: names are looked up by def, last def winning
    # (ModuleContext.resolve_def), so a helper defined per arm could be read as another arm's.
    if any(isinstance(st, (cst.FunctionDef, cst.ClassDef)) and st not in site.variants for b in blocks for st in b.body):
        return None
    return ArmPin(root, block, tuple(blocks))
