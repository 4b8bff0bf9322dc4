"""A grid built by code, read as its entries: `(m // bm,) + (n // bn,)`, `[m // bm, n // bn]`
through `tuple(...)`, `(n // bs,) * 2`, `tuple(d // b for d, b in zip((m, n), (bm, bn)))`,
`tuple(map(pl.cdiv, x.shape, (bm, bn)))`.

Python evaluates these in the wrapper to a tuple whose length the syntax fixes when every
sequence in it has a static length: tuple and list literals, and `x.shape` of an array whose
rank the call site states. Each entry comes back as an expression that means that entry where
the pallas_call stands; entries of comprehensions and `map` are built by substitution, so they
are new nodes, read (like every grid entry) with names resolved at the pallas_call. Anything
else is `None`: the caller refuses rather than guess a length.
"""

from __future__ import annotations

from typing import Callable, Optional

import libcst as cst

from pallas_fix.analysis.context import ModuleContext, walk
from pallas_fix.analysis.values.bindings import binding_count
from pallas_fix.analysis.values.same_value import same_value_at
from pallas_fix.core import names as N
from pallas_fix.rewrite.callsite.spelling.built_lists import mutates
from pallas_fix.rewrite.callsite.spelling.operands import CallSiteError
from pallas_fix.rewrite.text.syntax import code, elements, parenthesized

RankOf = Callable[[cst.BaseExpression], Optional[int]]  # an array expression -> its rank


def read_grid(ctx: ModuleContext, grid: cst.BaseExpression, at: cst.CSTNode, rank_of: RankOf) -> list[cst.BaseExpression]:
    """The entries of the `grid=` value `grid`: a sequence, or one extent (`grid=n // bs`)."""
    value = ctx.resolve_value(grid, at)
    items = elements(value)
    if items is None:
        items = GridShape(ctx, at, rank_of).entries(grid)  # built by code
    if items is not None:
        return items
    items = defaulted_grid(ctx, grid, at, rank_of)
    if items is not None:
        return items
    if _builds_sequence(value):
        raise CallSiteError(f"cannot read the grid `{ctx.code(grid)}` as a tuple of a static length")
    if isinstance(value, cst.Integer) or isinstance(value, cst.BinaryOperation) or _is_cdiv(ctx, value):
        return [value]  # `grid=n // bs` or `grid=pl.cdiv(n, bs)`: integers, not tuples
    raise CallSiteError(f"cannot read the grid `{ctx.code(grid)}` as a tuple" + _ranked_by_flag(ctx, value, at))


def _ranked_by_flag(ctx: ModuleContext, value: cst.BaseExpression, at: cst.CSTNode) -> str:
    """Why a grid a helper builds is not read, when the helper returns tuples of different
    lengths chosen by a test (folx's `create_grid`: `(b, h) if q_block_len is None else (b, n, h)`):
    the grid's rank, and with it every index_map's arity, is chosen when the wrapper runs. "" for
    any other call."""
    fn = ctx.resolve_def(value.func.value, at) if isinstance(value, cst.Call) and isinstance(value.func, cst.Name) else None
    returns = [n.value for n in walk(fn) if isinstance(n, cst.Return) and n.value is not None] if fn is not None else []
    if len(returns) != 1 or not isinstance(returns[0], cst.IfExp):
        return ""
    choice = returns[0]
    arms = [elements(choice.body), elements(choice.orelse)]
    if any(a is None for a in arms) or len(arms[0]) == len(arms[1]):
        return ""
    return (f": `{fn.name.value}` returns {len(arms[0])} or {len(arms[1])} grid axes, chosen by "
            f"`{' '.join(code(choice.test).split())}`, so the rank of the grid, and with it what each index_map "
            "takes, is picked when the wrapper runs; pallas-fix writes no spec chosen by a flag: give each variant its "
            "own pallas_call (the wrapper choosing by the same flag), whose grid is then a tuple")


def defaulted_grid(ctx: ModuleContext, grid: cst.BaseExpression, at: cst.CSTNode, rank_of: RankOf) -> Optional[list[cst.BaseExpression]]:
    """A grid the caller may choose, with a default: `grid_ = grid`, then `if grid_ is None:
    grid_ = (pl.cdiv(seq_len, block_q), batch_size, num_heads)` (jax-triton's attention). Its
    entries are `grid_[0]`, `grid_[1]`, ... : what each axis counts whichever binding reached the
    call, so a proof over them holds for a caller's grid too. Only where every binding of the name
    is a plain assignment of a parameter or of a sequence of one static length R, and the call's
    index_maps all take exactly R grid indices (`lambda _, j, k:`): a grid of another length fails
    in the original as in the rewrite."""
    if not isinstance(grid, cst.Name):
        return None
    scope = ctx.scope_of(at)
    if not isinstance(scope, cst.FunctionDef):
        return None
    values = ctx.assignments(grid.value, scope)
    params = {p.name.value for p in (*scope.params.params, *scope.params.kwonly_params, *scope.params.posonly_params)}
    if len(values) < 2 or binding_count(ctx, scope, grid.value) != len(values) or grid.value in params:
        return None
    lengths = set()
    for value in values:
        if isinstance(value, cst.Name) and value.value in params:
            continue  # the caller's grid
        entries = GridShape(ctx, value, rank_of).entries(value)
        if entries is None:
            return None
        lengths.add(len(entries))
    if len(lengths) != 1 or index_map_arity(ctx, scope, at) != lengths:
        return None
    (rank,) = lengths
    return [cst.Subscript(cst.Name(grid.value), [cst.SubscriptElement(cst.Index(cst.Integer(str(k))))]) for k in range(rank)]


def index_map_arity(ctx: ModuleContext, scope: cst.FunctionDef, at: cst.CSTNode) -> set[int]:
    """How many grid indices the index_map lambdas of the pallas_call at `at` take (in its own
    keywords and in the wrapper's statements): positional parameters only, no `*args`."""
    call = next((a for a in (at, *ctx.ancestors(at)) if isinstance(a, cst.Call) and ctx.imports.is_(a.func, N.PALLAS_CALL)), None)
    if call is None:
        return set()
    # The call's own index_maps pin the length (written in it, or in the spec lists it names); a
    # call with none takes any grid, whatever other calls of the wrapper take.
    specs = [ctx.resolve_value(a.value, at) for a in call.args if a.keyword is not None and a.keyword.value in ("in_specs", "out_specs")]
    lambdas = [n for root in (call, *specs) for n in walk(root) if isinstance(n, cst.Lambda)]
    if not lambdas:
        return set()
    lambdas += [n for n in walk(scope) if isinstance(n, cst.Lambda) and n not in lambdas
                and any(isinstance(a, cst.Call) and ctx.imports.is_(a.func, N.BLOCK_SPEC) for a in ctx.ancestors(n))]
    out = set()
    for lam in lambdas:
        params = lam.params
        if params.star_arg is not cst.MaybeSentinel.DEFAULT or params.kwonly_params or params.star_kwarg or params.posonly_params:
            return set()  # `lambda *_:` takes any grid
        out.add(len(params.params))
    return out


def _is_cdiv(ctx: ModuleContext, expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Call) and (ctx.imports.qualify(expr.func) or "").endswith("cdiv")


def _builds_sequence(expr: cst.BaseExpression) -> bool:
    """Does `expr` build a sequence (so it is no single grid extent)? `(a,) + (b,)`, `(n,) * 2`,
    `tuple(...)`, a comprehension."""
    if isinstance(expr, cst.BinaryOperation):
        return any(isinstance(e, (cst.Tuple, cst.List)) or _builds_sequence(e) for e in (expr.left, expr.right))
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name):
        return expr.func.value in ("tuple", "list", "zip", "map")
    return isinstance(expr, (cst.Tuple, cst.List, cst.GeneratorExp, cst.ListComp))


class GridShape:
    def __init__(self, ctx: ModuleContext, at: cst.CSTNode, rank_of: RankOf) -> None:
        self.ctx, self.at, self.rank_of = ctx, at, rank_of

    def entries(self, expr: cst.BaseExpression, depth: int = 0) -> Optional[list[cst.BaseExpression]]:
        """The entries of the sequence `expr` evaluates to, or None when its length is not static."""
        if depth > 8:
            return None
        if isinstance(expr, cst.Name):
            expr = self._bound_value(expr)
            if expr is None:
                return None
        if isinstance(expr, (cst.Tuple, cst.List)):
            return self._literal(expr, depth)
        if isinstance(expr, cst.BinaryOperation):
            return self._operation(expr, depth)
        if isinstance(expr, cst.Attribute) and expr.attr.value == "shape":
            rank = self.rank_of(expr.value)
            return None if rank is None else [_index(expr, d) for d in range(rank)]
        if isinstance(expr, (cst.GeneratorExp, cst.ListComp)):
            return self._comprehension(expr, depth)
        if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name) and not _has_keywords(expr):
            return self._builtin(expr, depth)
        return None

    def _bound_value(self, name: cst.Name) -> Optional[cst.BaseExpression]:
        """What `name` holds at the pallas_call: its single binding, unless the list is mutated
        after it (`grid.append(k)`) or a name it reads changes before the call."""
        scope = self.ctx.scope_of(self.at)
        if any(mutates(node, name.value) for node in walk(scope)):
            return None
        value = self.ctx.resolve_value(name, self.at)
        if value is not name and not same_value_at(self.ctx, value, self.at):
            return None
        return value

    def _literal(self, expr: cst.BaseExpression, depth: int) -> Optional[list[cst.BaseExpression]]:
        out: list[cst.BaseExpression] = []
        for el in expr.elements:
            if isinstance(el, cst.StarredElement):
                inner = self.entries(el.value, depth + 1)
                if inner is None:
                    return None
                out += inner
            else:
                out.append(el.value)
        return out

    def _operation(self, expr: cst.BinaryOperation, depth: int) -> Optional[list[cst.BaseExpression]]:
        """`a + b` of two sequences, `seq * k` / `k * seq` with a literal count."""
        if isinstance(expr.operator, cst.Add):
            left, right = self.entries(expr.left, depth + 1), self.entries(expr.right, depth + 1)
            return None if left is None or right is None else left + right
        if isinstance(expr.operator, cst.Multiply):
            for seq, count in ((expr.left, expr.right), (expr.right, expr.left)):
                if isinstance(count, cst.Integer):
                    items = self.entries(seq, depth + 1)
                    return None if items is None else items * int(count.evaluated_value)
        return None

    def _builtin(self, call: cst.Call, depth: int) -> Optional[list[cst.BaseExpression]]:
        """`tuple(seq)` / `list(seq)`, `zip(...)` (rows as tuples), `map(f, *seqs)`."""
        name, args = call.func.value, [a.value for a in call.args]  # type: ignore[union-attr]
        if any(a.star for a in call.args) or self.ctx.assignments(name, self.ctx.module):
            return None  # a module-level `tuple = ...` is not the builtin
        if name in ("tuple", "list") and len(args) == 1:
            return self.entries(args[0], depth + 1)
        if name in ("zip", "map") and args[name == "map":]:
            seqs = [self.entries(a, depth + 1) for a in args[name == "map":]]
            if any(s is None for s in seqs):
                return None
            rows = list(zip(*seqs))  # both stop at the shortest sequence, as Python's do
            if name == "zip":
                return [cst.Tuple([cst.Element(v) for v in row]) for row in rows]
            if _binds_names(args[0]):
                return None
            return [cst.Call(args[0], [cst.Arg(parenthesized(v)) for v in row]) for row in rows]
        return None

    def _comprehension(self, comp: cst.BaseComp, depth: int) -> Optional[list[cst.BaseExpression]]:
        """One `for` clause, no `if`: the element with the target's names replaced, per item."""
        clause = comp.for_in
        if clause.inner_for_in is not None or clause.ifs or clause.asynchronous or _binds_names(comp.elt):
            return None
        items = self.entries(clause.iter, depth + 1)
        if items is None:
            return None
        out = []
        for item in items:
            values = _unpack(clause.target, item, self.ctx, self.at)
            if values is None:
                return None
            out.append(comp.elt.visit(_Substitute(values)))
        return out


def _unpack(target: cst.BaseExpression, item: cst.BaseExpression, ctx: ModuleContext, at) -> Optional[dict[str, cst.BaseExpression]]:
    """The names `for target in ...` binds to `item`, when it is a name or a tuple of names."""
    if isinstance(target, cst.Name):
        return {target.value: item}
    if not isinstance(target, (cst.Tuple, cst.List)):
        return None
    item = ctx.resolve_value(item, at) if isinstance(item, cst.Name) else item
    if not isinstance(item, (cst.Tuple, cst.List)) or len(item.elements) != len(target.elements):
        return None
    out: dict[str, cst.BaseExpression] = {}
    for t, v in zip(target.elements, item.elements):
        if isinstance(t, cst.StarredElement) or isinstance(v, cst.StarredElement) or not isinstance(t.value, cst.Name):
            return None
        out[t.value.value] = v.value
    return out


class _Substitute(cst.CSTTransformer):
    """Replace names read in an expression (not attribute names or keywords) by values."""

    def __init__(self, values: dict[str, cst.BaseExpression]) -> None:
        self.values = values

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        node.value.visit(self)  # only the object part reads a name
        return True

    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute) -> cst.Attribute:
        return updated.with_changes(attr=original.attr)

    def leave_Arg(self, original: cst.Arg, updated: cst.Arg) -> cst.Arg:
        return updated.with_changes(keyword=original.keyword)

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.BaseExpression:
        value = self.values.get(original.value)
        return parenthesized(value) if value is not None else updated


def _binds_names(expr: cst.CSTNode) -> bool:
    """Lambdas, comprehensions and walruses bind names of their own: substitution would not
    know which mentions are the comprehension's."""
    return any(isinstance(n, (cst.Lambda, cst.BaseComp, cst.NamedExpr)) for n in walk(expr))


def _has_keywords(call: cst.Call) -> bool:
    return any(a.keyword is not None for a in call.args)


def _index(shape: cst.BaseExpression, dim: int) -> cst.Subscript:
    return cst.Subscript(shape, [cst.SubscriptElement(cst.Index(cst.Integer(str(dim))))])


def extended_grid(grid_kw: cst.BaseExpression, entries: list[cst.BaseExpression], trip: str) -> str:
    """The grid keyword's new value with one more axis, `trip` steps, for a grid built by code:
    `(*grid, trip)` keeps the user's variable (or what `tuple(...)` unpacks), other built
    forms are written out as a literal of their entries."""
    inner = grid_kw
    if isinstance(inner, cst.Call) and isinstance(inner.func, cst.Name) and inner.func.value in ("tuple", "list") and len(inner.args) == 1:
        inner = inner.args[0].value
    if isinstance(inner, cst.Name):
        return f"(*{inner.value}, {trip})"
    return "(" + ", ".join([code(e) for e in entries] + [trip]) + ")"
