"""Which module-level functions reach a ``pallas_call``: the entry points examples call.

A function reaches a ``pallas_call`` when its body makes one or names a module function that
does (calls it, jits it, hands it on). Entry points are module-level ``def``s, decorated or not
(``@jax.jit``, ``@functools.partial(jax.jit, static_argnames=...)``), and module-level names bound
to a jitted function (``matmul = jax.jit(_matmul, static_argnums=2)``); methods are out of scope.
Examples call the outermost ones: a public function that no other public entry point reaches,
then, for kernels no such function reaches, the outermost of the rest. Two wrappers of one
kernel (another block size each) are two entry points; a function without parameters (a
script's ``main()``) is none. ``# pallas-fix: entry NAME`` hints restrict the choice to the
hinted names. Read with :mod:`ast` only.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Iterable, Optional

from pallas_fix.verify.examples.ast_reading import FUNCTIONS, calls, literal, positional_params, tail

_JIT_NAMES = {"jit", "pjit", "filter_jit"}


@dataclass(frozen=True)
class EntryPoint:
    """A module-level name an example may call, and the ``def`` its arguments bind."""

    name: str
    node: ast.FunctionDef
    static_names: frozenset[str]  # parameters jit treats as static (static_argnames / argnums)
    line: int  # where the name is bound

    @property
    def public(self) -> bool:
        return not self.name.startswith("_")


def _is_jit(node: ast.AST) -> bool:
    return tail(node) in _JIT_NAMES


def _is_partial(node: ast.AST) -> bool:
    return tail(node) == "partial"


def _static_from_keywords(keywords: list[ast.keyword], fn: ast.FunctionDef) -> frozenset[str]:
    """The parameter names ``static_argnames`` / ``static_argnums`` make static."""
    names: set[str] = set()
    positional = [a.arg for a in positional_params(fn)]
    for kw in keywords:
        value = literal(kw.value)
        values = value if isinstance(value, (tuple, list)) else [value]
        if kw.arg == "static_argnames":
            names.update(v for v in values if isinstance(v, str))
        elif kw.arg == "static_argnums":
            names.update(positional[v] for v in values if isinstance(v, int) and -len(positional) <= v < len(positional))
    return frozenset(names)


def _jit_keywords(node: ast.AST) -> Optional[list[ast.keyword]]:
    """The jit options of a decorator or wrapper head: ``jax.jit`` -> [],
    ``jax.jit(static_argnames=...)`` / ``functools.partial(jax.jit, static_argnames=...)`` -> its
    keywords; None for anything else."""
    if _is_jit(node):
        return []
    if isinstance(node, ast.Call):
        if _is_jit(node.func) and not node.args:
            return list(node.keywords)
        if _is_partial(node.func) and node.args and _is_jit(node.args[0]):
            return list(node.keywords)
    return None


def _decorated_static(fn: ast.FunctionDef) -> frozenset[str]:
    names: set[str] = set()
    for dec in fn.decorator_list:
        keywords = _jit_keywords(dec)
        if keywords:
            names |= _static_from_keywords(keywords, fn)
    return frozenset(names)


def _wrapped_function(value: ast.AST, defs: dict[str, ast.FunctionDef]) -> Optional[tuple[ast.FunctionDef, frozenset[str]]]:
    """``jax.jit(f, static_argnames=...)`` / ``functools.partial(jax.jit, ...)(f)`` /
    ``jax.jit(static_argnames=...)(f)`` -> (f's def, its static names)."""
    if not isinstance(value, ast.Call) or len(value.args) != 1 or not isinstance(value.args[0], ast.Name):
        return None
    fn = defs.get(value.args[0].id)
    if fn is None:
        return None
    if _is_jit(value.func):
        return fn, _decorated_static(fn) | _static_from_keywords(value.keywords, fn)
    keywords = _jit_keywords(value.func)
    if keywords is None or value.keywords:
        return None
    return fn, _decorated_static(fn) | _static_from_keywords(keywords, fn)


def module_entry_candidates(tree: ast.Module) -> dict[str, EntryPoint]:
    """Every module-level ``def`` and jit-wrapped alias, by the name it is bound to (later
    bindings win, as at run time)."""
    defs: dict[str, ast.FunctionDef] = {}
    found: dict[str, EntryPoint] = {}
    for stmt in tree.body:
        if isinstance(stmt, FUNCTIONS):
            defs[stmt.name] = stmt
            found[stmt.name] = EntryPoint(stmt.name, stmt, _decorated_static(stmt), stmt.lineno)
        elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            name = stmt.targets[0].id
            wrapped = _wrapped_function(stmt.value, defs)
            if wrapped is not None:
                found[name] = EntryPoint(name, wrapped[0], wrapped[1], stmt.lineno)
            else:
                found.pop(name, None)
                defs.pop(name, None)
    return found


def makes_pallas_call(fn: ast.AST) -> bool:
    return any(calls(n, "pallas_call") for n in ast.walk(fn))


def _named(fn: ast.FunctionDef, names: Iterable[str]) -> set[str]:
    """Which of ``names`` the body of ``fn`` loads (calls, jits or hands on)."""
    wanted = set(names)
    return {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in wanted}


def reach_graph(candidates: dict[str, EntryPoint]) -> dict[str, set[str]]:
    """name -> the other candidate names its body names."""
    return {name: _named(ep.node, candidates) - {name} for name, ep in candidates.items()}


def _closure(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        n = todo.pop()
        for m in graph.get(n, ()):
            if m not in seen:
                seen.add(m)
                todo.append(m)
    return seen


def reaching_pallas_call(candidates: dict[str, EntryPoint]) -> dict[str, set[str]]:
    """name -> everything it reaches, for the candidates that reach a ``pallas_call``."""
    graph = reach_graph(candidates)
    direct = {name for name, ep in candidates.items() if makes_pallas_call(ep.node)}
    reach = {name: _closure(graph, name) for name in candidates}
    return {name: reached for name, reached in reach.items() if name in direct or reached & direct}


def _outermost(names: list[str], reach: dict[str, set[str]]) -> list[str]:
    """Those of ``names`` no other of them reaches (the first of a cycle when all are reached)."""
    roots = [n for n in names if not any(n in reach[m] for m in names if m != n)]
    return roots or names[:1]


def takes_arguments(fn: ast.FunctionDef) -> bool:
    """Has ``fn`` any parameter (a function without one takes no example input)?"""
    a = fn.args
    return bool(a.posonlyargs or a.args or a.vararg or a.kwonlyargs or a.kwarg)


def entry_points(tree: ast.Module, hints: Iterable[str] = ()) -> list[EntryPoint]:
    """The entry points examples call, in source order (see the module docstring)."""
    candidates = module_entry_candidates(tree)
    reach = reaching_pallas_call(candidates)
    hinted = [h for h in dict.fromkeys(hints) if h in reach]
    if hinted:
        return [candidates[h] for h in hinted]
    # A function without parameters (a script's `main()`) is no entry: its call draws no input,
    # and it would hide the entries it calls, which do.
    ordered = sorted((n for n in reach if takes_arguments(candidates[n].node)), key=lambda n: candidates[n].line)
    chosen: list[str] = []
    uncovered = list(ordered)
    for pool in ([n for n in ordered if not n.startswith("_")], ordered):
        while True:
            remaining = [n for n in pool if n in uncovered]
            if not remaining:
                break
            for root in _outermost(remaining, reach):
                chosen.append(root)
                covered = reach[root] | {root}
                uncovered = [n for n in uncovered if n not in covered]
    return sorted((candidates[n] for n in chosen), key=lambda ep: ep.line)
