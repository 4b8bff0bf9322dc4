"""Guards: the shape facts a lift needs that the code leaves unsaid, written into the wrapper as
checks before the pallas_call.

A bounds proof (rewrite.proofs.bounds) fails when a new grid's last block may run past the end of
an array: the code never says that `residual.shape[0] == x.shape[0]` (the grid counts `x`'s rows,
the blocks read `residual`'s), or that `block_k` divides `skv` (the grid is `pl.cdiv(skv,
block_k)`). Every caller may satisfy it, yet the original's slice would be clamped where a
BlockSpec block is partial. A Pallas expert states such a fact as a check in the wrapper, as JAX's
own TPU kernels do (`if n % bn: raise ValueError(...)`). `find_guard` looks for one such fact (an
equality of two extents, a divisibility, or both) that makes the proof go through, and `Guard`
writes it in the file's style just before the statement that runs the pallas_call.

Which facts qualify: only ones about expressions the pallas_call itself needs as Python ints at
trace time (array dims, grid extents, block sizes), never values loaded from refs; and only where
the guard's text means, where it is written, exactly what the proof assumed: every guard is parsed
back and read again at the pallas_call and at the call that runs it, and a name rebound in
between, or an expression pallas-fix cannot read, drops the candidate. A guard an example call of
the file breaks is refused with the fact named (rewrite.proofs.example_facts); the fix that
carries a guard is unsafe, written by plain `--apply` only once verified on an example (which
then passes the guard, or the rewrite would raise there and fail verification).

A squeezed dim (`x_ref[b]`, b a grid index) needs its axis not to outrun the dim: the bound
`x.shape[0] >= batch`. A size pallas-fix cannot follow (`g_flat.shape[2]`, `g_flat` bound in
branches) may still be guarded where the pallas_call reads it: in the statement that builds and
runs the call, read only through names, attributes and constant subscripts (`_read_at_call`);
a size whose names are bound in branches (`B, H` unpacked in each arm) where nothing rebinds them
between the statement the plan read them in and the call (rewrite.guards.unchanged). A
check already standing right before that statement (an earlier rewrite's) proves what it says
and is not written twice. No check for a kernel that masks its loads or stores: it handles a
last window past the end on hardware, so the check would reject calls the original handles.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Optional

import libcst as cst

from pallas_fix.analysis.binders import positional_names
from pallas_fix.analysis.context import plain_read, walk
from pallas_fix.analysis.relays.passed_in import outer_call
from pallas_fix.analysis.loops.proofs import Facts
from pallas_fix.core import names as N
from pallas_fix.analysis.loops.symbolic import Poly, Symbols
from pallas_fix.rewrite.callsite.spelling.built_lists import present_arm
from pallas_fix.rewrite.guards.unchanged import readable_at, reads_leaf, respelled
from pallas_fix.rewrite.text.syntax import variable_names

_MAX_CANDIDATES = 12


@dataclass(frozen=True)
class Guard:
    kind: str  # "divides": `left % right == 0`; "equal": `left == right`; "at_least": `left >= right`
    left: str  # call-site source text
    right: str
    left_poly: Poly
    right_poly: Poly

    def reads(self, names: frozenset) -> bool:
        """Either side reads one of the variables `names` (not an attribute of that name)."""
        return any(variable_names(cst.parse_expression(side)) & names for side in (self.left, self.right))

    def fact(self) -> str:
        op = {"divides": "%", "equal": "==", "at_least": ">="}[self.kind]
        return f"{self.left} % {self.right} == 0" if self.kind == "divides" else f"{self.left} {op} {self.right}"

    def failing(self) -> str:
        """The condition under which the check raises."""
        if self.kind == "divides":
            return f"{self.left} % {self.right}"
        return f"{self.left} {'!=' if self.kind == 'equal' else '<'} {self.right}"

    def add_to(self, facts: Facts) -> Facts:
        out = replace(facts, divides=list(facts.divides), equal=dict(facts.equal), nonneg=list(facts.nonneg))
        if self.kind == "divides":
            out.divides.append((self.right_poly, self.left_poly))
        elif self.kind == "at_least":
            out.nonneg.append(self.left_poly - self.right_poly)
        else:
            single = self.left_poly.monomial()
            assert single is not None
            out.equal.setdefault(single[0][0], self.right_poly)
        return out

    def message(self) -> str:
        """The error's text: the fact, with the values the call gave, where they can be shown."""
        words = {"divides": "must be a multiple of", "equal": "must equal", "at_least": "must be at least"}[self.kind]
        if any(ch in t for t in (self.left, self.right) for ch in "'\"{}\\"):
            return repr(f"{self.left} {words} {self.right}")
        # The values of plain names (not of a number: `1 ({1})` says nothing).
        shown = [f"{t} ({{{t}}})" if _is_atomic(t) and not t.isdigit() else t for t in (self.left, self.right)]
        return f'{"f" if shown != [self.left, self.right] else ""}"{shown[0]} {words} {shown[1]}"'

    def statement(self, use_assert: bool) -> str:
        if use_assert:
            return f"assert {self.fact()}, {self.message()}\n"
        return f"if {self.failing()}:\n    raise ValueError({self.message()})\n"


Fact = tuple  # (kind, left Poly, right Poly, left text or None, right text or None): texts as the code spells them


def candidates(symbols: Symbols, substitute: Callable[[Poly], Poly], full: Poly, size: Poly,
               extents: list[Poly], texts: tuple[str, str], exact: Optional[Fact] = None) -> list[tuple[Fact, ...]]:
    """Facts that may make blocks of `size` stepped over `extents` fit `full` (spelled `texts` at
    the call), single ones first, then an equality with a divisibility: that `size` divides
    `full`; that a `pl.cdiv(num, den)` count is exact; that `full` equals the extent a count
    divides; last `exact`, the bound itself (`full >= count * size`), which rejects no call the
    original keeps inside the array but reads less plainly."""
    divides: list[Fact] = []
    equal: list[Fact] = []
    single = full.monomial()
    for extent in extents:
        for key in _quotients(symbols, substitute(extent)):
            atom = symbols.atoms[key]
            num_text, den_text = _quotient_parts(atom.text)
            if atom.kind == "ceil":
                divides.append(("divides", atom.num, atom.den, num_text, den_text))
            if single is not None and single[1] == 1 and len(single[0]) == 1 and atom.num != full:
                equal.append(("equal", full, atom.num, texts[0], num_text))
                divides.append(("divides", atom.num, atom.den, num_text, den_text))
    divides.append(("divides", full, size, *texts))  # after the counts' own spelling (`skv % block_k`)
    divides = list({(f[1], f[2]): f for f in reversed(divides)}.values())[::-1]
    equal = list({(f[1], f[2]): f for f in reversed(equal)}.values())[::-1]
    combos = [(f,) for f in [*equal, *divides]] + [(e, d) for e in equal for d in divides]
    return combos[:_MAX_CANDIDATES] + ([(exact,)] if exact is not None else [])


def _quotient_parts(text: str) -> tuple[Optional[str], Optional[str]]:
    """`a // b` or `pl.cdiv(a, b)` as written: the texts of a and b."""
    try:
        expr = cst.parse_expression(text)
    except cst.ParserSyntaxError:
        return None, None
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.FloorDivide):
        parts = [expr.left, expr.right]
    elif isinstance(expr, cst.Call) and len(expr.args) == 2:
        parts = [a.value for a in expr.args]
    else:
        return None, None
    return tuple(cst.Module([]).code_for_node(p) for p in parts)  # type: ignore[return-value]


def _quotients(symbols: Symbols, p: Poly) -> list[str]:
    keys = [k for m, _c in p.terms for k in m]
    return [k for k in dict.fromkeys(keys) if k in symbols.atoms and symbols.atoms[k].kind in ("floor", "ceil")
            and symbols.atoms[k].num is not None and symbols.atoms[k].den is not None]


def as_guard(symbols: Symbols, fact: tuple[str, Poly, Poly], places: list[cst.CSTNode],
             traced: frozenset = frozenset()) -> Optional[Guard]:
    """The fact as a guard whose two sides, written as source, read back to the same polynomials
    at every one of `places` (the pallas_call and the call that runs it); None otherwise, or when
    it reads one of the `traced` names (a `jax.jit` argument not declared static) other than
    through its `.shape`."""
    kind, left, right, *written = fact
    if kind == "equal" and (left.monomial() is None or left.monomial()[0][0].startswith("?")):
        return None
    texts = []
    placed = _statement_of(symbols.ctx, places[-1])
    for poly, spelled in zip((left, right), written):
        if not poly.terms:
            return None
        # As the code spells it (`skv`) where that means the same there, else as pallas-fix reads it.
        text = next((t for t in (spelled, symbols.text(poly)) if t and (_reads_back(symbols, t, poly, places, traced)
                                                                        or _read_at_call(symbols, t, poly, places, traced)
                                                                        or reads_leaf(symbols, t, poly, places[0], placed, traced))), None)
        if text is None and placed is not None:  # names bound in branches, unchanged since (proofs.unchanged)
            text = readable_at(symbols, poly, placed, lambda t, p: _reads_back(symbols, t, p, places, traced), traced)
            text = text and (respelled(symbols, spelled, poly, places[0]) or text)
        if text is None:
            return None
        text = _unwrapped(text)  # `(B * H)` as a whole side needs no parentheses
        texts.append(text if _is_atomic(text) or kind != "divides" else f"({text})")  # `%` binds as `*` does
    return Guard(kind, texts[0], texts[1], left, right)


def _unwrapped(text: str) -> str:
    expr = cst.parse_expression(text)
    return cst.Module([]).code_for_node(expr.with_changes(lpar=[], rpar=[])) if getattr(expr, "lpar", None) else text


def _is_atomic(text: str) -> bool:
    """Needs no parentheses as an operand of `%` or `!=`."""
    expr = cst.parse_expression(text)
    return isinstance(expr, (cst.Name, cst.Attribute, cst.Subscript, cst.Call, cst.Integer))


def _reads_back(symbols: Symbols, text: str, poly: Poly, places: list[cst.CSTNode], traced: frozenset) -> bool:
    try:
        expr = cst.parse_expression(text)
    except cst.ParserSyntaxError:
        return False
    if _bare_names(expr) & traced:
        return False
    return all(symbols.poly(expr, at) == poly for at in places)


def _read_at_call(symbols: Symbols, text: str, poly: Poly, places: list[cst.CSTNode], traced: frozenset) -> bool:
    """`text` is an expression pallas-fix cannot follow (`g_flat.shape[2]` where `g_flat` is bound
    in branches) that the plan reads at the pallas_call itself: the guard, written just before the
    statement that builds and runs the call, reads the same value there when that statement binds
    nothing before the call runs (no `:=`) and the text only reads names, their attributes and
    constant subscripts (nothing it could call)."""
    single = poly.monomial()
    if single is None or single[1] != 1 or len(single[0]) != 1 or not single[0][0].startswith("?"):
        return False
    atom = symbols.atoms.get(single[0][0])
    if atom is None or atom.text != text or not _at_call(symbols, atom.node, places[0]):
        return False
    holders = {id(_statement_of(symbols.ctx, at)) for at in places}
    statement = _statement_of(symbols.ctx, places[0])
    if len(holders) != 1 or statement is None or any(isinstance(n, cst.NamedExpr) for n in walk(statement)):
        return False
    expr = cst.parse_expression(text)
    return plain_read(expr, arithmetic=True) and not (_bare_names(expr) & traced)


def _at_call(symbols: Symbols, node, call: cst.CSTNode) -> bool:
    """`node` is read where the pallas_call is: built by pallas-fix for the call site (in no
    tree), or part of the call outside any lambda or function (an index_map's own names)."""
    if node is None:
        return False
    above = list(symbols.ctx.ancestors(node))
    if not above:
        return True
    inside = above[: next((n for n, a in enumerate(above) if a is call), len(above))]
    return len(inside) < len(above) and not any(isinstance(a, (cst.Lambda, cst.FunctionDef)) for a in inside)


def _bare_names(expr: cst.CSTNode) -> set[str]:
    """Names read as values, not only for their `.shape` (which is static even when traced)."""
    if isinstance(expr, cst.Attribute) and expr.attr.value == "shape":
        return set()
    if isinstance(expr, cst.Name):
        return {expr.value}
    return {n for child in expr.children for n in _bare_names(child)}


def optional_operands(cs) -> frozenset:
    """The names of operands the call may receive as None: their spec is `None if b is None else
    pl.BlockSpec(...)` (easydel's optional bias). A check reading their shape would raise there."""
    items = cs.spec_items("in") or []
    return frozenset(slot.arg.value for slot in cs.slots.values()
                     if slot.kind == "in" and isinstance(slot.arg, cst.Name) and slot.index < len(items)
                     and isinstance(items[slot.index], cst.IfExp) and present_arm(items[slot.index]) is not items[slot.index])


def traced_names(ctx, fn: Optional[cst.FunctionDef]) -> frozenset:
    """Parameters of a `jit`-decorated wrapper that are traced: every one not named in the
    decorator's `static_argnames` / `static_argnums` (any decorator mentioning `jit` counts)."""
    if fn is None:
        return frozenset()
    jits = [d.decorator for d in fn.decorators if "jit" in ctx.code(d.decorator)]
    if not jits:
        return frozenset()
    params = positional_names(fn)
    names = set(params) | {p.name.value for p in fn.params.kwonly_params}
    for deco in jits:
        for node in walk(deco):
            if isinstance(node, cst.SimpleString):
                names.discard(node.evaluated_value)
            elif isinstance(node, cst.Integer) and int(node.evaluated_value) < len(params):
                names.discard(params[int(node.evaluated_value)])
    return frozenset(names)


def breaks_example(symbols: Symbols, guard: Guard, examples, evaluate) -> Optional[str]:
    """How an example call of the file breaks `guard` (`skv % block_k == 0` is 100 % 32 in
    `f(...)`), or None when every example that fixes its values satisfies it."""
    for call, values in examples:
        a, b = (evaluate(symbols, p, values) for p in (guard.left_poly, guard.right_poly))
        if a is None or b is None:
            continue
        ok = (b != 0 and a % b == 0) if guard.kind == "divides" else (a == b if guard.kind == "equal" else a >= b)
        if not ok:
            op = "==" if guard.kind == "equal" else ">="
            shown = f"{a} % {b} == {a % b if b else '?'}" if guard.kind == "divides" else f"{a} {op} {b}"
            return f"`{guard.fact()}` is {shown} in the example `{call}`"
    return None


def placement(ctx, site) -> Optional[cst.SimpleStatementLine]:
    """The statement the guards go before: the one that runs the pallas_call (its operands
    exist there), a plain statement of the wrapper function, after the statement that builds the
    call when the two differ and stand in one block. None when there is no such place: the
    decorator form, a call at module level, or one built and run in different blocks."""
    if site.forwarded and site.passed_by is not None:
        # The sizes the lift reads are those the helper's call passes, where that call stands.
        holder = _statement_of(ctx, outer_call(site))
        return holder if holder is not None and ctx.enclosing_function(holder) is not None else None
    if site.enclosing is None or site.decorated is not None:
        return None
    holders = [_statement_of(ctx, n) for n in (site.call, site.invocation) if n is not None]
    if any(h is None for h in holders):
        return None
    first, last = holders[0], holders[-1]
    if first is not last:
        parent = ctx.parent(first)
        siblings = list(getattr(parent, "body", ())) if parent is not None else []
        if not any(s is first for s in siblings) or not any(s is last for s in siblings):
            return None
        if [id(s) for s in siblings].index(id(first)) > [id(s) for s in siblings].index(id(last)):
            return None
    return last if ctx.enclosing_function(last) is site.enclosing else None


def written_before(ctx, anchor: cst.CSTNode) -> set[str]:
    """The checks that stand right before `anchor` (nothing between them and it): `if c: raise`
    as its condition `c`, `assert f` as `not f`; a guard already written there (by an earlier
    rewrite of the same call) proves what it says and is not written again."""
    parent = ctx.parent(anchor)
    siblings = list(getattr(parent, "body", ())) if parent is not None else []
    at = next((n for n, st in enumerate(siblings) if st is anchor), None)
    found: set[str] = set()
    for st in reversed(siblings[:at] if at is not None else []):
        if (isinstance(st, cst.If) and st.orelse is None and len(st.body.body) == 1
                and isinstance(st.body.body[0], cst.SimpleStatementLine)
                and isinstance(st.body.body[0].body[0], cst.Raise)):
            found.add(ctx.code(st.test))
        elif isinstance(st, cst.SimpleStatementLine) and len(st.body) == 1 and isinstance(st.body[0], cst.Assert):
            found.add(f"not {ctx.code(st.body[0].test)}")
        else:
            break
    return found


def _statement_of(ctx, node: cst.CSTNode) -> Optional[cst.SimpleStatementLine]:
    """The plain statement `node` runs in, where a check written before it reads the names
    `node` reads; None inside a function, a lambda or a comprehension (`[call(x) for x in xs]`:
    `x` is bound only in there), a compound statement, or a branch the statement may not run
    (`call(x) if fast else x`, `skip or call(x)`): a check before it would reject a call whose
    branch never runs the pallas_call."""
    for a in (node, *ctx.ancestors(node)):
        if isinstance(a, cst.SimpleStatementLine):
            return a
        if isinstance(a, (cst.FunctionDef, cst.Lambda, cst.BaseCompoundStatement, *_COMPREHENSIONS)) or _conditional(ctx, a):
            return None
    return None


def _conditional(ctx, node: cst.CSTNode) -> bool:
    """Does `node` run only on some evaluations of its parent: a branch of `a if c else b`, or
    an operand of `and` / `or` after the first?"""
    parent = ctx.parent(node)
    if isinstance(parent, cst.IfExp):
        return node is parent.body or node is parent.orelse
    return isinstance(parent, cst.BooleanOperation) and node is parent.right


_COMPREHENSIONS = (cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)


def masked_access(ctx, kernel: Optional[cst.FunctionDef]) -> Optional[int]:
    """The line of the kernel's first masked load or store (`pl.load(..., mask=...)`, Triton's
    `plgpu.load`): the kernel guards the tail itself, so a window past the end is a call it means
    to handle (on hardware masked lanes are not touched), not one a check may reject."""
    for node in walk(kernel) if kernel is not None else ():
        if (isinstance(node, cst.Call) and any(a.keyword is not None and a.keyword.value == "mask" for a in node.args)
                and (ctx.imports.qualify(node.func) or "").startswith(N.PALLAS + ".")
                and (ctx.imports.qualify(node.func) or "").rsplit(".", 1)[-1] in ("load", "store", "swap")):
            return ctx.span(node).line
    return None


def uses_asserts(ctx, fn: cst.FunctionDef) -> bool:
    """The wrapper states its checks with `assert` (and raises nothing itself)."""
    nodes = list(walk(fn))
    return any(isinstance(n, cst.Assert) for n in nodes) and not any(isinstance(n, cst.Raise) for n in nodes)


def guard_edit(guards: list[Guard], use_assert: bool):
    """An edit of the anchor statement that puts the guards' checks before it (and before what an
    earlier edit put there: chained, it gets that edit's FlattenSentinel)."""
    checks = [cst.parse_statement(g.statement(use_assert)) for g in guards]

    def edit(out: cst.CSTNode):
        rest = list(out.nodes) if isinstance(out, cst.FlattenSentinel) else [out]
        if rest and hasattr(rest[0], "leading_lines"):  # comments above the call stay above the checks
            checks[0] = checks[0].with_changes(leading_lines=rest[0].leading_lines)
            rest[0] = rest[0].with_changes(leading_lines=())
        return cst.FlattenSentinel([*checks, *rest])

    return edit
