"""Which binding of a name a read sees: reaching definitions over a function's straight-line code.

`base = i; base = base * TM; start = base` binds `base` twice; the read in `start = base` sees
the second binding, whose own read of `base` sees the first. A read sees the last binding of the
scope's top-level statements before the statement holding it; a static Python `if` whose test
is a known value counts as the arm it takes. Anything else that binds the name on the way (a
loop, a `with`, an `if` on a value nobody knows, a walrus beside the read) leaves the answer
unknown (None): callers then read the name as they would without a position, or refuse.
A read from a nested function runs when that function is called, so it sees the last binding
only when nothing after the function's definition rebinds the name.
"""

from __future__ import annotations

from typing import Callable, Optional

import libcst as cst

from pallas_fix.analysis.values.bindings import Unpack
from pallas_fix.analysis.context import ModuleContext, Scope

OUTER = ("outer", None)  # no binding of this scope reaches: the parameter, or an enclosing name
Binding = tuple[str, object]
Truth = Callable[[cst.BaseExpression], Optional[bool]]


def reaching_binding(
    ctx: ModuleContext, scope: Scope, binds: list[Binding], at: cst.CSTNode, truth: Truth
) -> Optional[Binding]:
    """The entry of `binds` (the scope's bindings of one name) a read at `at` sees, OUTER when
    none of them does yet, None when straight-line reading cannot tell."""
    stmts = ctx.body_statements(scope)
    path = {id(a) for a in (at, *ctx.ancestors(at))}
    holder = next((n for n, st in enumerate(stmts) if id(st) in path), None)
    if holder is None:
        return None  # not in this scope's code (a node a rewrite built)
    reader = _Reader(ctx, binds, truth)
    if ctx.scope_of(at) is not scope and any(reader.binds_in(st) for st in stmts[holder:]):
        return None  # a nested function runs later: a later binding may be the one it sees
    return reader.block(stmts, at, path, OUTER)


class _Reader:
    def __init__(self, ctx: ModuleContext, binds: list[Binding], truth: Truth) -> None:
        self.ctx = ctx
        self.truth = truth
        # Each binding with the ids of the nodes around it, to find the statement holding it.
        self.located = [(b, {id(a) for a in (_node(b), *ctx.ancestors(_node(b)))}) for b in binds]

    def binds_in(self, node: cst.CSTNode) -> list[Binding]:
        return [b for b, around in self.located if id(node) in around]

    def block(self, stmts: list, at: cst.CSTNode, path: set[int], current: Optional[Binding]) -> Optional[Binding]:
        """What a read at `at` inside `stmts` sees, `current` reaching the block's start."""
        for st in stmts:
            if current is None:
                return None
            if id(st) in path:
                return self.holder(st, at, path, current)
            if self.binds_in(st):
                current = self.after(st, current)
        return None  # `at` is not in this block

    def after(self, st: cst.CSTNode, current: Optional[Binding]) -> Optional[Binding]:
        """What the name holds once statement `st`, which binds it, has run."""
        if isinstance(st, cst.SimpleStatementLine):
            for small in st.body:
                mine = self.binds_in(small)
                if len(mine) > 1:
                    return None  # `a = (a := 1) + 1`: the order inside one statement decides
                current = mine[0] if mine else current
            return current
        if isinstance(st, cst.FunctionDef):
            return self.binds_in(st)[-1]
        if isinstance(st, cst.If):
            arm = self.arm(st)
            return None if arm is None else self.after_all(arm, current)
        return None  # loops, `with`, `try`: the binding may or may not run, or run many times

    def after_all(self, stmts: list, current: Optional[Binding]) -> Optional[Binding]:
        for st in stmts:
            if current is not None and self.binds_in(st):
                current = self.after(st, current)
        return current

    def holder(self, st: cst.CSTNode, at: cst.CSTNode, path: set[int], current: Binding) -> Optional[Binding]:
        """What a read at `at` inside statement `st` sees."""
        if not self.binds_in(st):
            return current
        if isinstance(st, cst.SimpleStatementLine):
            return self._in_line(st, at, path, current)
        if isinstance(st, cst.If):
            if id(st.test) in path:
                return None if self.binds_in(st.test) else current
            arm = self.arm(st)
            return None if arm is None else self.block(arm, at, path, current)
        return None

    def _in_line(self, st: cst.SimpleStatementLine, at: cst.CSTNode, path: set[int], current: Binding) -> Optional[Binding]:
        for small in st.body:
            mine = self.binds_in(small)
            if id(small) not in path:
                if len(mine) > 1:
                    return None
                current = mine[0] if mine else current
                continue
            walrus = [b for b in mine if isinstance(self.ctx.parent(_node(b)), cst.NamedExpr)]
            if not mine or (isinstance(small, (cst.Assign, cst.AugAssign, cst.AnnAssign)) and not walrus):
                return current  # the right-hand side (and an augmented target) is read first
            return None
        return None

    def arm(self, st: cst.If) -> Optional[list]:
        """The statements of the arm a static `if` takes ([] for none); None when its test is not
        a value known here, or binds a name itself."""
        if self.binds_in(st.test):
            return None
        taken = self.truth(st.test)
        if taken is None:
            return None
        if taken:
            return _statements(st.body)
        if isinstance(st.orelse, cst.If):
            return [st.orelse]
        return _statements(st.orelse.body) if st.orelse is not None else []


def _statements(block: cst.BaseSuite) -> list:
    return list(block.body) if isinstance(block, cst.IndentedBlock) else [block]


def _node(binding: Binding) -> cst.CSTNode:
    node = binding[1]
    return node.value if isinstance(node, Unpack) else node  # type: ignore[return-value]


_AUG_TO_BINARY = {
    cst.AddAssign: cst.Add, cst.SubtractAssign: cst.Subtract, cst.MultiplyAssign: cst.Multiply,
    cst.FloorDivideAssign: cst.FloorDivide, cst.ModuloAssign: cst.Modulo, cst.PowerAssign: cst.Power,
    cst.LeftShiftAssign: cst.LeftShift, cst.RightShiftAssign: cst.RightShift,
    cst.BitAndAssign: cst.BitAnd, cst.BitOrAssign: cst.BitOr, cst.BitXorAssign: cst.BitXor,
    cst.DivideAssign: cst.Divide, cst.MatrixMultiplyAssign: cst.MatrixMultiply,
}


def augmented_value(node: cst.AugAssign) -> cst.BinaryOperation:
    """`r += 1` as the expression `r + 1` it binds. The operands are the statement's own nodes,
    so `r` is still read where it stands: before this binding, seeing the one that reaches it."""
    op = _AUG_TO_BINARY[type(node.operator)]()
    return cst.BinaryOperation(left=node.target, operator=op, right=node.value)  # type: ignore[arg-type]


def static_truth(
    test: cst.BaseExpression,
    static_int: Callable[[cst.BaseExpression], Optional[int]],
    resolve: Callable[[str], Optional[cst.BaseExpression]],
    depth: int = 0,
) -> Optional[bool]:
    """Whether a static `if` test is true, when Python values known here decide it (`resolve`:
    the expression a static name stands for, `USE_BIAS = False`)."""
    if depth > 12:
        return None
    if isinstance(test, cst.Name) and test.value in ("True", "False"):
        return test.value == "True"
    if isinstance(test, cst.Name) and static_int(test) is None:
        value = resolve(test.value)
        return None if value is None else static_truth(value, static_int, resolve, depth + 1)
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        inner = static_truth(test.expression, static_int, resolve, depth + 1)
        return None if inner is None else not inner
    if isinstance(test, cst.BooleanOperation):
        left = static_truth(test.left, static_int, resolve, depth + 1)
        right = static_truth(test.right, static_int, resolve, depth + 1)
        if left is None or right is None:
            return None
        return (left and right) if isinstance(test.operator, cst.And) else (left or right)
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        a, b = static_int(test.left), static_int(test.comparisons[0].comparator)
        return None if a is None or b is None else _compare(test.comparisons[0].operator, a, b)
    value = static_int(test)
    return None if value is None else bool(value)


def _compare(op: cst.BaseCompOp, a: int, b: int) -> Optional[bool]:
    table = {cst.LessThan: a < b, cst.LessThanEqual: a <= b, cst.GreaterThan: a > b,
             cst.GreaterThanEqual: a >= b, cst.Equal: a == b, cst.NotEqual: a != b}
    return table.get(type(op))
