"""Small :mod:`ast` readers shared by example synthesis: dotted names, literals, bindings."""

from __future__ import annotations

import ast
from typing import Any, Optional

FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def dotted(node: ast.AST) -> str:
    """``jax.jit`` -> "jax.jit"; "" for anything but a chain of names."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = dotted(node.value)
        return f"{inner}.{node.attr}" if inner else ""
    return ""


def tail(node: ast.AST) -> str:
    """The last name of a dotted name: ``pl.pallas_call`` -> "pallas_call"."""
    return dotted(node).rsplit(".", 1)[-1]


def calls(node: ast.AST, *names: str) -> bool:
    """Is ``node`` a call of a function whose last name is one of ``names``?"""
    return isinstance(node, ast.Call) and tail(node.func) in names


def literal(node: Optional[ast.AST]) -> Any:
    """The value of a literal expression, or None."""
    if node is None:
        return None
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


def argument(call: ast.Call, index: int, keyword: str) -> Optional[ast.AST]:
    """The argument at ``index`` or named ``keyword`` (None when absent)."""
    for kw in call.keywords:
        if kw.arg == keyword:
            return kw.value
    if index < len(call.args) and not any(isinstance(a, ast.Starred) for a in call.args[: index + 1]):
        return call.args[index]
    return None


def keyword(call: ast.Call, name: str) -> Optional[ast.AST]:
    """The value of keyword argument ``name`` (None when absent)."""
    return next((kw.value for kw in call.keywords if kw.arg == name), None)


def simple_bindings(fn: ast.AST) -> dict[str, ast.AST]:
    """``name = value`` assignments anywhere in ``fn`` (nested functions included: kernels bind
    windows in their loop bodies), the last one winning; tuple targets are left to the caller."""
    found: dict[str, ast.AST] = {}
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            found[node.targets[0].id] = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            found[node.target.id] = node.value
    return found


def positional_params(fn: ast.FunctionDef) -> list[ast.arg]:
    return fn.args.posonlyargs + fn.args.args


def param_defaults(fn: ast.FunctionDef) -> dict[str, ast.AST]:
    """Parameter name -> its default expression, for the parameters that have one."""
    a = fn.args
    positional = positional_params(fn)
    found = {p.arg: d for p, d in zip(positional[len(positional) - len(a.defaults):], a.defaults)}
    found.update({p.arg: d for p, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None})
    return found
