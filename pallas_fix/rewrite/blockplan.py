"""Turn "this ref is read in blocks of S along dim d at block index I" into edits.

Shared by the loop-lifting (R1) and program_id (R3) codemods: kernel-side, the dynamic window
becomes a whole-block access (`x_ref[pl.ds(i * bs, bs), :]` -> `x_ref[...]`); call-side, the
grid may gain an axis, the ref gets a BlockSpec, and every other index_map learns the new axis.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import libcst as cst

from pallas_fix.rewrite.callsite import CallSite, CallSiteError, Slot, Spec, _elements
from pallas_fix.rewrite.edits import Edit


@dataclass
class BlockIndexExpr:
    """sum(mult * axis) + offset, axes named by grid position (or "new" for the added axis)."""

    axes: dict[object, int]  # grid axis position (int) or "new" -> integer multiplier
    offset: int = 0

    def render(self, names: dict[object, str]) -> str:
        parts = []
        for axis, mult in self.axes.items():
            name = names[axis]
            parts.append(name if mult == 1 else f"{mult} * {name}")
        if self.offset or not parts:
            parts.append(str(self.offset))
        text = " + ".join(parts)
        return text.replace("+ -", "- ")

    def key(self) -> tuple:
        return (tuple(sorted((str(k), v) for k, v in self.axes.items())), self.offset)


@dataclass
class RefBlock:
    param: str
    dim: int
    size: cst.BaseExpression  # call-site expression of the block size
    index: BlockIndexExpr
    subscripts: list[tuple[cst.Subscript, set[int]]] = field(default_factory=list)
    # Kernel dims indexed by exactly `pl.program_id(axis)`: squeezed out of the block (None).
    squeezed: dict[int, int] = field(default_factory=dict)


@dataclass
class NewAxis:
    trip: cst.BaseExpression  # call-site trip count
    name: str  # preferred index_map parameter name
    semantics: str  # "parallel" | "arbitrary" | "sequential"


_DEFAULT_NAMES = ["i", "j", "k", "l", "m", "n"]


def code(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)


def kernel_subscript_edit(dims: set[int], drop: frozenset[int] = frozenset()) -> Edit:
    """Replace the elements at `dims` by full slices and remove those at `drop` (squeezed dims);
    `x[:, :]` -> `x[...]`; `x.at[...]` -> `x`."""

    def edit(node: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(node, cst.Subscript)
        elements = []
        for n, el in enumerate(node.slice):
            if n in drop:
                continue
            if n in dims:
                elements.append(el.with_changes(slice=cst.Slice(lower=None, upper=None)))
            else:
                elements.append(el)
        all_full = all(
            isinstance(e.slice, cst.Slice) and e.slice.lower is None and e.slice.upper is None and e.slice.step is None
            for e in elements
        )
        base = node.value
        if all_full:
            if isinstance(base, cst.Attribute) and base.attr.value == "at":
                return base.value
            return node.with_changes(slice=[cst.SubscriptElement(cst.Index(cst.Ellipsis()))])
        last = elements[-1]
        elements[-1] = last.with_changes(comma=cst.MaybeSentinel.DEFAULT)
        return node.with_changes(slice=elements)

    return edit


class CallEdits:
    """Collects the call-site edits for one plan."""

    def __init__(self, cs: CallSite, blocks: list[RefBlock], new_axis: Optional[NewAxis]) -> None:
        self.cs = cs
        self.blocks = {b.param: b for b in blocks}
        self.new_axis = new_axis
        self.pl = cs.pl_alias()
        self.ngrid = len(cs.grid)
        self.edits: dict[cst.CSTNode, Edit] = {}
        self.new_keywords: list[tuple[str, str]] = []  # (keyword, code) added to the call
        self.axis_names = self._axis_names()

    # -- names ----------------------------------------------------------------------------------------
    def _axis_names(self) -> dict[object, str]:
        names: dict[object, str] = {}
        taken: set[str] = set()
        for kind in ("in", "out"):
            for expr in self.cs.spec_list(kind) or []:
                if expr is None:
                    continue
                node = self.cs.ctx.resolve_value(expr, self.cs.site.call)
                if isinstance(node, cst.Call):
                    lam = None
                    for a in node.args:
                        if isinstance(a.value, cst.Lambda):
                            lam = a.value
                    if lam is not None and len(lam.params.params) >= self.ngrid:
                        for n in range(self.ngrid):
                            names.setdefault(n, lam.params.params[n].name.value)
        pool = [n for n in _DEFAULT_NAMES]
        taken = set(names.values())
        preferred = self.new_axis.name if self.new_axis else None
        if preferred and preferred in taken:
            preferred = None
        for n in range(self.ngrid):
            if n not in names:
                cand = next(p for p in pool if p not in taken and p != preferred)
                names[n] = cand
                taken.add(cand)
        if self.new_axis is not None:
            cand = preferred or next(p for p in pool + ["ax"] if p not in taken)
            names["new"] = cand
        return names

    def params_text(self, spec: Spec) -> tuple[list[str], list[str]]:
        """(grid params, prefetch params) for a rebuilt index_map."""
        if spec.index_params:
            grid = list(spec.index_params[: self.ngrid])
            rest = list(spec.index_params[self.ngrid :])
        else:
            grid = [self.axis_names[n] for n in range(self.ngrid)]
            rest = [f"_s{n}" for n in range(self.cs.num_prefetch)] if self.cs.num_prefetch else []
        if self.new_axis is not None:
            name = self.axis_names["new"]
            used = _names_in(spec.index_map) if spec.index_map is not None else set()
            while name in grid or name in rest or name in used:
                name += "_"
            grid.append(name)
        return grid, rest

    # -- specs -----------------------------------------------------------------------------------------
    def spec_code(self, slot: Slot) -> Optional[str]:
        """New spec source for `slot`, or None when the existing spec can stay as it is."""
        spec = self.cs.spec_of(slot)
        block = self.blocks.get(slot.param)
        if block is not None:
            return self._lifted_spec(slot, spec, block)
        if self.new_axis is None:
            return None
        if spec.node is None:
            return self._whole_spec(slot)
        return None  # existing specs are extended in place (see extend_index_maps)

    def _whole_spec(self, slot: Slot) -> str:
        rank = self.cs.rank(slot.param)
        grid, rest = self.params_text(Spec(None, None, None))
        params = ", ".join(grid + rest)
        shape = self._shape_expr(slot)
        if rank is None or shape is None:
            return f"{self.pl}.BlockSpec()"
        zeros = "(" + ", ".join(["0"] * rank) + ("," if rank == 1 else "") + ")"
        return f"{self.pl}.BlockSpec({shape}, lambda {params}: {zeros})"

    def _shape_expr(self, slot: Slot) -> Optional[str]:
        if slot.kind == "in":
            return f"{code(slot.arg)}.shape" if slot.arg is not None and isinstance(slot.arg, (cst.Name, cst.Attribute)) else None
        if slot.kind == "out" and isinstance(slot.out_shape, cst.Call):
            from pallas_fix.rewrite.callsite import _arg_value

            shape = _arg_value(slot.out_shape, 0, "shape")
            if shape is not None and isinstance(shape, (cst.Tuple, cst.Attribute, cst.Name)):
                return code(shape)
        return None

    def _lifted_spec(self, slot: Slot, spec: Spec, block: RefBlock) -> str:
        if spec.index_map is not None and not isinstance(spec.index_map, cst.Lambda):
            raise CallSiteError(f"`{slot.param}` has a named index_map function; pallas-fix only rewrites lambdas")
        if spec.index_map is not None and spec.index_exprs is None:
            raise CallSiteError(f"the index_map of `{slot.param}` does not return a literal tuple")
        rank = len(spec.block) if spec.block is not None else self.cs.rank(slot.param)
        if rank is None:
            raise CallSiteError(f"cannot tell the rank of `{slot.param}` at the call site")
        # The kernel sees only the non-squeezed (non-None) dims: map its dim to the array's.
        visible = [
            e for e in range(rank)
            if spec.block is None or not (isinstance(spec.block[e], cst.Name) and spec.block[e].value == "None")
        ]
        if block.dim >= len(visible):
            raise CallSiteError(f"`{slot.param}` is sliced along dim {block.dim} but its block has {len(visible)} dims")
        array_dim = visible[block.dim]
        squeeze = {visible[d]: axis for d, axis in block.squeezed.items() if d < len(visible)}
        grid, rest = self.params_text(spec)
        names = dict(self.axis_names)
        for n in range(self.ngrid):
            names[n] = grid[n]
        if self.new_axis is not None:
            names["new"] = grid[-1]
        new_index = block.index.render(names)
        dims: list[str] = []
        idx: list[str] = []
        for e in range(rank):
            old_block = spec.block[e] if spec.block is not None else None
            old_index = spec.index_exprs[e] if spec.index_exprs is not None else None
            if old_block is not None and isinstance(old_block, cst.Name) and old_block.value == "None":
                dims.append("None")
                idx.append(code(old_index) if old_index is not None else "0")
                continue
            if e in squeeze:
                if old_index is not None and not _is_literal_zero(old_index):
                    raise CallSiteError(f"dim {e} of `{slot.param}` already has a block index")
                dims.append("None")
                idx.append(names[squeeze[e]])
                continue
            if e == array_dim:
                dims.append(code(block.size))
                if old_index is None or _is_literal_zero(old_index):
                    idx.append(new_index)
                else:
                    if old_block is None:
                        raise CallSiteError(f"the BlockSpec of `{slot.param}` has an index but no block shape")
                    ratio = f"({code(old_block)} // {paren_text(code(block.size))})"
                    idx.append(f"{paren_text(code(old_index))} * {ratio} + {paren_text(new_index)}")
                continue
            if old_block is not None:
                dims.append(code(old_block))
            else:
                dim = self.cs.shape_dim(slot.param, e)
                if dim is None:
                    raise CallSiteError(f"cannot write the size of dim {e} of `{slot.param}` at the call site")
                dims.append(code(dim))
            idx.append(code(old_index) if old_index is not None else "0")
        if slot.kind == "out":
            self._check_residency(slot, spec, block, grid)
        shape = "(" + ", ".join(dims) + ("," if rank == 1 else "") + ")"
        index = "(" + ", ".join(idx) + ("," if rank == 1 else "") + ")"
        return f"{self.pl}.BlockSpec({shape}, lambda {', '.join(grid + rest)}: {index})"

    def _check_residency(self, slot: Slot, spec: Spec, block: RefBlock, grid: list[str]) -> None:
        """An output block must not be revisited: grid axes its index ignores must all be inner
        to the ones it uses. Otherwise the output was resident across an axis (an accumulator)
        and moving its block would write partial results back and start over."""
        used: set[int] = {a for a in block.index.axes if isinstance(a, int)} | set(block.squeezed.values())
        if self.new_axis is not None:
            used.add(self.ngrid)
        if spec.index_exprs is not None and spec.index_params:
            names = {n for e in spec.index_exprs for n in _names_in(e)}
            used |= {n for n, p in enumerate(spec.index_params[: self.ngrid]) if p in names}
        total = self.ngrid + (1 if self.new_axis is not None else 0)
        unused = [a for a in range(total) if a not in used]
        if unused and max(used, default=-1) > min(unused):
            raise CallSiteError(
                f"the output `{slot.param}` stays resident across grid axis {min(unused)} "
                "(an accumulator or a block shared by several steps); blocking it would revisit blocks"
            )

    def extend_index_maps(self) -> None:
        """Existing specs that stay: their index_maps take one more (ignored) grid parameter."""
        if self.new_axis is None:
            return
        for kind in ("in", "out"):
            for slot in self.cs.slots.values():
                if slot.kind != kind or slot.param in self.blocks:
                    continue
                spec = self.cs.spec_of(slot)
                if spec.node is None or spec.index_map is None:
                    continue
                if isinstance(spec.index_map, cst.Lambda):
                    lam = spec.index_map
                    if lam in self.edits:
                        continue
                    self.edits[lam] = _add_lambda_param(self.ngrid, self._fresh(spec.index_params + sorted(_names_in(lam))))
                else:
                    node = spec.index_map
                    grid, rest = self.params_text(Spec(None, None, None))
                    old = grid[:-1]
                    call_args = ", ".join(old + (["*_prefetch"] if self.cs.num_prefetch else []))
                    params = ", ".join(grid + (["*_prefetch"] if self.cs.num_prefetch else []))
                    fn_code = code(node)
                    new_text = f"lambda {params}: {fn_code}({call_args})"
                    self.edits[node] = lambda _n, t=new_text: cst.parse_expression(t)

    def _fresh(self, existing: list[str]) -> str:
        name = self.axis_names.get("new", "k")
        while name in existing:
            name += "_"
        return name

    # -- containers -----------------------------------------------------------------------------------
    def write_specs(self) -> None:
        for kind in ("in", "out"):
            slots = sorted((s for s in self.cs.slots.values() if s.kind == kind), key=lambda s: s.index)
            new_codes = {s.index: self.spec_code(s) for s in slots}
            if not any(c is not None for c in new_codes.values()):
                continue
            exprs = self.cs.spec_list(kind)
            container = self.cs.in_specs_expr if kind == "in" else self.cs.out_specs_expr
            single = kind == "out" and self.cs.single_output
            if container is None:
                texts = []
                for s in slots:
                    c = new_codes[s.index]
                    if c is None:
                        c = self._whole_spec(s)
                    texts.append(c)
                value = texts[0] if single else "[" + ", ".join(texts) + "]"
                self.new_keywords.append((f"{kind}_specs", value))
                continue
            items = _elements(container)
            if items is None:
                # a single spec standing for the single operand
                c = new_codes[slots[0].index]
                self.edits[container] = lambda _n, t=c: cst.parse_expression(t)
                continue
            for s in slots:
                c = new_codes[s.index]
                if c is None:
                    continue
                target = exprs[s.index]
                resolved = self.cs.ctx.resolve_value(target, self.cs.site.call) if target is not None else None
                node = resolved if isinstance(resolved, cst.Call) else target
                self.edits[node] = lambda _n, t=c: cst.parse_expression(t)

    def write_grid(self) -> None:
        if self.new_axis is None:
            return
        trip = code(self.new_axis.trip)
        grid_expr = self.cs.site.kw("grid")
        if grid_expr is None:
            self.new_keywords.insert(0, ("grid", f"({trip},)"))
            return
        resolved = self.cs.ctx.resolve_value(grid_expr, self.cs.site.call)
        dims = [code(d) for d in self.cs.grid] + [trip]
        text = "(" + ", ".join(dims) + ")"
        node = resolved if isinstance(resolved, (cst.Tuple, cst.List)) else grid_expr
        self.edits[node] = lambda _n, t=text: cst.parse_expression(t)

    def write_semantics(self) -> None:
        if self.new_axis is None:
            return
        call, arg, values = self.cs.dimension_semantics()
        if arg is None:
            self._declare_semantics(call)
            return
        assert values is not None
        if len(values) != self.ngrid:
            raise CallSiteError(f"dimension_semantics has {len(values)} entries for a {self.ngrid}-axis grid")
        new = self.new_axis.semantics
        if new == "parallel" and any(v not in ("parallel",) for v in values):
            new = "arbitrary" if self.cs.backend().value == "tpu" else "sequential"
        value = self.cs.ctx.resolve_value(arg.value, self.cs.site.call)
        quote = '"'
        if isinstance(value, (cst.Tuple, cst.List)) and value.elements:  # keep the user's quoting / enum style
            first = value.elements[0].value
            if isinstance(first, cst.SimpleString):
                quote = first.quote[0] if first.quote else '"'
            elif isinstance(first, cst.Attribute):
                # enum style: pltpu.GridDimensionSemantics.PARALLEL
                base = code(first.value)
                text = "(" + ", ".join([code(e.value) for e in value.elements] + [f"{base}.{new.upper()}"]) + ")"
                self.edits[value] = lambda _n, t=text: cst.parse_expression(t)
                return
        items = [f"{quote}{v}{quote}" for v in values] + [f"{quote}{new}{quote}"]
        text = "(" + ", ".join(items) + ")"
        self.edits[value] = lambda _n, t=text: cst.parse_expression(t)

    def _declare_semantics(self, params_call: Optional[cst.Call]) -> None:
        """No dimension_semantics written. TPU treats every axis as "arbitrary" (sequential), so
        nothing is needed; Mosaic GPU treats every axis as "parallel", so a sequential axis must
        be declared, keeping the existing axes parallel as they were."""
        if self.new_axis is None or self.new_axis.semantics == "parallel":
            return
        if self.cs.backend().value != "mosaic_gpu":
            return
        values = ", ".join(['"parallel"'] * self.ngrid + [f'"{self.new_axis.semantics}"'])
        semantics = f"({values},)" if self.ngrid == 0 else f"({values})"
        if params_call is not None:
            if params_call in self.edits:
                raise CallSiteError("compiler_params is edited twice")
            self.edits[params_call] = lambda n, t=semantics: insert_keywords(n, [("dimension_semantics", t)], None, explode=False)
            return
        from pallas_fix.core import names as N

        alias = next((k for k, v in self.cs.ctx.imports.bindings.items() if v == N.MOSAIC_GPU), None)
        if alias is None:
            raise CallSiteError("cannot name jax.experimental.pallas.mosaic_gpu to declare the sequential axis")
        self.new_keywords.append(("compiler_params", f"{alias}.CompilerParams(dimension_semantics={semantics})"))

    def write_keywords(self) -> None:
        if not self.new_keywords:
            return
        target = self.cs.site.grid_spec if self.cs.site.grid_spec is not None else self.cs.site.call
        kws = list(self.new_keywords)
        anchor = "out_shape" if target is self.cs.site.call else None
        existing = self.edits.get(target)

        def edit(node: cst.CSTNode, kws=kws, anchor=anchor, existing=existing) -> cst.CSTNode:
            if existing is not None:
                node = existing(node)  # type: ignore[assignment]
            return insert_keywords(node, kws, anchor)  # type: ignore[arg-type]

        self.edits[target] = edit

    def build(self) -> dict[cst.CSTNode, Edit]:
        self.write_grid()
        self.write_specs()
        self.extend_index_maps()
        self.write_semantics()
        self.write_keywords()
        return self.edits


def _names_in(node: cst.CSTNode) -> set[str]:
    from pallas_fix.analysis.context import walk

    return {n.value for n in walk(node) if isinstance(n, cst.Name)}


def _is_literal_zero(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Integer) and int(expr.evaluated_value) == 0


def paren_text(text: str) -> str:
    """`text` as an operand: atoms (`bs`, `x.shape[0]`) bare, anything else in parentheses."""
    simple = text.replace("_", "").replace(".", "").replace("[", "").replace("]", "")
    return text if simple.isalnum() else f"({text})"


def _add_lambda_param(position: int, name: str) -> Edit:
    def edit(node: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(node, cst.Lambda)
        params = list(node.params.params)
        new = cst.Param(cst.Name(name))
        if position < len(params):
            params.insert(position, new.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))))
        else:
            if params:
                params[-1] = params[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
            params.append(new)
        return node.with_changes(params=node.params.with_changes(params=params))

    return edit


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
    # Separator: reuse the comma that follows the first argument (keeps multi-line layouts).
    sep = None
    for a in args[:-1]:
        if isinstance(a.comma, cst.Comma):
            sep = a.comma
            break
    if sep is None:
        sep = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
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
        args[-1] = last.with_changes(comma=sep, whitespace_after_arg=cst.SimpleWhitespace(""))
        new_args[-1] = new_args[-1].with_changes(comma=trailing, whitespace_after_arg=last.whitespace_after_arg)
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




def dead_assignments(ctx, functions: list[cst.CSTNode], removed: set[int]) -> list[cst.BaseStatement]:
    """Simple `name = <pure index arithmetic>` statements nobody reads once `removed` elements are
    gone (`start = pid * bs` after its window became a BlockSpec). Iterates: `pid` may die next."""
    from pallas_fix.core import names as N
    from pallas_fix.analysis.context import walk

    pure_calls = N.DS | N.SLICE | N.PROGRAM_ID | N.NUM_PROGRAMS | N.MULTIPLE_OF | N.INT_DTYPES

    def pure(expr: cst.CSTNode) -> bool:
        for n in walk(expr):
            if isinstance(n, cst.Call) and not ctx.imports.is_(n.func, pure_calls):
                return False
            if isinstance(n, (cst.Lambda, cst.Await, cst.Yield, cst.NamedExpr)):
                return False
        return True

    candidates: list[tuple[cst.SimpleStatementLine, cst.Name]] = []
    nested = [n for fn in functions for n in walk(fn) if isinstance(n, cst.FunctionDef)]
    for fn in list(dict.fromkeys([*functions, *nested])):
        body = getattr(fn, "body", None)
        if not isinstance(body, cst.IndentedBlock):
            continue
        for stmt in body.body:
            if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assign):
                a = stmt.body[0]
                if len(a.targets) == 1 and isinstance(a.targets[0].target, cst.Name) and pure(a.value):
                    candidates.append((stmt, a.targets[0].target))
    dead: list[cst.BaseStatement] = []
    gone = set(removed)
    changed = True
    while changed:
        changed = False
        for stmt, target in candidates:
            if stmt in dead:
                continue
            readers = [
                n for fn in functions for n in walk(fn)
                if isinstance(n, cst.Name) and n.value == target.value and n is not target
            ]
            live = [r for r in readers if not any(id(a) in gone for a in [r, *ctx.ancestors(r)])]
            if readers and not live:
                dead.append(stmt)
                gone.add(id(stmt))
                changed = True
    return dead
