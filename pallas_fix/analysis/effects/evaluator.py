"""The evaluator behind the effects model (analysis.effects.model): runs kernel code abstractly and
records every ref write it performs, through any call.

It follows values, not spellings: a ref handed to a helper (module-level, kernel-local, a closure,
a lambda, a `functools.partial`, a function returned by another), a view `x_ref.at[...]`, a tuple
of refs, a function passed to `lax.cond` or stored in a list. Calls it can see into are run with
their parameters bound to the arguments; library calls are looked up in analysis.effects.calls;
any other call handed a ref may write it (an "unknown" write naming the call), and any function
handed to code it cannot see may be run with anything that code was given.

Control flow is not followed: every branch and loop body counts (what may be written). Reading
the value of a name evaluates its bindings quietly (`quiet`): a call's effects are recorded
where the call runs, once, not where its result is read.
"""

from __future__ import annotations

import weakref
from typing import Iterable, Optional

import libcst as cst

from pallas_fix.analysis.effects import calls as C
from pallas_fix.analysis.values.bindings import Unpack, scope_bindings
from pallas_fix.analysis.context import ModuleContext
from pallas_fix.analysis.effects.args import Args, all_values, argument, bind
from pallas_fix.analysis.effects.syntax import comprehension_targets, own_scope_nodes, param_names, subscript_targets
from pallas_fix.analysis.effects.values import NOTHING, AbsVal, Fn, Frame, Root, Write, union
from pallas_fix.core import names as N

_MAX_DEPTH = 24  # calls deep: past this the model stops following (and says a call may write)


# Per module, the names each scope binds (comprehension variables included), computed once: every
# planner's question builds a fresh `Interp`, and the module scope is the costly one.
_SCOPE_NAMES: "weakref.WeakKeyDictionary[ModuleContext, dict[int, dict]]" = weakref.WeakKeyDictionary()


def scope_names(ctx: ModuleContext, scope: cst.CSTNode) -> dict:
    """name -> [(how, node)] for the names `scope`'s own body binds (analysis.values.bindings), with
    comprehension variables as `for` bindings of the scope around them."""
    per_scope = _SCOPE_NAMES.setdefault(ctx, {})
    found = per_scope.get(id(scope))
    if found is None:
        found = dict(scope_bindings(ctx, scope))  # type: ignore[arg-type]
        for target, iterable in comprehension_targets(ctx, scope):
            found.setdefault(target, []).append(("for", iterable))
        per_scope[id(scope)] = found
    return found


class Interp:
    def __init__(self, ctx: ModuleContext) -> None:
        self.ctx = ctx
        self.writes: list[Write] = []
        self.path: list[cst.CSTNode] = []
        self.quiet = 0
        self.active: set[int] = set()
        self.module_frame = Frame(ctx.module, {}, None)
        self._static: dict[int, Frame] = {}

    # -- frames and names ------------------------------------------------------------------------
    def static_frame(self, scope: cst.CSTNode) -> Frame:
        """A frame for a scope that is not running here (a wrapper around the kernel): its
        parameters are Python values the model knows nothing about."""
        if isinstance(scope, cst.Module):
            return self.module_frame
        frame = self._static.get(id(scope))
        if frame is None:
            params = {name: NOTHING for name in param_names(scope)}  # type: ignore[arg-type]
            frame = Frame(scope, params, self.static_frame(self.ctx.scope_of(scope)))
            self._static[id(scope)] = frame
        return frame

    def bindings(self, scope: cst.CSTNode) -> dict:
        return scope_names(self.ctx, scope)

    def binds(self, frame: Optional[Frame], name: str) -> bool:
        while frame is not None:
            if name in frame.params or name in self.bindings(frame.scope):
                return True
            frame = frame.parent
        return False

    def qualified(self, frame: Frame, expr: cst.BaseExpression) -> Optional[str]:
        """The library name `expr` spells through the imports, unless a local name shadows it."""
        head = expr
        while isinstance(head, cst.Attribute):
            head = head.value
        if not isinstance(head, cst.Name) or self.binds(frame, head.value):
            return None
        return self.ctx.imports.qualify(expr)

    def lookup(self, frame: Frame, name: str) -> AbsVal:
        f: Optional[Frame] = frame
        while f is not None:
            if name in f.params:
                return f.params[name]
            binds = self.bindings(f.scope).get(name)
            if binds:
                return self._bound_value(f, name, binds)
            f = f.parent
        q = self.ctx.imports.qualify(cst.Name(name))
        return AbsVal(quals=frozenset({q})) if q else NOTHING

    def _bound_value(self, frame: Frame, name: str, binds: list) -> AbsVal:
        if name in frame.values:
            return frame.values[name]
        if name in frame.busy:
            return NOTHING  # `acc = acc + x`: the other bindings decide
        frame.busy.add(name)
        self.quiet += 1
        try:
            value = union(self._binding_value(frame, how, node) for how, node in binds)
        finally:
            self.quiet -= 1
            frame.busy.discard(name)
        frame.values[name] = value
        return value

    def _binding_value(self, frame: Frame, how: str, node) -> AbsVal:
        if how == "def":
            return self.define(frame, node)
        if how == "augassign":
            return self.value(frame, node.value)
        if isinstance(node, Unpack) or how == "for":
            return self.value(frame, node.value if isinstance(node, Unpack) else node).elements()
        return self.value(frame, node)

    # -- expressions -----------------------------------------------------------------------------
    def value(self, frame: Frame, expr: cst.CSTNode) -> AbsVal:
        if isinstance(expr, cst.Name):
            return NOTHING if expr.value in ("True", "False", "None") else self.lookup(frame, expr.value)
        if isinstance(expr, cst.Attribute):
            return self._attribute(frame, expr)
        if isinstance(expr, cst.Subscript):
            if isinstance(expr.value, cst.Attribute) and expr.value.attr.value == "at":
                base = self.value(frame, expr.value.value)
                return AbsVal(refs=frozenset(Root(r.name, r.view or expr) for r in base.refs), lists=base.lists)
            return self.value(frame, expr.value).elements()
        if isinstance(expr, cst.Call):
            return self.call_value(frame, expr)
        if isinstance(expr, cst.Lambda):
            return AbsVal(fns=frozenset({Fn(expr, frame)}))
        if isinstance(expr, (cst.Tuple, cst.List, cst.Set)):
            return union(self._element(frame, e) for e in expr.elements)
        if isinstance(expr, cst.Dict):
            return union(self.value(frame, e.value).container() for e in expr.elements)
        if isinstance(expr, cst.IfExp):
            return self.value(frame, expr.body) | self.value(frame, expr.orelse)
        if isinstance(expr, cst.BooleanOperation):
            return self.value(frame, expr.left) | self.value(frame, expr.right)
        if isinstance(expr, cst.NamedExpr):
            return self.value(frame, expr.value)
        if isinstance(expr, (cst.ListComp, cst.SetComp, cst.GeneratorExp)):
            return self.value(frame, expr.elt).container()
        if isinstance(expr, cst.DictComp):
            return self.value(frame, expr.value).container()
        return NOTHING

    def _element(self, frame: Frame, el: cst.BaseElement) -> AbsVal:
        value = self.value(frame, el.value)
        return value if isinstance(el, cst.StarredElement) else value.container()

    def _attribute(self, frame: Frame, expr: cst.Attribute) -> AbsVal:
        q = self.qualified(frame, expr)
        if q is not None:
            return AbsVal(quals=frozenset({q}))
        base = self.value(frame, expr.value)
        attr = expr.attr.value
        if attr in ("at", "T", "mT"):
            return base
        if base.quals:
            return AbsVal(quals=frozenset(f"{q}.{attr}" for q in base.quals))
        if base.refs:
            return NOTHING  # `.shape`, `.dtype`: metadata of the ref
        return base  # an attribute of an object that holds refs or functions may be any of them

    # -- running code ----------------------------------------------------------------------------
    def run(self, frame: Frame, roots: Iterable[cst.CSTNode]) -> None:
        """Run statements (or a lambda's body) in `frame`: every assignment to a ref, every call."""
        for node in own_scope_nodes(self.ctx, roots):
            if isinstance(node, cst.FunctionDef):
                self.define(frame, node)
            elif isinstance(node, (cst.Assign, cst.AugAssign, cst.AnnAssign)):
                self._assignment(frame, node)
            elif isinstance(node, cst.Call):
                self.call(frame, node)

    def record(self, roots: Iterable[Root], how: str, node: cst.CSTNode, callee: Optional[cst.CSTNode] = None) -> None:
        if self.quiet:
            return
        # By name: `roots` is often a frozenset, whose order changes with the process's string
        # hashing, and the first write found is the one a refusal names.
        for root in sorted(roots, key=lambda r: r.name):
            self.writes.append(Write(root.name, how, node, tuple(self.path), root.view, callee))

    def _assignment(self, frame: Frame, node) -> None:
        how = "augassign" if isinstance(node, cst.AugAssign) else "assign"
        targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
        for target in targets:
            for sub in subscript_targets(target):
                self.record(self.value(frame, sub.value).refs, how, sub)

    def define(self, frame: Frame, fn: cst.FunctionDef) -> AbsVal:
        """A `def` statement: its decorators run on the function (innermost first); the value
        the name ends up bound to."""
        value = AbsVal(fns=frozenset({Fn(fn, frame)}))
        for dec in reversed(fn.decorators):
            expr = dec.decorator
            spelled = self.qualified(frame, expr.func if isinstance(expr, cst.Call) else expr)
            if spelled in C.PURE_DECORATORS or spelled in C.PASSTHROUGH:
                continue
            applied = self.value(frame, expr)
            if applied.runs:
                self.run_fns(value, dec)  # `@pl.when(c)` / `@pl.loop(...)`: runs it now
                value = NOTHING
            elif applied.fns:
                value = self.call_fns(applied.fns, ([(value, False)], {}, NOTHING), dec)
            else:
                self.escape(value, NOTHING, dec)  # a decorator the model cannot see may run it
                value = NOTHING
        return value

    # -- calls -----------------------------------------------------------------------------------
    def call_value(self, frame: Frame, call: cst.Call) -> AbsVal:
        """What a call returns, evaluated quietly (its effects are recorded where it runs)."""
        if id(call) in frame.calls:
            return frame.calls[id(call)]
        frame.calls[id(call)] = NOTHING
        self.quiet += 1
        try:
            value = self.call(frame, call)
        finally:
            self.quiet -= 1
        frame.calls[id(call)] = value
        return value

    def call(self, frame: Frame, call: cst.Call) -> AbsVal:
        args = self._arguments(frame, call)
        func = call.func
        if isinstance(func, cst.Attribute) and self.qualified(frame, func) is None:
            obj = self.value(frame, func.value)
            if not obj.quals and not obj.fns:
                return self._method(call, func.attr.value, obj, args)
        callee = self.value(frame, func)
        out, seen = NOTHING, False
        for q in callee.quals:
            out, seen = out | self._library(call, q, args), True
        if callee.fns:
            out, seen = out | self.call_fns(callee.fns, args, call), True
        if callee.runs:
            for value in all_values(args):
                self.run_fns(value, call)
            seen = True
        if seen:
            return out
        if isinstance(func, cst.Name) and func.value in C.BUILTINS and not self.binds(frame, func.value):
            self._escape_args(args, call)
            return union(v.container() for v in all_values(args)) if func.value in C.CONTAINER_BUILTINS else NOTHING
        return self._unknown(call, callee, args)

    def _arguments(self, frame: Frame, call: cst.Call) -> Args:
        positional: list[tuple[AbsVal, bool]] = []
        keywords: dict[str, AbsVal] = {}
        rest = NOTHING
        for a in call.args:
            value = self.value(frame, a.value)
            if a.keyword is not None:
                keywords[a.keyword.value] = value
            elif a.star == "**":
                rest = rest | value.elements()
            else:
                positional.append((value, a.star == "*"))
        return positional, keywords, rest

    def _library(self, call: cst.Call, q: str, args: Args) -> AbsVal:
        positional, keywords, _ = args
        if q in N.PARTIAL:
            fn = positional[0][0] if positional else NOTHING
            bound = tuple(v for v, _ in positional[1:])
            kws = tuple(keywords.items())
            partials = frozenset(Fn(f.node, f.frame, f.bound + bound, f.bound_kw + kws) for f in fn.fns)
            rest = union(v for v, _ in positional[1:]) | union(keywords.values())
            # A partial of something the model cannot call still holds the refs it was given.
            return AbsVal(fns=partials) if partials else rest.anything()
        writer = C.writer(q)
        if writer is not None:
            for pos, kw in writer.positions:
                written = argument(args, pos, kw)
                self.record(written.refs | written.lists, writer.how, call)
            self._escape_args(args, call)
            return NOTHING
        if q in C.DESCRIPTORS:
            dests = union(argument(args, pos, kw) for pos, kw in C.DESCRIPTORS[q])
            return AbsVal(pending=dests.refs | dests.lists)
        if q in C.RUNS_DECORATED:
            return AbsVal(runs=True)
        if q in C.PASSTHROUGH:
            return AbsVal(fns=union(all_values(args)).fns)
        if C.is_pure(q):
            self._escape_args(args, call)
            return NOTHING
        return self._unknown(call, NOTHING, args)

    def _method(self, call: cst.Call, name: str, obj: AbsVal, args: Args) -> AbsVal:
        """`obj.name(...)` on a value that is no library name or function."""
        if obj.pending and name in C.DESCRIPTOR_METHODS:
            self.record(obj.pending, "copy", call)
        if name == "pop" and not any(v.every_ref for v in all_values(args)):
            return AbsVal(refs=obj.refs | obj.lists)  # `rest.pop(0)` of refs unpacked from `*refs`: one of them, nothing written
        if obj.refs:
            if name in C.REF_VIEW_METHODS:
                return AbsVal(refs=obj.refs)
            if name in C.REF_WRITE_METHODS:
                self.record(obj.refs, "store", call)
                return NOTHING
            if name not in C.REF_READ_METHODS:
                return self._unknown(call, AbsVal(refs=obj.refs), args)
        if any(v.every_ref for v in all_values(args)):
            return self._unknown(call, obj, args)  # a method of an unknown object, handed a ref
        self._escape_args(args, call)
        return obj if obj.lists else NOTHING

    def _unknown(self, call: cst.Call, callee: AbsVal, args: Args) -> AbsVal:
        """A call the model cannot see into: it may write every ref it is given (or that the
        callee holds), run every function it is given, and return any of them."""
        given = callee | union(all_values(args))
        self.record(given.every_ref, "unknown", call, call.func)
        self._escape_args(args, call, extra=callee)
        return given.anything()

    # -- running functions -----------------------------------------------------------------------
    def call_fns(self, fns: Iterable[Fn], args: Args, node) -> AbsVal:
        return union(self.invoke(fn, bind(fn, args, self._default), node) for fn in fns)

    def run_fns(self, value: AbsVal, node) -> None:
        """Run the functions `value` may be, with no arguments (`@pl.when(c)`)."""
        self.call_fns(value.fns, ([], {}, NOTHING), node)

    def escape(self, value: AbsVal, given: AbsVal, node) -> None:
        """Functions handed to code the model cannot see may run with anything it was given."""
        for fn in value.fns:
            self.invoke(fn, {name: given.anything() for name in param_names(fn.node)}, node)

    def _escape_args(self, args: Args, node, extra: AbsVal = NOTHING) -> None:
        values = list(all_values(args)) + [extra]
        given = union(values)
        for value in values:
            self.escape(value, given, node)

    def _default(self, fn: Fn, expr: cst.BaseExpression) -> AbsVal:
        return self.value(fn.frame, expr)  # defaults are evaluated where the function is defined

    def invoke(self, fn: Fn, params: dict[str, AbsVal], node: Optional[cst.CSTNode]) -> AbsVal:
        if id(fn.node) in self.active or len(self.path) >= _MAX_DEPTH:
            return NOTHING  # recursion: the invocation in progress records its own effects
        frame = Frame(fn.node, params, fn.frame)
        self.active.add(id(fn.node))
        if node is not None:
            self.path.append(node)
        try:
            if isinstance(fn.node, cst.Lambda):
                self.run(frame, [fn.node.body])
                return self.value(frame, fn.node.body)
            statements = self.ctx.body_statements(fn.node)
            self.run(frame, statements)
            returns = [n for n in own_scope_nodes(self.ctx, statements) if isinstance(n, cst.Return) and n.value is not None]
            return union(self.value(frame, r.value) for r in returns)
        finally:
            self.active.discard(id(fn.node))
            if node is not None:
                self.path.pop()
