"""Grid queries that R2 moves into `pl.when` bodies are read at the kernel's top level.

The HLO interpreter (`interpret=True` on CPU) lowers `pl.program_id` / `pl.num_programs` only in
the kernel's own body: inside a `pl.when` branch it raises "MLIR translation rule for primitive
'program_id' not found for platform cpu". Code that moves into `_init`, `_step` or `_finalize`
(what preceded the loop, a guarded body, what followed it) therefore reads them through names
bound before the first of those functions, `pid_0 = pl.program_id(0)`, as JAX's own kernels bind
their grid indices at the top.
"""

from __future__ import annotations

from typing import Optional

import libcst as cst

from pallas_fix.rewrite.text.scopes import fresh_namer
from pallas_fix.rewrite.text.syntax import code

_KINDS = {"program_id": "pid", "num_programs": "nprog"}


def hoist_grid_reads(fn: cst.FunctionDef, pl: str, when_names: set[str]) -> cst.FunctionDef:
    """`fn` with every `pl.program_id(k)` / `pl.num_programs(k)` (a literal axis) inside the
    top-level `pl.when` functions named `when_names` read from a name bound before the first."""
    stmts = list(fn.body.body)
    targets = [n for n, s in enumerate(stmts) if _is_when(s, pl, when_names)]
    calls: dict[str, Optional[str]] = {}
    for n in targets:
        for node in _walk(stmts[n].body):
            key = _grid_read(node, pl)
            if key is not None:
                calls.setdefault(key, None)
    if not calls:
        return fn
    fresh = fresh_namer({x.value for x in _walk(fn) if isinstance(x, cst.Name)})
    for key in calls:
        kind, axis = key.split(".", 1)[1].split("(")[0], key.split("(")[1].rstrip(")")
        calls[key] = fresh(f"{_KINDS[kind]}_{axis.replace('-', 'm')}")
    replacer = _Replacer(pl, calls)  # type: ignore[arg-type]
    for n in targets:
        stmts[n] = stmts[n].with_changes(body=stmts[n].body.visit(replacer))
    first = stmts[targets[0]]
    bindings = [cst.parse_statement(f"{name} = {key}") for key, name in calls.items()]
    bindings[0] = bindings[0].with_changes(leading_lines=first.leading_lines)
    stmts[targets[0]] = first.with_changes(leading_lines=[cst.EmptyLine(indent=False)])
    stmts[targets[0]:targets[0]] = bindings
    return fn.with_changes(body=fn.body.with_changes(body=stmts))


def _is_when(stmt: cst.CSTNode, pl: str, names: set[str]) -> bool:
    return (isinstance(stmt, cst.FunctionDef) and stmt.name.value in names
            and any(code(d.decorator).startswith(f"{pl}.when(") for d in stmt.decorators))


def _grid_read(node: cst.CSTNode, pl: str) -> Optional[str]:
    """`pl.program_id(0)` for such a call with an integer-literal axis, else None."""
    if not (isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)
            and node.func.attr.value in _KINDS and code(node.func.value) == pl and len(node.args) == 1):
        return None
    arg = node.args[0]
    value = arg.value
    literal = isinstance(value, cst.Integer) or (
        isinstance(value, cst.UnaryOperation) and isinstance(value.operator, cst.Minus) and isinstance(value.expression, cst.Integer)
    )
    if arg.keyword is not None or arg.star or not literal:
        return None
    return f"{pl}.{node.func.attr.value}({code(value)})"


def _walk(node: cst.CSTNode):
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(n.children))  # source order: bindings read like the code


class _Replacer(cst.CSTTransformer):
    def __init__(self, pl: str, names: dict[str, str]) -> None:
        self.pl, self.names = pl, names

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        key = _grid_read(updated, self.pl)
        return cst.Name(self.names[key]) if key in self.names else updated
