"""How the effects model (analysis.effects.evaluator) passes arguments: a call's arguments as values
(`Args`: positional ones with whether they are `*starred`, keywords, and what a `**` spread
holds), bound to a function's parameters, or picked out by position for a library call."""

from __future__ import annotations

from typing import Callable, Iterator

import libcst as cst

from pallas_fix.analysis.effects.values import NOTHING, AbsVal, Fn, union

Args = tuple[list[tuple[AbsVal, bool]], dict[str, AbsVal], AbsVal]


def bind(fn: Fn, args: Args, default: Callable[[Fn, cst.BaseExpression], AbsVal]) -> dict[str, AbsVal]:
    """The parameters of `fn` for a call with these arguments (after its partial-bound ones).
    From the first `*args` argument on, any later positional parameter may get any element;
    `default(fn, expr)` is the value of a parameter's default."""
    positional, keywords, rest = args
    ps = fn.node.params
    values = [(v, False) for v in fn.bound] + list(positional)
    keywords = {**dict(fn.bound_kw), **keywords}
    star_at = next((n for n, (_, star) in enumerate(values) if star), len(values))
    exact = [v for v, _ in values[:star_at]]
    spread = union(v.elements() if star else v for v, star in values[star_at:])
    params: dict[str, AbsVal] = {}
    ordered = [*ps.posonly_params, *ps.params]
    for n, p in enumerate(ordered):
        if n < len(exact):
            params[p.name.value] = exact[n]
        else:
            params[p.name.value] = _keyword_or_default(fn, p, keywords, default) | spread | rest
    if isinstance(ps.star_arg, cst.Param):
        params[ps.star_arg.name.value] = (union(exact[len(ordered):]) | spread).container()
    for p in ps.kwonly_params:
        params[p.name.value] = _keyword_or_default(fn, p, keywords, default) | rest
    if ps.star_kwarg is not None:
        unnamed = union(v for k, v in keywords.items() if k not in params) | rest
        params[ps.star_kwarg.name.value] = unnamed.container()
    return params


def _keyword_or_default(fn: Fn, p: cst.Param, keywords: dict[str, AbsVal], default) -> AbsVal:
    if p.name.value in keywords:
        return keywords[p.name.value]
    return default(fn, p.default) if p.default is not None else NOTHING


def argument(args: Args, pos: int, keyword: str) -> AbsVal:
    """The argument passed for parameter `pos` / `keyword` (after a `*args`: any element)."""
    positional, keywords, rest = args
    if keyword in keywords:
        return keywords[keyword]
    head = positional[: pos + 1]
    if any(star for _, star in head):
        return union(v.elements() if star else v for v, star in positional) | rest
    return positional[pos][0] if len(positional) > pos else rest


def all_values(args: Args) -> Iterator[AbsVal]:
    positional, keywords, rest = args
    for value, star in positional:
        yield value.elements() | value if star else value
    yield from keywords.values()
    yield rest
