"""Kernel parameters a rewrite leaves unread go, with what binds them at the pallas_call.

R2 turns `x_ref[:, pl.ds(k * bk, bk)]` into `x_ref[...]`, so a kernel that took `bk` only to
slice (`def kernel(x_ref, y_ref, o_ref, *, bk)`, `functools.partial(kernel, bk=bk)`) keeps a
parameter nothing reads. It is removed together with its `functools.partial` keyword (and the
`partial` itself when nothing else is bound), as a hand-written kernel would not carry it:

    def matmul_kernel(x_ref, y_ref, o_ref, acc_ref):
    ...
        pl.pallas_call(matmul_kernel, ...)

Only a parameter the kernel read before the rewrite and reads nowhere after (not in a nested
function either) goes, only when the kernel is a `def` named once in the module and referenced
once, as the first argument of one `functools.partial` call that binds the parameter by keyword,
and only when the bound value is a plain name, attribute or literal (dropping it runs nothing).
"""

from __future__ import annotations

from typing import Optional

import libcst as cst

from pallas_fix.analysis.tree_index import child_nodes
from pallas_fix.rewrite.text.syntax import code

_LEAVES = (cst.Name, cst.Integer, cst.Float, cst.SimpleString)


def _pure(expr: cst.BaseExpression) -> bool:
    """An argument whose removal drops no effect: names, literals, attributes, arithmetic and
    subscripts of them (`nb=x.shape[0] // BM`), tuples of them."""
    if isinstance(expr, _LEAVES):
        return True
    if isinstance(expr, cst.Attribute):
        return _pure(expr.value)
    if isinstance(expr, cst.BinaryOperation):
        return _pure(expr.left) and _pure(expr.right)
    if isinstance(expr, cst.UnaryOperation):
        return _pure(expr.expression)
    if isinstance(expr, cst.Subscript):
        return _pure(expr.value) and all(
            isinstance(e.slice, cst.Index) and _pure(e.slice.value) for e in expr.slice
        )
    if isinstance(expr, cst.Tuple):
        return all(not isinstance(e, cst.StarredElement) and _pure(e.value) for e in expr.elements)
    return False


def drop_dead_params(before: cst.Module, after: cst.Module, kernel: str, passed: bool = False) -> cst.Module:
    """`after` without the parameters of `kernel` the rewrite made dead (see the module doc).
    `passed`: the kernel reaches its pallas_call as an argument of a helper's call (discovery
    followed it there), so a partial passed as a call's argument is what that pallas_call runs."""
    partial = _only_partial(after, kernel, passed)  # first: most kernels have none, and walks are slow
    if partial is None:
        return after
    old_def, new_def = _only_def(before, kernel), _only_def(after, kernel)
    if old_def is None or new_def is None:
        return after
    bound = {a.keyword.value: a for a in partial.args[1:] if a.keyword is not None}
    if len(bound) != len(partial.args) - 1:
        return after  # positional arguments bound too: the parameters' positions matter
    was_read, is_read = _reads(old_def), _reads(new_def)
    dead = {
        p.name.value for p in _named_params(new_def)
        if p.name.value in was_read and p.name.value not in is_read and p.name.value in bound
        and _pure(bound[p.name.value].value)
    }
    if not dead:
        return after
    head = code(partial.func).split(".")[0]  # `functools` or `partial`
    return _drop_unused_import(after.visit(_Drop(kernel, dead, new_def, partial)), head)


def _drop_unused_import(module: cst.Module, name: str) -> cst.Module:
    """Remove a top-level `import functools` / `from functools import partial` that only the
    removed `partial` used."""
    if _name_reads(module, name):
        return module
    body = []
    comments: list = []  # the comments above a removed import stay, on the next statement
    for stmt in module.body:
        small = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 else None
        names = small.names if isinstance(small, (cst.Import, cst.ImportFrom)) else None
        if isinstance(names, (list, tuple)) and len(names) == 1 and names[0].asname is None \
                and code(names[0].name) == name and (isinstance(small, cst.Import) or code(small.module) == "functools"):
            comments += [l for l in stmt.leading_lines if l.comment is not None]
            continue
        if comments and hasattr(stmt, "leading_lines"):
            stmt = stmt.with_changes(leading_lines=[*comments, *stmt.leading_lines])
            comments = []
        body.append(stmt)
    return module.with_changes(body=body) if len(body) != len(module.body) else module


def _name_reads(module: cst.Module, name: str) -> bool:
    """`name` read anywhere outside import statements."""
    stack: list[cst.CSTNode] = [module]
    while stack:
        n = stack.pop()
        if isinstance(n, (cst.Import, cst.ImportFrom)):
            continue
        if isinstance(n, cst.Name) and n.value == name:
            return True
        stack.extend(child_nodes(n))
    return False


def _only_def(module: cst.Module, name: str) -> Optional[cst.FunctionDef]:
    found = [n for n in _walk(module) if isinstance(n, cst.FunctionDef) and n.name.value == name]
    return found[0] if len(found) == 1 else None


def _only_partial(module: cst.Module, name: str, passed: bool = False) -> Optional[cst.Call]:
    """The one `functools.partial(name, ...)` / `partial(name, ...)` call, when `name` is read
    nowhere else."""
    reads, calls, defs = [], [], []
    for n in _walk(module):  # one walk: each asks every node for its children anew
        if isinstance(n, cst.Name) and n.value == name:
            reads.append(n)
        elif isinstance(n, cst.Call) and n.args and isinstance(n.args[0].value, cst.Name) and n.args[0].value.value == name \
                and code(n.func) in ("functools.partial", "partial"):
            calls.append(n)
        elif isinstance(n, cst.FunctionDef) and n.name.value == name:
            defs.append(n)
    if len(calls) != 1 or len(reads) != len(defs) + 1:
        return None
    return calls[0] if _runs_as_the_kernel(module, calls[0]) or (passed and _an_argument(module, calls[0])) else None


def _an_argument(module: cst.Module, partial: cst.Call) -> bool:
    """The partial is written as an argument of a call (the helper's, that runs it)."""
    return any(isinstance(c, cst.Call) and any(a.value is partial for a in c.args) for c in _walk(module))


def _runs_as_the_kernel(module: cst.Module, partial: cst.Call) -> bool:
    """The partial is what a pallas_call runs: its first argument, directly or through a name
    bound once to it and read once, there (not bound again by another partial)."""
    kernel_args = [c.args[0].value for c in _walk(module) if isinstance(c, cst.Call) and c.args
                   and code(c.func).split(".")[-1] == "pallas_call"]
    if any(a is partial for a in kernel_args):
        return True
    for node in _walk(module):
        if isinstance(node, cst.Assign) and node.value is partial and len(node.targets) == 1:
            target = node.targets[0].target
            if not isinstance(target, cst.Name):
                return False
            reads = [n for n in _walk(module) if isinstance(n, cst.Name) and n.value == target.value]
            return len(reads) == 2 and any(isinstance(a, cst.Name) and a.value == target.value for a in kernel_args)
    return False


def _named_params(fn: cst.FunctionDef) -> list[cst.Param]:
    return [*fn.params.params, *fn.params.kwonly_params]


def _reads(fn: cst.FunctionDef) -> set[str]:
    """Every name the body mentions, nested functions included (a conservative "might read")."""
    return {n.value for n in _walk(fn.body) if isinstance(n, cst.Name)}


def _walk(node: cst.CSTNode):
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        # child_nodes is `n.children` (the same list) without LibCST's visitor machinery, which
        # rebuilt every node of a large module once per plan the forwarded screen applies.
        stack.extend(child_nodes(n))


class _Drop(cst.CSTTransformer):
    def __init__(self, kernel: str, dead: set[str], fn: cst.FunctionDef, partial: cst.Call) -> None:
        self.kernel, self.dead, self.fn, self.partial = kernel, dead, fn, partial

    def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
        if original is not self.fn:
            return updated
        ps = updated.params
        params = [p for p in ps.params if p.name.value not in self.dead]
        kwonly = [p for p in ps.kwonly_params if p.name.value not in self.dead]
        star = ps.star_arg
        if not kwonly and isinstance(star, cst.ParamStar):
            star = cst.MaybeSentinel.DEFAULT  # a bare `*` needs a keyword-only parameter after it
        return updated.with_changes(params=ps.with_changes(
            params=_last_without_comma(params, ps), kwonly_params=_last_without_comma(kwonly, ps), star_arg=star,
        ))

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        if original is not self.partial:
            return updated
        args = [a for a in updated.args[1:] if a.keyword is None or a.keyword.value not in self.dead]
        if not args:
            return updated.args[0].value
        args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        return updated.with_changes(args=[updated.args[0], *args])


def _last_without_comma(params: list[cst.Param], ps: cst.Parameters) -> list[cst.Param]:
    """Drop the comma after what is now the last parameter, unless more parameters follow."""
    if not params:
        return params
    return params[:-1] + [params[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)]
