"""How many dims an operand of a pallas_call has, read from the source without running it.

In order of trust: a literal out_shape, a `m, k = x.shape` unpacking in the caller, a name
bound once to a reshape with a literal shape (`x.reshape((-1, n))`) or a ravel, an output built
from an input's shape, the file's `# pallas-fix: example` directives, and last the number
of indices every access to the ref inside the kernel spells out.
"""

from __future__ import annotations

from typing import Callable, Optional

import libcst as cst

from pallas_fix.analysis.binders import int_literal
from pallas_fix.analysis.context import ModuleContext, walk
from pallas_fix.core import names as N
from pallas_fix.core.directives import extract_directives
from pallas_fix.core.examples import ArgSpec, ExampleSyntaxError, parse_example
from pallas_fix.core.model import KernelSite
from pallas_fix.core.names import call_arg
from pallas_fix.rewrite.callsite.spelling.operands import Slot
from pallas_fix.rewrite.text.syntax import elements, is_plain_name


def declared_rank(ctx: ModuleContext, site: KernelSite, slots: dict[str, Slot], slot: Slot,
                  input_rank: Optional[Callable[[str], Optional[int]]] = None) -> Optional[int]:
    """The rank the call site states for `slot`'s array (not counting its BlockSpec).
    `input_rank(param)` is an input's rank where its BlockSpec is known (it may squeeze dims the
    kernel then does not index); without it, the kernel's indexing alone."""
    if slot.kind == "out" and isinstance(slot.out_shape, cst.Call):
        found = _out_shape_rank(ctx, site, slots, slot.out_shape, input_rank or (lambda p: rank_from_kernel(site, p)))
        if found is not None:
            return found
    if slot.kind in ("in", "prefetch") and is_plain_name(slot.arg):
        assert slot.arg is not None
        return _rank_of_array(ctx, site, slot.arg)
    if slot.kind in ("in", "prefetch") and isinstance(slot.arg, cst.Call) and ctx.imports.is_(slot.arg.func, N.RAVEL):
        return 1  # `jnp.ravel(x)`, whatever x is: flashoptim's flattened leaves
    return None


def _rank_of_array(ctx: ModuleContext, site: KernelSite, name_expr: cst.BaseExpression) -> Optional[int]:
    found = _rank_of_name(ctx, site, name_expr)
    return found if found is not None else _rank_from_examples(ctx, site, name_expr)


def _out_shape_rank(ctx: ModuleContext, site: KernelSite, slots: dict[str, Slot], sds: cst.Call,
                    input_rank: Callable[[str], Optional[int]]) -> Optional[int]:
    shape = call_arg(sds, 0, "shape")
    if shape is None:
        return None
    shape = ctx.resolve_value(shape, site.call)
    items = elements(shape)
    if items is not None:
        return len(items)
    if not (isinstance(shape, cst.Attribute) and shape.attr.value == "shape" and is_plain_name(shape.value)):
        return None
    found = _rank_of_array(ctx, site, shape.value)
    if found is not None:
        return found
    # `ShapeDtypeStruct(x.shape, ...)`: the same rank as the input `x`.
    text = ctx.code(shape.value)
    for other in slots.values():
        if other.kind == "in" and other.arg is not None and ctx.code(other.arg) == text:
            found = input_rank(other.param)
            if found is not None:
                return found
    return None


def _rank_of_name(ctx: ModuleContext, site: KernelSite, name_expr: cst.BaseExpression) -> Optional[int]:
    """`m, k = x.shape`, `assert x.ndim == 2` or `if x.ndim != 2: raise ...` in the scope of the
    call, or the name's one binding (`_reshaped_rank`). (An out_shape built from `x.shape[0]`,
    ... says only that `x` has at least that many dims, so it names no rank.)"""
    bound = _reshaped_rank(ctx, site, name_expr)
    if bound is not None:
        return bound
    text = ctx.code(name_expr)
    for node in walk(ctx.scope_of(site.call)):
        checked = _checked_rank(ctx, node, text)
        if checked is not None:
            return checked
        if isinstance(node, cst.Assign) and len(node.targets) == 1:
            target, value = node.targets[0].target, node.value
            if (
                isinstance(target, (cst.Tuple, cst.List))
                and isinstance(value, cst.Attribute)
                and value.attr.value == "shape"
                and ctx.code(value.value) == text
                and not any(isinstance(e, cst.StarredElement) for e in target.elements)
            ):
                return len(target.elements)
    return None


def _reshaped_rank(ctx: ModuleContext, site: KernelSite, name_expr: cst.BaseExpression) -> Optional[int]:
    """The rank of a name bound once in the call's scope to `x.reshape((a, b))`, `x.reshape(a, b)`,
    `jnp.reshape(x, (a, b))` (a literal shape without `*`: one dim per item, `-1` included), or to
    `x.ravel()` / `x.flatten()` / `jnp.ravel(x)` (one dim)."""
    if not isinstance(name_expr, cst.Name) or len(ctx.assignments(name_expr.value, ctx.scope_of(site.call))) != 1:
        return None
    value = ctx.resolve_value(name_expr, site.call)
    if not isinstance(value, cst.Call) or any(a.keyword is not None or a.star for a in value.args):
        return None
    func, args = value.func, [a.value for a in value.args]
    if isinstance(func, cst.Attribute) and func.attr.value in ("ravel", "flatten") and not args:
        return 1
    if ctx.imports.is_(func, N.RAVEL) and len(args) == 1:
        return 1
    if ctx.imports.is_(func, N.RESHAPE) and len(args) == 2:
        shape = args[1:]
    elif isinstance(func, cst.Attribute) and func.attr.value == "reshape" and args:
        shape = args
    else:
        return None
    if len(shape) == 1 and not isinstance(shape[0], (cst.Tuple, cst.List)):
        # `x.reshape(-1)` is one dim; `x.reshape(shape)` may name a tuple of any length.
        return 1 if int_literal(shape[0]) is not None else None
    items = elements(shape[0]) if len(shape) == 1 else shape
    if items is None or any(isinstance(i, cst.StarredElement) for i in items):
        return None
    return len(items)


def _checked_rank(ctx: ModuleContext, node: cst.CSTNode, text: str) -> Optional[int]:
    """N when `node` is `assert text.ndim == N` (also inside `and`) or `if text.ndim != N:`
    whose body raises."""
    if isinstance(node, cst.Assert):
        tests, equal = _conjuncts(node.test), cst.Equal
    elif isinstance(node, cst.If) and any(isinstance(n, cst.Raise) for n in walk(node.body)) and node.orelse is None:
        tests, equal = [node.test], cst.NotEqual
    else:
        return None
    for t in tests:
        if not (isinstance(t, cst.Comparison) and len(t.comparisons) == 1 and isinstance(t.comparisons[0].operator, equal)):
            continue
        left, right = t.left, t.comparisons[0].comparator
        if isinstance(left, cst.Attribute) and left.attr.value == "ndim" and ctx.code(left.value) == text and isinstance(right, cst.Integer):
            return int(right.value)
    return None


def _conjuncts(test: cst.BaseExpression) -> list[cst.BaseExpression]:
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
        return _conjuncts(test.left) + _conjuncts(test.right)
    return [test]


def _rank_from_examples(ctx: ModuleContext, site: KernelSite, name_expr: cst.BaseExpression) -> Optional[int]:
    """The file's `# pallas-fix: example entry(f32[256], ...)` directives name the rank of the
    entry's array parameters; an argument that is such a parameter, passed straight through,
    has that rank. All directives for the entry must agree."""
    if not isinstance(name_expr, cst.Name) or "pallas-fix: example" not in ctx.source:
        return None
    fn = ctx.enclosing_function(site.invocation) if site.invocation is not None else None
    if fn is None or ctx.assignments(name_expr.value, fn):
        return None
    params = [p.name.value for p in [*fn.params.posonly_params, *fn.params.params]]
    if name_expr.value not in params:
        return None
    position = params.index(name_expr.value)
    ranks = set()
    for d in extract_directives(ctx.source):
        if d.kind != "example":
            continue
        try:
            ex = parse_example(d.text)
        except (ExampleSyntaxError, ValueError):
            continue
        if ex.entry != fn.name.value:
            continue
        value = ex.kwargs.get(name_expr.value, ex.args[position] if position < len(ex.args) else None)
        if isinstance(value, ArgSpec):
            ranks.add(len(value.shape))
    return ranks.pop() if len(ranks) == 1 else None


def rank_from_kernel(site: KernelSite, param: str) -> Optional[int]:
    """Every access to the ref spells out the same number of indices and no `...`."""
    fn = site.kernel
    assert fn is not None
    if param not in site.kernel_ranks:
        site.kernel_ranks[param] = _counted_rank(fn, param)
    return site.kernel_ranks[param]


def _counted_rank(fn: cst.FunctionDef, param: str) -> Optional[int]:
    counts = set()
    for node in walk(fn):
        if isinstance(node, cst.Subscript):
            base = node.value
            if isinstance(base, cst.Attribute) and base.attr.value == "at":
                base = base.value
            if isinstance(base, cst.Name) and base.value == param:
                if any(isinstance(e.slice, cst.Index) and isinstance(e.slice.value, cst.Ellipsis) for e in node.slice):
                    continue
                counts.add(len(node.slice))
        if (
            isinstance(node, cst.Assign)
            and isinstance(node.value, cst.Attribute)
            and node.value.attr.value == "shape"
            and isinstance(node.value.value, cst.Name)
            and node.value.value.value == param
            and isinstance(node.targets[0].target, cst.Tuple)
        ):
            return len(node.targets[0].target.elements)
    if len(counts) == 1:
        n = counts.pop()
        return n if n >= 2 else None
    return None


def traced_rank(ctx: ModuleContext, site: KernelSite, slots: dict[str, Slot], slot: Slot) -> tuple[Optional[int], str]:
    """The rank tracing the examples showed for `slot` (core.traced_facts): (rank, which examples
    showed it), or (None, why there is none). A hypothesis: the plan that uses it is unsafe. The
    trace names kernels by function name and which def of that name ran: a name defined twice in
    the module (once per arm of `if transpose:`, each arm's pallas_call running its own) is told
    apart by the def discovery resolved in the call's scope."""
    facts = ctx.traced_facts
    if facts is None or slot.kind not in ("prefetch", "in", "out"):
        return None, "no example was traced"
    nth, problem = traced_def(ctx, site)
    if problem is not None:
        return None, problem
    counts = tuple(sum(1 for s in slots.values() if s.kind == kind) for kind in ("prefetch", "in", "out"))
    rank, why = facts.rank(_traced_name(site), slot.kind, slot.index, counts, nth)  # type: ignore[arg-type]
    twins = _twins(ctx, slots)
    if rank is None and twins:  # traced before a lift passed some inputs again (rewrite.kernel.twin_refs)
        counts = (counts[0], counts[1] - len(twins), counts[2])
        index = twins.get(slot.index, slot.index) if slot.kind == "in" else slot.index
        rank = facts.rank(_traced_name(site), slot.kind, index, counts, nth)[0]  # type: ignore[arg-type]
    if rank is None and nth is not None:
        return None, f"{_named(ctx, site)}; for the one on line {ctx.span(site.kernel.name).line}: {why}"  # type: ignore[union-attr]
    return rank, why


def _twins(ctx: ModuleContext, slots: dict[str, Slot]) -> dict[int, int]:
    """The inputs at the end of the list that pass again an array an earlier input passes (the
    same name): index -> the earlier one's. A trace of the call before the twins were added counts
    only the earlier ones."""
    inputs = sorted((s for s in slots.values() if s.kind == "in"), key=lambda s: s.index)
    names = [s.arg.value if isinstance(s.arg, cst.Name) else None for s in inputs]
    out: dict[int, int] = {}
    for k in range(len(inputs) - 1, -1, -1):
        first = names.index(names[k]) if names[k] is not None else k
        if first == k or first >= len(inputs) - len(out) - 1:
            break
        out[k] = first
    return out


def traced_def(ctx: ModuleContext, site: KernelSite) -> tuple[Optional[int], Optional[str]]:
    """Which def of its name the site's kernel is, for facts from the examples (TracedFacts'
    `nth`): (None, None) when the name has one def, (n, None) for the def the call resolves in its
    scope among several, (None, why no fact is the call's) when one call runs several defs."""
    defs = [f for f in ctx.nodes_of(cst.FunctionDef) if f.name.value == _traced_name(site)]
    if len(defs) == 1:
        return None, None
    # A variant planned against its own arm (ctx.arm_pin) is one def: the examples that ran it.
    if site.kernel is None or (site.variants and ctx.arm_pin is None) or site.kernel not in defs:
        return None, _named(ctx, site)  # one call for several defs: no one def's fact is the call's
    return sorted(defs, key=lambda f: ctx.span(f.name).line).index(site.kernel), None


def _traced_name(site: KernelSite) -> Optional[str]:
    """The name the trace gives the site's kernel: its def's, for a variant picked by a name
    bound in each arm (`kernel_fn = _full_kernel`)."""
    if site.kernel is not None and len({d.name.value for d in site.variants}) > 1:
        return site.kernel.name.value
    return site.kernel_name


def _named(ctx: ModuleContext, site: KernelSite) -> str:
    count = sum(1 for f in ctx.nodes_of(cst.FunctionDef) if f.name.value == site.kernel_name)
    return f"`{site.kernel_name}` names {count} functions in the module"


def unknown_rank(ctx: ModuleContext, site: KernelSite, slots: dict[str, Slot], param: str) -> str:
    """Why the rank of `param` is unknown at the call site, and what would tell it."""
    slot = slots.get(param)
    why = traced_rank(ctx, site, slots, slot)[1] if slot is not None else "not an operand"
    return (f"cannot tell the rank of `{param}` at the call site ({why}); unpack its shape in the "
            f"caller (`m, n = x.shape`), or give an example call: --apply learns it from the trace")


def hypothesis_doubt(doubt: Optional[str], hypotheses: dict[str, tuple[int, str]]) -> Optional[str]:
    """A plan's doubt once it rests on facts from the examples' trace (`CallSite.hypotheses`):
    they held on every example, and a call they do not hold for fails at trace time."""
    if not hypotheses:
        return doubt
    facts = "; ".join(f"`{param}` has rank {rank} on the examples ({shown})" for param, (rank, shown) in hypotheses.items())
    note = (f"rests on what tracing the examples showed, which the source does not say ({facts}); "
            f"verified on an example before --apply writes it")
    return f"{doubt}; {note}" if doubt else note


def rank_is_counted(cs, param: str) -> bool:
    """Does `param`'s rank at the CallSite `cs` rest on counting the kernel's indices, its own or
    those of the input an output is shaped like? Such a rank is a lower bound (`CallSite.rank`
    records the params whose count it used), and a message must say so."""
    kept = dict(cs.counted_ranks)
    cs.counted_ranks.clear()
    try:
        cs.rank(param)
        return bool(cs.counted_ranks)
    finally:
        cs.counted_ranks.clear()
        cs.counted_ranks.update(kept)
