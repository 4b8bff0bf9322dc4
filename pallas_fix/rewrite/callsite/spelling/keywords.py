"""Insert keyword arguments into a pallas_call (or GridSpec / CompilerParams) call the way a
person would write them: in pallas_call's documented order, copying the call's own layout, and
one argument per line once a one-line call grows past 80 columns."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from pallas_fix.rewrite.text.syntax import code

_KEYWORD_ORDER = ("out_shape", "grid", "in_specs", "out_specs", "scratch_shapes", "compiler_params")


def insert_keywords(call: cst.Call, kws: list[tuple[str, str]], anchor: Optional[str], explode: bool = True) -> cst.Call:
    """Insert `kw=value` arguments where a hand-written call has them (grid, in_specs, out_specs,
    scratch_shapes after out_shape, in that order), copying the call's layout."""
    for kw in kws:
        call = _insert_keyword(call, kw, anchor, explode)
    return call


def _insert_keyword(call: cst.Call, kw: tuple[str, str], anchor: Optional[str], explode: bool = True) -> cst.Call:
    kws = [kw]
    args = list(call.args)
    pos = len(args)
    order = _KEYWORD_ORDER.index(kw[0]) if kw[0] in _KEYWORD_ORDER else len(_KEYWORD_ORDER)
    for n, a in enumerate(args):
        name = a.keyword.value if a.keyword is not None else ("out_shape" if n == 1 and anchor == "out_shape" else None)
        if name in _KEYWORD_ORDER and _KEYWORD_ORDER.index(name) < order:
            pos = n + 1
        elif name is None and anchor is None and a.keyword is None:
            pos = n + 1
    if anchor is not None and pos == len(args) and not any(
        (a.keyword is not None and a.keyword.value in _KEYWORD_ORDER) for a in args
    ):
        pos = min(2, len(args))
    # Separator: reuse the comma where the new argument goes (between the arguments around it, or
    # the last two), else the one after the first argument: it keeps the call's layout there, one
    # argument per line, or several on a line as `pl.pallas_call(kernel, grid=grid,` begins.
    sep = None
    near = args[pos - 1] if 0 < pos < len(args) else (args[-2] if len(args) >= 2 and pos == len(args) else None)
    if near is not None and isinstance(near.comma, cst.Comma):
        sep = near.comma
    for a in args[:-1]:
        if sep is None and isinstance(a.comma, cst.Comma):
            sep = a.comma
    # Its layout only: the comment after it is its argument's, not the new one's.
    sep = _uncommented(sep) if sep is not None else cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    new_args = [
        cst.Arg(
            keyword=cst.Name(k),
            value=cst.parse_expression(v),
            equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")),
            comma=sep,
        )
        for k, v in kws
    ]
    if pos == len(args) and args:
        last = args[-1]
        trailing = last.comma
        # The whitespace before `)` belongs to the last argument: hand it to the new last one.
        # ... and the comment on the last argument's line stays on that line where the call breaks
        # lines there (else it goes on ending the call's last line, as before).
        note = _note(last) if isinstance(sep.whitespace_after, cst.ParenthesizedWhitespace) else None
        args[-1] = last.with_changes(comma=_with_note(sep, note), whitespace_after_arg=cst.SimpleWhitespace(""))
        if note is not None:
            trailing = _uncommented(trailing) if isinstance(trailing, cst.Comma) else trailing
        new_args[-1] = new_args[-1].with_changes(
            comma=trailing, whitespace_after_arg=_bare(last.whitespace_after_arg) if note is not None else last.whitespace_after_arg)
    elif pos == len(args):
        new_args[-1] = new_args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    else:
        prev = args[pos - 1]
        if not isinstance(prev.comma, cst.Comma):
            args[pos - 1] = prev.with_changes(comma=sep)
    out = call.with_changes(args=args[:pos] + new_args + args[pos:])
    if explode and _one_line(call) and len(code(out)) > 80:
        out = explode_args(out)
    return out


def _bare(ws):
    """`ws` without its end-of-line comment and the comment lines after it: a line break and indent."""
    if not isinstance(ws, cst.ParenthesizedWhitespace):
        return ws
    return ws.with_changes(first_line=cst.TrailingWhitespace(newline=ws.first_line.newline), empty_lines=[])


def _uncommented(comma: cst.Comma) -> cst.Comma:
    return comma.with_changes(whitespace_after=_bare(comma.whitespace_after))


def _note(arg: cst.Arg) -> Optional[cst.TrailingWhitespace]:
    """The end of the argument's line where a comment ends it (`grid=g,  # one step per block`)."""
    for ws in (arg.comma.whitespace_after if isinstance(arg.comma, cst.Comma) else None, arg.whitespace_after_arg):
        if isinstance(ws, cst.ParenthesizedWhitespace) and ws.first_line.comment is not None:
            return ws.first_line
    return None


def _with_note(comma: cst.Comma, note: Optional[cst.TrailingWhitespace]) -> cst.Comma:
    ws = comma.whitespace_after
    if note is None or not isinstance(ws, cst.ParenthesizedWhitespace):
        return comma
    return comma.with_changes(whitespace_after=ws.with_changes(first_line=note))


def _one_line(call: cst.Call) -> bool:
    return "\n" not in code(call.with_changes(func=cst.Name("f")))


def explode_args(call: cst.Call) -> cst.Call:
    """One argument per line, as hand-written pallas_calls are laid out."""
    def nl(last: str = "    ") -> cst.ParenthesizedWhitespace:
        return cst.ParenthesizedWhitespace(
            first_line=cst.TrailingWhitespace(), indent=True, last_line=cst.SimpleWhitespace(last)
        )

    args = []
    for n, a in enumerate(call.args):
        last = n == len(call.args) - 1
        comma = cst.Comma(whitespace_after=nl("" if last else "    "))
        args.append(a.with_changes(comma=comma))
    return call.with_changes(whitespace_before_args=nl(), args=args)
