"""Full sizes passed in as static keyword arguments, where no grid expression can say them.

A kernel that reads `x_ref.shape[0]` of a dim the rewrite blocks (a mean's `/ n_rows`) would read
the block's size afterwards. When the blocks do not provably tile the dim (rewrite.extents.extent_reads
writes `pl.num_programs(axis) * x_ref.shape[0]` when they do), the size the kernel saw is bound at
the pallas_call instead, as a `functools.partial` keyword, and the kernel reads the parameter:

    def kernel(x_ref, o_ref, *, block_rows, n_rows):      # was: n_rows, n_cols = x_ref.shape
        n_cols = x_ref.shape[1]
    pl.pallas_call(functools.partial(kernel, block_rows=block_rows, n_rows=x.shape[0]), ...)

The value is the call site's expression for that dim of the kernel's view (CallSite.
kernel_shape_dim: the wrapper array's `.shape[d]`, an out_shape entry or a block size), a Python
int under jit, evaluated where the pallas_call is. A name the kernel binds once to the read (an
assignment or an unpacking) becomes the parameter; other reads get a fresh `<ref>_rows`-like name.
"""

from __future__ import annotations

from collections import Counter
from typing import Optional

import libcst as cst

from pallas_fix.analysis.context import walk
from pallas_fix.analysis.relays.splat_dict import dict_keys
from pallas_fix.core import names as N
from pallas_fix.core.plans import Refuse
from pallas_fix.rewrite.text import imports
from pallas_fix.rewrite.callsite.reading import CallSite
from pallas_fix.rewrite.text.edits import Edit, remove_statement
from pallas_fix.rewrite.text.scopes import bindings, fresh_namer, param_names
from pallas_fix.rewrite.text.statements import siblings_of
from pallas_fix.rewrite.text.syntax import code, followed_comma, uncommented

FUNCTOOLS = imports.Module("functools", imports.NewImport("functools"), dotted=False)
_DIM_WORDS = {0: "rows", 1: "cols"}


class ExtentParams:
    """The keyword parameters one plan adds to its kernel, one per (ref, dim) whose full size the
    kernel reads, and the edits that add them (kernel signature, pallas_call, import)."""

    def __init__(self, cs: CallSite) -> None:
        self.cs, self.ctx, self.site = cs, cs.ctx, cs.site
        self.kernel = cs.site.kernel
        self.names: dict[tuple[str, int], str] = {}
        self.values: dict[str, str] = {}  # parameter -> its call-site value
        self.edits: dict[cst.CSTNode, Edit] = {}
        self._bound = Counter(bindings(self.kernel.body, nested=True)) if self.kernel is not None else Counter()
        self._fresh = fresh_namer({n.value for n in walk(self.kernel) if isinstance(n, cst.Name)} | set(self.site.partial_kwargs))

    def name_for(self, ref: str, dim: int) -> str:
        """The parameter holding the full size of `ref`'s dim `dim` (a fresh name the first time)."""
        key = (ref, dim)
        if key not in self.names:
            stem = ref[:-4] if ref.endswith("_ref") and len(ref) > 4 else ref
            self._add(key, self._fresh(f"{stem}_{_DIM_WORDS.get(dim, f'dim{dim}')}"))
        return self.names[key]

    def adopt(self, ref: str, dim: int, target: cst.BaseExpression) -> bool:
        """Make the kernel's own name `target` (bound to the read of `ref`'s dim `dim`) the
        parameter: only a plain name bound in the kernel's own scope (bound in a nested function,
        the kernel's other reads of it would be a global's) and nowhere else, no parameter or
        partial keyword already, so every read of it in the kernel meant this size."""
        if (ref, dim) in self.names or not isinstance(target, cst.Name):
            return False
        if self.ctx.enclosing_function(target) is not self.kernel:
            return False
        name = target.value
        if name == "_" or self._bound[name] != 1 or name in self.values or name in self.site.partial_kwargs:
            return False
        if any(name in param_names(fn) for fn in walk(self.kernel) if isinstance(fn, (cst.FunctionDef, cst.Lambda))):
            return False
        if any(isinstance(n, (cst.Global, cst.Nonlocal)) and any(x.name.value == name for x in n.names) for n in walk(self.kernel)):
            return False
        self._add((ref, dim), name)
        return True

    def remove_assignment(self, assign: cst.Assign) -> None:
        """Drop `n = x_ref.shape[0]` once `n` is a parameter. The Assign itself goes too, so that a
        planner moving the statement (into `_finalize`) moves nothing that rebinds `n`."""
        line = self.ctx.parent(assign)
        self.edits[assign] = lambda _n: cst.RemovalSentinel.REMOVE
        if isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1:
            remove_statement(self.edits, line, siblings_of(self.ctx, line))  # its comments stay

    def _add(self, key: tuple[str, int], name: str) -> None:
        value = self.cs.kernel_shape_dim(*key)
        if value is None:
            raise Refuse(
                f"`{key[0]}.shape[{key[1]}]` is read in the kernel and the blocks do not provably tile dim {key[1]}; "
                "its full size cannot be written at the pallas_call: pass it to the kernel as a static argument "
                "(a functools.partial keyword) and read that instead"
            )
        self.names[key] = name
        self.values[name] = code(value)

    def build(self) -> dict[cst.CSTNode, Edit]:
        """The edits: the reads' (collected by the caller), the kernel's new keyword-only
        parameters, the pallas_call's partial keywords, and `import functools` if needed."""
        if not self.values:
            return dict(self.edits)
        expr = self.site.kernel_expr
        if self.site.form == "decorator" or expr is None or self.kernel is None:
            raise Refuse("the kernel's full size would be passed as a functools.partial keyword, but the pallas_call "
                         "decorates the kernel; call pl.pallas_call(kernel, ...) instead")
        partial, new_import = self._partial_spelling()  # new_import: `import functools`
        kws = list(self.values.items())
        edits = dict(self.edits)
        params = self.kernel.params
        edits[params] = lambda p: _with_kwonly(p, [n for n, _ in kws])
        bound = self._bound_partial(expr, kws)
        if bound is not None:  # `kernel = functools.partial(body, ...)` just before: add them there
            expr = bound
        if isinstance(expr, cst.Lambda) and isinstance(expr.body, cst.Call):  # `lambda *refs: kernel(*refs, bs=8)`
            _refuse_shadowed(expr, kws)
            edits[expr.body] = lambda c: _with_keywords(c, kws)
        elif isinstance(expr, cst.Call) and self.ctx.imports.is_(expr.func, N.PARTIAL):
            if any(a.star == "*" or _may_hold(self.ctx, a, expr, kws) for a in expr.args if a.star):
                raise Refuse(f"the kernel's full size would be passed as a keyword of `{code(expr.func)}(...)`, which also "
                             "binds `*` / `**` arguments that might hold the same name; bind them by name")
            edits[expr] = lambda c: _with_keywords(c, kws)
        else:
            edits[expr] = lambda e, f=partial: cst.parse_expression(f"{f}({code(e)}, " + ", ".join(f"{n}={v}" for n, v in kws) + ")")
            if new_import is not None:
                edits[self.ctx.module] = _with_functools_import
        return edits

    def _bound_partial(self, expr: cst.BaseExpression, kws: list[tuple[str, str]]) -> Optional[cst.Call]:
        """The `functools.partial(...)` a kernel name passed to the pallas_call is bound to, where
        the keywords can join it as an expert would write them (rather than wrapping the name in a
        second partial): the name's one binding, read by this call alone, a statement of the
        call's own block before it, and nothing between them (nor a `nonlocal` / `global`)
        rebinding a name the keywords' values read; else None."""
        ctx, call = self.ctx, self.site.call
        scope = ctx.enclosing_function(call)
        if not isinstance(expr, cst.Name) or scope is None:
            return None
        values = ctx.assignments(expr.value, scope)
        binds = [n for n in bindings(scope, nested=True) if n == expr.value]
        reads = [n for n in walk(scope) if isinstance(n, cst.Name) and n.value == expr.value]
        if len(values) != 1 or len(binds) != 1 or len(reads) != 2 or expr.value in param_names(scope):
            return None
        value = values[0]
        if not isinstance(value, cst.Call) or not ctx.imports.is_(value.func, N.PARTIAL) or any(a.star for a in value.args):
            return None
        stmt, at = ctx.statement_of(value), ctx.statement_of(call)
        block = siblings_of(ctx, stmt)
        if not any(s is at for s in block) or not any(s is stmt for s in block):
            return None
        first, last = next(i for i, s in enumerate(block) if s is stmt), next(i for i, s in enumerate(block) if s is at)
        nodes = [n for _, v in kws for n in walk(cst.parse_expression(v))]
        read = {n.value for n in nodes if isinstance(n, cst.Name)}
        attrs = {n.attr.value for n in nodes if isinstance(n, cst.Attribute)}
        if first >= last or not attrs <= {"shape", "size", "ndim", "dtype"}:
            return None  # another attribute (`self.seq_len`) may change between the two
        between = {n for s in block[first:last] for n in bindings(s, nested=True)} - {expr.value}
        walrus = {n.target.value for n in walk(at) if isinstance(n, cst.NamedExpr) and isinstance(n.target, cst.Name)}
        declared = {a.name.value for n in walk(ctx.module) if isinstance(n, (cst.Nonlocal, cst.Global)) for a in n.names}
        return None if read & (between | walrus | declared) else value

    def _partial_spelling(self) -> tuple[str, Optional[imports.NewImport]]:
        for local, full in self.ctx.imports.bindings.items():
            if full == "functools.partial":
                return local, None
        found = imports.spelling(self.ctx, FUNCTOOLS)
        if found.clashes(self.ctx):
            raise Refuse("the full size would be passed with functools.partial, but the name `functools` is taken")
        return f"{found.text}.partial", found.add


def _with_functools_import(module: cst.Module) -> cst.Module:
    """`import functools` first among the module's imports (after `from __future__`), in a group
    of its own, where a standard-library import goes; libcst's AddImportsVisitor appends it
    after `jax`'s."""
    body = list(module.body)
    for n, stmt in enumerate(body):
        small = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) else None
        future = isinstance(small, cst.ImportFrom) and small.module is not None and code(small.module) == "__future__"
        if isinstance(small, (cst.Import, cst.ImportFrom)) and not future:
            line = cst.parse_statement("import functools\n").with_changes(leading_lines=stmt.leading_lines)
            body[n:n + 1] = [line, stmt.with_changes(leading_lines=[cst.EmptyLine()])]  # its own group
            return module.with_changes(body=body)
    return imports.add_imports(module, [imports.NewImport("functools")])


def _with_kwonly(ps: cst.Parameters, names: list[str]) -> cst.Parameters:
    """`ps` with keyword-only parameters `names` after its own (a bare `*` first if it has none),
    in the signature's own comma style (one per line stays one per line)."""
    params, kwonly, star = list(ps.params), list(ps.kwonly_params), ps.star_arg
    # The comma before the last parameter: a signature that puts its first refs on one line and
    # its keywords one per line (flashoptim's kernels) takes the new ones one per line too.
    commas = [p.comma for p in [*params, *kwonly][:-1] if isinstance(p.comma, cst.Comma)]
    commas = commas or [p.comma for p in [*params, *kwonly] if isinstance(p.comma, cst.Comma)]
    sep = uncommented(commas[-1]) if commas else cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    trailing: object = cst.MaybeSentinel.DEFAULT
    tail = cst.SimpleWhitespace("")
    if ps.star_kwarg is None:  # the comma of what was last (a trailing comma stays trailing)
        if kwonly:
            trailing, kwonly[-1], tail = _kept_comma(kwonly[-1], sep)
        elif not isinstance(star, cst.MaybeSentinel):
            trailing, star, tail = _kept_comma(star, sep)
        elif params:
            trailing, params[-1], tail = _kept_comma(params[-1], sep)
    if isinstance(star, cst.MaybeSentinel):
        star = cst.ParamStar(comma=sep)
    new = [cst.Param(cst.Name(n), comma=sep) for n in names]
    new[-1] = new[-1].with_changes(comma=trailing, whitespace_after_param=tail)
    return ps.with_changes(params=params, star_arg=star, kwonly_params=kwonly + new)


def _kept_comma(node, sep: cst.Comma):
    """(the comma the new last parameter takes, `node` followed by a comma, what followed `node`
    before the `)`): a comma `node` has stays, with any comment after it; the new one copies it
    without the comment; the line break before a hanging signature's `)` moves to the new last."""
    tail = getattr(node, "whitespace_after_param", cst.SimpleWhitespace(""))
    if isinstance(node, cst.Param):
        node = node.with_changes(whitespace_after_param=cst.SimpleWhitespace(""))
    if isinstance(node.comma, cst.Comma):
        return uncommented(node.comma), node.with_changes(comma=followed_comma(node.comma, sep)), tail
    return node.comma, node.with_changes(comma=sep), tail


def _with_keywords(call: cst.Call, kws: list[tuple[str, str]]) -> cst.Call:
    """`functools.partial(kernel, a=1)` with `kws` appended, in the call's own comma style."""
    args = list(call.args)
    sep = next((a.comma for a in args[:-1] if isinstance(a.comma, cst.Comma)), cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    last = args[-1]
    trailing = last.comma
    args[-1] = last.with_changes(comma=sep, whitespace_after_arg=cst.SimpleWhitespace(""))
    equal = cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))
    for n, (name, value) in enumerate(kws):
        final = n == len(kws) - 1
        args.append(cst.Arg(keyword=cst.Name(name), value=cst.parse_expression(value), equal=equal,
                            comma=trailing if final else sep,
                            whitespace_after_arg=last.whitespace_after_arg if final else cst.SimpleWhitespace("")))
    return call.with_changes(args=args)


def _refuse_shadowed(forwarder: cst.Lambda, kws: list[tuple[str, str]]) -> None:
    """A keyword joining a lambda's call is read inside the lambda, where its parameters shadow the
    wrapper's names: `lambda *x: kernel(*x, x_rows=x.shape[0])` would read the tuple of refs."""
    params = param_names(forwarder)
    for name, value in kws:
        shadowed = sorted({n.value for n in walk(cst.parse_expression(value)) if isinstance(n, cst.Name)} & params)
        if shadowed:
            raise Refuse(f"the kernel's full size `{value}` would join the call in `{code(forwarder)}` as `{name}=...`, "
                         f"but `{shadowed[0]}` there names a parameter of the lambda (its refs), not the wrapper's "
                         f"array; rename the lambda's parameter (`lambda *refs: ...`) to get this fix")


def _may_hold(ctx, arg: cst.Arg, partial: cst.Call, kws: list[tuple[str, str]]) -> bool:
    """`**kernel_kwargs` may hand the partial one of the new keywords: unless each dict literal
    the name is bound to (one per arm of a variant's `if`) is known, and none has such a key."""
    keys = dict_keys(ctx, arg, partial)
    return keys is None or any(n in keys for n, _ in kws)

