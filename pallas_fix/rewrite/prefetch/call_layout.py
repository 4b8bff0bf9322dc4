"""Argument lists as a person lays them out, for rewrites that move arguments around: keyword
arguments, a call's layout (one argument per line or not) copied onto a new inner call, values
re-indented when they move one level deeper, and items moved with each position keeping its
comma (so a trailing comma or a closing line break stays where it was)."""

from __future__ import annotations

import libcst as cst


def kwarg(name: str, value: cst.BaseExpression, comma) -> cst.Arg:
    eq = cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))
    return cst.Arg(keyword=cst.Name(name), value=value, equal=eq, comma=comma)


def without(args, keyword: str) -> list[cst.Arg]:
    args = list(args)
    n = next(k for k, a in enumerate(args) if a.keyword is not None and a.keyword.value == keyword)
    if n == len(args) - 1 and n > 0:
        args[n - 1] = args[n - 1].with_changes(comma=args[n].comma, whitespace_after_arg=args[n].whitespace_after_arg)
    return args[:n] + args[n + 1 :]


def moved(items: list, src: int, dst: int) -> list:
    """`items` with the one at `src` moved to `dst`, each position keeping its own comma."""
    commas = [getattr(i, "comma", None) for i in items]
    item = items.pop(src)
    items.insert(dst, item)
    return [i.with_changes(comma=commas[n]) for n, i in enumerate(items)]


def move_param(params: cst.CSTNode, name: str, at: int) -> cst.CSTNode:
    assert isinstance(params, cst.Parameters)
    items = list(params.params)
    src = next(n for n, p in enumerate(items) if p.name.value == name)
    dst = at if src > at else at - 1
    return params.with_changes(params=moved(items, src, dst))


def layout(call: cst.Call) -> tuple[bool, str]:
    """(one argument per line?, the indentation of those lines relative to the block)."""
    for a in call.args[:-1]:
        ws = a.comma.whitespace_after if isinstance(a.comma, cst.Comma) else None
        if isinstance(ws, cst.ParenthesizedWhitespace):
            return True, ws.last_line.value
    return False, ""


def laid_out(call: cst.Call, args: list[cst.Arg], multi: bool, indent: str) -> cst.Call:
    if not multi:
        sep = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        args = [a.with_changes(comma=sep if n < len(args) - 1 else cst.MaybeSentinel.DEFAULT) for n, a in enumerate(args)]
        return call.with_changes(args=args)
    inner = indent + "    "

    def nl(last: str) -> cst.ParenthesizedWhitespace:
        return cst.ParenthesizedWhitespace(first_line=cst.TrailingWhitespace(), indent=True, last_line=cst.SimpleWhitespace(last))

    out = []
    for n, a in enumerate(args):
        value = a.value.visit(_Indent("    "))
        out.append(a.with_changes(value=value, comma=cst.Comma(whitespace_after=nl(inner if n < len(args) - 1 else indent))))
    return call.with_changes(whitespace_before_args=nl(inner), args=out)


class _Indent(cst.CSTTransformer):
    """Every line break inside a moved value one level deeper."""

    def __init__(self, extra: str) -> None:
        super().__init__()
        self.extra = extra

    def leave_ParenthesizedWhitespace(self, original, updated):
        return updated.with_changes(last_line=cst.SimpleWhitespace(updated.last_line.value + self.extra))
