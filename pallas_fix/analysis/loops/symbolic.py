"""Integer expressions as polynomials over named atoms, for proofs about sizes and grids.

`x.shape[0] // bs * bs + 16` becomes {(floor(x.shape[0]/bs), bs): 1, (): 16}. Atoms are the
quantities pallas-fix cannot compute (array dims, parameters, quotients); each is keyed so that two
mentions share a key only when they provably hold the same value: names are followed through
their single assignment (`m, n = x.shape` makes `m` the atom `x.shape[0]`), a name bound more
than once gets a key of its own at every mention. Quotients remember what they divide
(`Atom.num` / `Atom.den`), which is what the bounds proofs in rewrite.proofs.bounds use.

Every atom is taken to be a positive integer: atoms are array dims, block sizes and grid extents.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

import libcst as cst

from pallas_fix.analysis.binders import positional_names
from pallas_fix.analysis.loops.poly import Poly, negative, positive, rounded_up
from pallas_fix.analysis.loops.read_bindings import reaching_binding, settled_binding
from pallas_fix.analysis.values.bindings import (Unpack, attribute_written, binding_count, field_may_change, indexed_only,
                                                 scope_bindings, single_binding)
from pallas_fix.analysis.context import ModuleContext, Scope, plain_read
from pallas_fix.core import names as N


@dataclass
class Atom:
    key: str
    text: str  # how the source spells it
    kind: str = "value"  # "value" | "floor" (num // den) | "ceil" (pl.cdiv(num, den), or spelled by hand: poly.rounded_up)
    num: Optional[Poly] = None
    den: Optional[Poly] = None
    node: object = None  # an opaque atom's expression, kept alive: its key is the node's id


@dataclass
class Symbols:
    """Polynomials of the integer expressions of one module; atoms are shared across calls."""

    ctx: ModuleContext
    atoms: dict[str, Atom] = field(default_factory=dict)
    _bindings: dict[int, dict] = field(default_factory=dict)
    _indexed: dict[tuple[int, str], bool] = field(default_factory=dict)  # bindings.indexed_only, per scope and name
    _written: Optional[frozenset] = None  # names whose attributes the module writes (_attribute_written)
    # The rank of the array an array key names (`w@<scope>`), where a call site knows it: a negative
    # dim (`n = w.shape[-1]`) is then the same size as the dim it counts from the front.
    ranks: Optional[Callable[[str], Optional[int]]] = None

    def poly(self, expr: cst.BaseExpression, at: cst.CSTNode, depth: int = 0) -> Poly:
        """`expr` read where `at` stands (names resolve from there)."""
        if depth > 24:
            return self._opaque(expr, at)
        if isinstance(expr, cst.Integer):
            return Poly.const(int(expr.evaluated_value))
        if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, (cst.Minus, cst.Plus)):
            inner = self.poly(expr.expression, at, depth + 1)
            return inner.scale(-1) if isinstance(expr.operator, cst.Minus) else inner
        if isinstance(expr, cst.BinaryOperation):
            return self._binary(expr, at, depth)
        if isinstance(expr, cst.Name):
            return self._name(expr, at, depth)
        if isinstance(expr, cst.Call) and self.ctx.imports.qualify(expr.func) in (N.PALLAS + ".cdiv",) and len(expr.args) == 2:
            num, den = (self.poly(a.value, at, depth + 1) for a in expr.args)
            return self._quotient("ceil", num, den, expr)
        if isinstance(expr, cst.Subscript):
            return self._shape_dim(expr, at, depth)
        if isinstance(expr, cst.Attribute):
            return self._attribute(expr, at)
        if isinstance(expr, cst.Call):
            inlined = self._inlined(expr, at, depth)
            if inlined is not None:
                return inlined
        return self._opaque(expr, at)

    def _inlined(self, call: cst.Call, at: cst.CSTNode, depth: int) -> Optional[Poly]:
        """A call of the module's own integer helper, `def cdiv(a, b): return (a + b - 1) // b`
        (one `return` reading only its positional parameters, the name bound by that `def` alone):
        its return expression with the call's arguments for the parameters."""
        fn = self.ctx.resolve_def(call.func.value, at) if isinstance(call.func, cst.Name) else None
        if (fn is None or isinstance(fn.params.star_arg, (cst.Param, cst.ParamStar)) or fn.params.kwonly_params
                or fn.params.star_kwarg is not None or fn.decorators or fn.asynchronous is not None):
            return None
        params = positional_names(fn)
        body = fn.body.body if isinstance(fn.body, cst.IndentedBlock) else ()
        if (len(params) != len(call.args) or any(a.keyword or a.star for a in call.args) or len(body) != 1
                or not isinstance(body[0], cst.SimpleStatementLine) or not isinstance(body[0].body[0], cst.Return)
                or body[0].body[0].value is None):
            return None
        scope = next((sc for sc in self.ctx.scope_chain(at) if call.func.value in self._scope_bindings(sc)), None)
        if scope is None or len(self._scope_bindings(scope)[call.func.value]) != 1:
            return None
        ret = body[0].body[0].value
        if not {n.value for n in _names(ret)} <= set(params):
            return None
        args = {f"{name}@{id(fn)}": self.poly(a.value, at, depth + 1) for name, a in zip(params, call.args)}
        out = self._substituted(self.poly(ret, ret, depth + 1), args)
        single = out.monomial()
        if single is not None and single[1] == 1 and len(single[0]) == 1 and self.atoms[single[0][0]].kind != "value":
            self.atoms[single[0][0]].text = self.ctx.code(call)  # the quotient as the code spells it: `cdiv(n, bd)`
        return out

    def _substituted(self, p: Poly, args: dict[str, Poly]) -> Poly:
        out = Poly()
        for monomial, coeff in p.terms:
            term = Poly.const(coeff)
            for key in monomial:
                atom = self.atoms.get(key)
                if key in args:
                    term = term * args[key]
                elif atom is not None and atom.kind != "value":
                    num, den = self._substituted(atom.num, args), self._substituted(atom.den, args)
                    term = term * self.quotient(atom.kind, num, den, atom.text)
                else:
                    term = term * Poly.atom(key)
            out = out + term
        return out

    def _binary(self, expr: cst.BinaryOperation, at: cst.CSTNode, depth: int) -> Poly:
        left = self.poly(expr.left, at, depth + 1)
        right = self.poly(expr.right, at, depth + 1)
        op = expr.operator
        if isinstance(op, cst.Add):
            return left + right
        if isinstance(op, cst.Subtract):
            return left - right
        if isinstance(op, cst.Multiply):
            return left * right
        if isinstance(op, cst.FloorDivide):
            return self._quotient("floor", left, right, expr)
        a, b = left.constant(), right.constant()
        if isinstance(op, cst.Modulo) and a is not None and b:
            return Poly.const(a % b)
        return self._opaque(expr, at)

    def _quotient(self, kind: str, num: Poly, den: Poly, expr: cst.BaseExpression) -> Poly:
        return self.quotient(kind, num, den, self.ctx.code(expr))

    def quotient(self, kind: str, num: Poly, den: Poly, text: str) -> Poly:
        """`num // den` ("floor") or `pl.cdiv(num, den)` ("ceil"), spelled `text`."""
        a, b = num.constant(), den.constant()
        if a is not None and b:
            return Poly.const(a // b if kind == "floor" else -(-a // b))
        exact = num.exact_quotient(den)
        if exact is not None:
            return exact
        if negative(den):  # `a // -b` divides `-a` by `b`: an atom's divisor stays positive
            num, den = num.scale(-1), den.scale(-1)
        if negative(num):
            # `-a // b` is `-pl.cdiv(a, b)` (and a ceil of `-a` is minus a floor): the atom the
            # rest of the module takes as positive is the quotient of `a`, spelled `-(text)`
            flipped = "ceil" if kind == "floor" else "floor"
            return self.quotient(flipped, num.scale(-1), den, f"-({text})").scale(-1)
        if kind == "floor" and positive(den):
            kind, num, shift, text = rounded_up(num, den, text)
            if shift:
                return self.quotient(kind, num, den, text) - Poly.const(shift)
        key = f"{kind}({_key(num)} / {_key(den)})"
        self.atoms.setdefault(key, Atom(key, text, kind, num, den))
        return Poly.atom(key)

    def _name(self, name: cst.Name, at: cst.CSTNode, depth: int) -> Poly:
        for scope in self.ctx.scope_chain(at):
            binds = self._scope_bindings(scope).get(name.value, [])
            is_param = name.value in _param_names(scope)
            count = binding_count(self.ctx, scope, name.value)  # `from m import bn` alone makes it local
            if not binds and not is_param and not count:
                continue
            if count != len(binds):
                return self._opaque(name, at)  # `case bn:`, `from m import bn`: a binding the list does not place
            if is_param:  # rebound (`block_q = min(block_q, seq_len)`): the binding that reaches the read
                settled = settled_binding(self.ctx, scope, name, binds, at, param=True) if binds else -1
                if settled is None:
                    return self._opaque(name, at)
                return self._atom(f"{name.value}@{id(scope)}" + (f"#after{settled}" if settled >= 0 else ""), name.value)
            value = single_binding(binds)
            if isinstance(value, Unpack):
                return self._unpacked(value, name, at, scope)
            if value is None:
                settled = settled_binding(self.ctx, scope, name, binds, at)
                if settled is not None:  # `if big: bn = 128 else: bn = 16`, then reads: one value
                    return self._atom(f"{name.value}@{id(scope)}#after{settled}", name.value)
                return self._opaque(name, at)
            return self.poly(value, value, depth + 1)
        return self._atom(f"{name.value}@module", name.value)  # an import or a builtin

    def _unpacked(self, value: Unpack, name: cst.Name, at: cst.CSTNode, scope: Scope) -> Poly:
        """`m, n = x.shape`: `m` is `x.shape[0]`; `(bm,) = block_shape`, run once (in no loop): one value, bm's own."""
        inner = value.value
        if isinstance(inner, cst.Attribute) and inner.attr.value == "shape" and isinstance(inner.value, cst.Name):
            head = self._head_key(inner.value, inner)
            if head is not None:
                return self._atom(f"{head}.shape[{value.index}]", f"{self.ctx.code(inner)}[{value.index}]")
        if not any(isinstance(a, (cst.For, cst.While)) for a in self.ctx.ancestors(inner)):
            return self._atom(f"{name.value}@{id(scope)}", name.value)
        return self._opaque(name, at)

    def _shape_dim(self, sub: cst.Subscript, at: cst.CSTNode, depth: int) -> Poly:
        base = sub.value
        if (
            isinstance(base, cst.Attribute)
            and base.attr.value == "shape"
            and isinstance(base.value, (cst.Name, cst.Attribute))
            and len(sub.slice) == 1
            and isinstance(sub.slice[0].slice, cst.Index)
        ):
            dim = self.poly(sub.slice[0].slice.value, at, depth + 1).constant()
            head = self._array_head(base.value, at)
            rank = self.ranks(head) if dim is not None and dim < 0 and head is not None and self.ranks is not None else None
            if rank is not None and rank + dim >= 0:  # type: ignore[operator]
                dim += rank  # type: ignore[operator]
            if dim is not None and dim >= 0 and head is not None:
                return self._atom(f"{head}.shape[{dim}]", self.ctx.code(sub))
        elif isinstance(base, cst.Name) and len(sub.slice) == 1 and isinstance(sub.slice[0].slice, cst.Index):
            # An entry of a sequence nothing can change (`grid_[0]`, rebinding aside): one value.
            item = self.poly(sub.slice[0].slice.value, at, depth + 1).constant()
            head = self._head_key(base, at, settled=True)
            if item is not None and item >= 0 and head is not None and self._indexed_only(self.ctx.scope_of(at), base.value):
                return self._atom(f"{head}[{item}]", self.ctx.code(sub))
        return self._opaque(sub, at)

    def _attribute(self, expr: cst.Attribute, at: cst.CSTNode) -> Poly:
        """`bs.bm` (a block-size record's field, `self.block_q`): one value wherever the name means
        the same binding, when the module writes no attribute of that name (`bs.bm = ...`,
        `setattr(bs, ...)`) and no field of that name through any name: the grid's `r // bs.bm`
        and the block `bs.bm` are then the same size."""
        base = expr.value
        head = self._head_key(base, at) if isinstance(base, cst.Name) else None
        if head is None or field_may_change(self._attribute_written(), base.value, expr.attr.value):
            return self._opaque(expr, at)
        return self._atom(f"{head}.{expr.attr.value}", self.ctx.code(expr))

    def _array_head(self, expr: cst.BaseExpression, at: cst.CSTNode) -> Optional[str]:
        """A key for the array `x` or `state.grad` stands for at `at`: a field of a record (an
        unpacked leaf state) is one array wherever its name means one binding, as `_attribute`
        reads its other fields, when nothing in the module writes that field."""
        if isinstance(expr, cst.Name):
            return self._head_key(expr, at)
        if not (isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name)):
            return None
        head = self._head_key(expr.value, at)
        if head is None or field_may_change(self._attribute_written(), expr.value.value, expr.attr.value):
            return None
        return f"{head}.{expr.attr.value}"

    def _attribute_written(self) -> frozenset[str]:
        if self._written is None:
            self._written = attribute_written(self.ctx.module)
        return self._written

    def array_key(self, name: cst.Name, at: cst.CSTNode) -> Optional[str]:
        """The key of the array `name` stands for at `at` (see `ranks`)."""
        return self._head_key(name, at)

    def _head_key(self, name: cst.Name, at: cst.CSTNode, settled: bool = False) -> Optional[str]:
        """A key for the array `name` stands for where `at` is: its scope when it is bound once
        (with `settled`, also the binding that settles it before `at`, see read_bindings.settled_binding)."""
        for scope in self.ctx.scope_chain(at):
            binds = self._scope_bindings(scope).get(name.value, [])
            is_param = name.value in _param_names(scope)
            if binds or is_param or binding_count(self.ctx, scope, name.value):
                if binding_count(self.ctx, scope, name.value) != len(binds):
                    return None  # `case x:`, `from m import x`: a binding the list does not place
                if len(binds) + is_param == 1:
                    return f"{name.value}@{id(scope)}"
                reaching = reaching_binding(self.ctx, scope, binds, at)
                if reaching is None and settled:
                    after = settled_binding(self.ctx, scope, name, binds, at, param=is_param)
                    return None if after is None else f"{name.value}@{id(scope)}#after{after}"
                return None if reaching is None else f"{name.value}@{id(scope)}#{reaching}"
        return f"{name.value}@module"

    def _atom(self, key: str, text: str) -> Poly:
        self.atoms.setdefault(key, Atom(key, text))
        return Poly.atom(key)

    def _opaque(self, expr: cst.BaseExpression, at: cst.CSTNode) -> Poly:
        """An expression nothing is known about: its own atom, equal to no other mention; but an
        expression built for the call site (in no tree) that only reads names, attributes and
        constant subscripts is one value wherever it is read at `at`."""
        key = f"?{id(expr)}"
        if self.ctx.parent(expr) is None and self.ctx.parent(at) is not None and plain_read(expr):
            key = f"?{self.ctx.code(expr)}@{id(at)}"
        self.atoms.setdefault(key, Atom(key, self.ctx.code(expr), node=expr))
        return Poly.atom(key)

    def _indexed_only(self, scope: Scope, name: str) -> bool:
        key = (id(scope), name)
        if key not in self._indexed:  # a walk of the whole scope: once per name, not per entry read
            self._indexed[key] = indexed_only(self.ctx, scope, name)
        return self._indexed[key]

    def _scope_bindings(self, scope: Scope) -> dict:
        found = self._bindings.get(id(scope))
        if found is None:
            found = self._bindings[id(scope)] = scope_bindings(self.ctx, scope)
        return found

    def text(self, p: Poly) -> str:
        """Source-like text of a polynomial, for messages."""
        parts = []
        for m, c in p.terms:
            atoms = " * ".join(self.atoms[k].text if k in self.atoms else k for k in m)
            parts.append(str(c) if not atoms else atoms if c == 1 else f"{c} * {atoms}")
        return " + ".join(parts).replace("+ -", "- ") or "0"


def _names(node: cst.CSTNode) -> list[cst.Name]:
    """Names read in an expression (not attribute names)."""
    if isinstance(node, cst.Name):
        return [node]
    if isinstance(node, cst.Attribute):
        return _names(node.value)
    return [n for child in node.children for n in _names(child)]


def _param_names(scope: Scope) -> set[str]:
    if isinstance(scope, (cst.FunctionDef, cst.Lambda)):
        p = scope.params
        out = {x.name.value for x in [*p.posonly_params, *p.params, *p.kwonly_params]}
        for star in (p.star_arg, p.star_kwarg):
            if isinstance(star, cst.Param):
                out.add(star.name.value)
        return out
    return set()


def _key(p: Poly) -> str:
    return repr(p.terms)
