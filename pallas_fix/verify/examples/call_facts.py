"""Facts about a function's parameters, gathered through the calls it makes.

:func:`function_facts` reads a function with :class:`~pallas_fix.verify.examples.shape_facts.FunctionReader`
and adds what its callees say about the arrays it hands them: a ``pallas_call``'s kernel reads
its operands as refs (``pl.pallas_call(kernel, in_specs=...)(a, b)``: ref *i* is operand *i*,
scalar-prefetch operands first), its BlockSpecs give the operands' block shapes, and any other
function of the module (a helper taking refs, an inner wrapper) is read the same way, its
parameters matched to the arguments by position and keyword. Read with :mod:`ast` only.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Optional

from pallas_fix.verify.examples.ast_reading import (
    FUNCTIONS, argument, calls, keyword, literal, param_defaults, positional_params, tail,
)
from pallas_fix.verify.examples.shape_facts import ArrayFacts, FunctionFacts, FunctionReader

_MAX_DEPTH = 4


@dataclass(frozen=True)
class ModuleInfo:
    constants: dict  # module-level constants (pallas_fix.verify.examples.module_constants)
    defs: dict  # module-level function name -> def


@dataclass
class CallSite:
    """One ``pallas_call(kernel, ...)(operands)`` in a function."""

    kernel: Optional[ast.FunctionDef]
    kernel_env: dict  # what the kernel's free names mean: constants, defaults, partial-bound values
    refs: list[str]  # the kernel's ref parameters, in order
    operands: list[ast.AST]
    specs: dict  # operand index -> its BlockSpec expression
    num_prefetch: int


def _defs(fn: ast.AST) -> dict[str, ast.FunctionDef]:
    """Functions defined inside ``fn`` (kernels and loop bodies defined in a wrapper)."""
    return {n.name: n for n in ast.walk(fn) if isinstance(n, FUNCTIONS) and n is not fn}


class _Scope:
    """What names mean inside one function: its reader, its nested defs, the module's defs."""

    def __init__(self, reader: FunctionReader, module_defs: dict[str, ast.FunctionDef]):
        self.reader = reader
        self.defs = {**module_defs, **_defs(reader.fn)}

    def resolve(self, node: ast.AST) -> ast.AST:
        """Follow a name to the expression it is bound to, once."""
        if isinstance(node, ast.Name) and node.id in self.reader.bindings:
            return self.reader.bindings[node.id]
        return node

    def function(self, node: ast.AST) -> Optional[tuple[ast.FunctionDef, list, dict]]:
        """(def, positional args bound, keyword values bound) of a function expression: a name
        or a ``functools.partial`` of one."""
        node = self.resolve(node)
        if isinstance(node, ast.Name) and node.id in self.defs:
            return self.defs[node.id], [], {}
        if calls(node, "partial") and node.args:
            inner = self.function(node.args[0])
            if inner is None:
                return None
            fn, args, kwargs = inner
            bound = {kw.arg: self._value(kw.value) for kw in node.keywords if kw.arg}
            return fn, args + list(node.args[1:]), {**kwargs, **bound}
        return None

    def _value(self, node: ast.AST):
        value = self.reader.int_of(node)
        return value if value is not None else literal(node)


def _spec_list(scope: _Scope, node: Optional[ast.AST]) -> list[Optional[ast.AST]]:
    node = scope.resolve(node) if node is not None else None
    if isinstance(node, (ast.List, ast.Tuple)):
        return [scope.resolve(e) for e in node.elts]
    if calls(node, "BlockSpec"):
        return [node]
    return []


def _grid_spec(scope: _Scope, pallas_call: ast.Call) -> tuple[list, int]:
    """(in_specs, number of scalar-prefetch operands) of a pallas_call."""
    grid_spec = keyword(pallas_call, "grid_spec")
    grid_spec = scope.resolve(grid_spec) if grid_spec is not None else None
    if isinstance(grid_spec, ast.Call):
        prefetch = scope.reader.int_of(argument(grid_spec, 0, "num_scalar_prefetch") or ast.Constant(0)) or 0
        return _spec_list(scope, keyword(grid_spec, "in_specs")), prefetch
    return _spec_list(scope, keyword(pallas_call, "in_specs")), 0


def _kernel_refs(kernel: ast.FunctionDef, bound_args: list, bound_kwargs: dict) -> list[str]:
    names = [p.arg for p in positional_params(kernel)][len(bound_args):]
    return [n for n in names if n not in bound_kwargs]


def callee_env(fn: ast.FunctionDef, constants: dict, bound_kwargs: dict) -> dict:
    """What a called function's names mean: the module's constants, its own defaults, and the
    values the caller binds (keywords, a ``functools.partial``)."""
    env = dict(constants)
    reader = FunctionReader(ast.Module(body=[], type_ignores=[]), set(), constants)
    for name, default in param_defaults(fn).items():
        value = reader.int_of(default)
        env[name] = value if value is not None else literal(default)
    env.update(bound_kwargs)
    return env


def call_sites(scope: _Scope, constants: dict) -> list[CallSite]:
    found = []
    for node in ast.walk(scope.reader.fn):
        if not isinstance(node, ast.Call):
            continue
        head = scope.resolve(node.func)
        if not calls(head, "pallas_call"):
            continue
        operands = _leading_positionals(node)
        specs, prefetch = _grid_spec(scope, head)
        kernel_expr = argument(head, 0, "kernel")
        resolved = scope.function(kernel_expr) if kernel_expr is not None else None
        kernel, refs, env = None, [], dict(constants)
        if resolved is not None:
            kernel, bound_args, bound_kwargs = resolved
            refs = _kernel_refs(kernel, bound_args, bound_kwargs)
            env = callee_env(kernel, constants, bound_kwargs)
        found.append(CallSite(kernel, env, refs, operands,
                              {prefetch + k: s for k, s in enumerate(specs) if s is not None}, prefetch))
    return found


def block_spec_facts(reader: FunctionReader, spec: ast.AST) -> ArrayFacts:
    """The rank and divisibility a ``pl.BlockSpec((bm, bk), index_map)`` asks of its operand."""
    facts = ArrayFacts()
    if not calls(spec, "BlockSpec"):
        return facts
    space = keyword(spec, "memory_space")
    facts.smem = space is not None and tail(space) == "SMEM"
    shape = argument(spec, 0, "block_shape")
    if isinstance(shape, (ast.Tuple, ast.List)):
        facts.exact_ranks.add(len(shape.elts))
        for d, elt in enumerate(shape.elts):
            size = reader.int_of(elt)
            if size is not None:
                facts.divide(d, size)
                facts.blocked = True
    return facts


def _merge_call_site(facts: FunctionFacts, scope: _Scope, site: CallSite, module: ModuleInfo, depth: int) -> None:
    reader = scope.reader
    operand_arrays = [reader.array_of(o) for o in site.operands]
    for k, array in enumerate(operand_arrays):
        if array is None:
            continue
        if k < site.num_prefetch:
            facts.arrays[array].integer = True
        if k in site.specs:
            facts.arrays[array].merge(block_spec_facts(reader, site.specs[k]), {})
    if site.kernel is None:
        return
    kernel = function_facts(site.kernel, site.refs, site.kernel_env, module, depth + 1)
    rename = {ref: array for ref, array in zip(site.refs, operand_arrays) if array is not None}
    facts.merge(kernel, rename)


def _merge_callees(facts: FunctionFacts, scope: _Scope, module: ModuleInfo, depth: int) -> None:
    """Helpers and inner wrappers called with tracked arrays."""
    reader = scope.reader
    for node in ast.walk(reader.fn):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
            continue
        callee = scope.defs.get(node.func.id)
        if callee is None or callee is reader.fn:
            continue
        params = [p.arg for p in positional_params(callee)]
        passed = dict(zip(params, _leading_positionals(node)))
        passed.update({kw.arg: kw.value for kw in node.keywords if kw.arg})
        rename = {inner: reader.array_of(value) for inner, value in passed.items()}
        rename = {inner: outer for inner, outer in rename.items() if outer is not None}
        if not rename:
            continue
        values = {inner: reader.int_of(value) for inner, value in passed.items()}
        env = callee_env(callee, module.constants, {k: v for k, v in values.items() if v is not None})
        facts.merge(function_facts(callee, list(rename), env, module, depth + 1), rename)


def _leading_positionals(call: ast.Call) -> list[ast.AST]:
    out = []
    for a in call.args:
        if isinstance(a, ast.Starred):
            break
        out.append(a)
    return out


def function_facts(fn: ast.FunctionDef, tracked: list[str], env: dict, module: ModuleInfo,
                   depth: int = 0) -> FunctionFacts:
    """Facts about ``tracked`` (parameters of ``fn``) from ``fn`` and what it calls; ``env`` says
    what ``fn``'s free names mean."""
    reader = FunctionReader(fn, set(tracked), env)
    facts = reader.read()
    if depth >= _MAX_DEPTH:
        return facts
    scope = _Scope(reader, module.defs)
    for site in call_sites(scope, module.constants):
        _merge_call_site(facts, scope, site, module, depth)
    _merge_callees(facts, scope, module, depth)
    return facts
