"""The top-level constants of a module, read with :mod:`ast` (nothing is imported or run).

Bare names in example calls (``f32[M, K]``, ``block_k=BK``) and in jaxtyping shapes resolve
against these.
"""

from __future__ import annotations

import ast
from typing import Any

_BINOPS = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.FloorDiv: lambda a, b: a // b,
    ast.Mod: lambda a, b: a % b,
    ast.Pow: lambda a, b: a**b,
    ast.Div: lambda a, b: a / b,
}


class _NotConst(Exception):
    pass


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _const_eval(node: ast.AST, env: dict) -> Any:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str, bool, type(None))):
        return node.value
    if isinstance(node, ast.Name) and node.id in env:
        return env[node.id]
    if isinstance(node, ast.Tuple):
        return tuple(_const_eval(e, env) for e in node.elts)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _const_eval(node.operand, env)
        if _is_number(v):
            return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        a, b = _const_eval(node.left, env), _const_eval(node.right, env)
        if _is_number(a) and _is_number(b):
            # a huge power would take forever to compute and is no shape anyway
            if isinstance(node.op, ast.Pow) and abs(b) > 64:
                raise _NotConst
            try:
                return _BINOPS[type(node.op)](a, b)
            except ArithmeticError:
                raise _NotConst from None
    raise _NotConst


def _try_eval(node: ast.AST, env: dict) -> tuple[Any, bool]:
    """(value, True), or (None, False) when ``node`` is not a constant expression."""
    try:
        return _const_eval(node, env), True
    except _NotConst:
        return None, False


def _bind(env: dict, target: ast.AST, value: Any, known: bool) -> None:
    if isinstance(target, ast.Name):
        if known:
            env[target.id] = value
        else:
            env.pop(target.id, None)
    elif isinstance(target, (ast.Tuple, ast.List)):
        ok = known and isinstance(value, tuple) and len(value) == len(target.elts)
        for n, t in enumerate(target.elts):
            _bind(env, t, value[n] if ok else None, ok)


def module_constants(source: str | ast.Module) -> dict[str, Any]:
    """Top-level constants: ``M = 256``, ``M, K = 256, 512``, ``K = 2 * M``, ``BS: int = 32``.

    Later assignments win; a name rebound to a non-constant is dropped.
    """
    tree = ast.parse(source) if isinstance(source, str) else source
    env: dict[str, Any] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign):
            targets = stmt.targets
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            targets = [stmt.target]
        else:
            continue
        value, known = _try_eval(stmt.value, env)
        for t in targets:
            _bind(env, t, value, known)
    return env


def safe_module_constants(source: str) -> dict[str, Any]:
    """:func:`module_constants`, or ``{}`` for a file that does not parse."""
    try:
        return module_constants(source)
    except SyntaxError:
        return {}
