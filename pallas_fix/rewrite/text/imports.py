"""How generated code names a module, and the import a rewrite adds when the file has none.

Every codemod that writes `pl.when`, `lax.fori_loop`, `pltpu.VMEM` or `jnp.int32` asks `spelling`
(or `spelling_at`, for code inside one function) for the module's local name; the answer carries
the import to add, which the rewrite schedules with `add_imports` after its edits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional

import libcst as cst
from libcst.metadata import GlobalScope

from pallas_fix.analysis.context import ModuleContext, walk
from pallas_fix.core import names as N
from pallas_fix.rewrite.text.libcst_scopes import scope_at


@dataclass(frozen=True)
class NewImport:
    """`from module import obj as asname` (obj None: `import module as asname`)."""

    module: str
    obj: Optional[str] = None
    asname: Optional[str] = None

    @property
    def local(self) -> str:
        return self.asname or self.obj or self.module


@dataclass(frozen=True)
class Module:
    path: str  # "jax.lax"
    new: NewImport  # what binds it when the file does not
    dotted: bool = True  # may code write the full path under a plain `import jax`?


PALLAS = Module(N.PALLAS, NewImport("jax.experimental", "pallas", "pl"))
LAX = Module("jax.lax", NewImport("jax", "lax"))
NUMPY = Module("jax.numpy", NewImport("jax.numpy", asname="jnp"))
# Scratch shapes are written through the backend module's usual alias (`pltpu.VMEM(...)`), the
# form the Pallas docs use, never as a dotted path.
TPU = Module(N.TPU, NewImport("jax.experimental.pallas", "tpu", "pltpu"), dotted=False)
MOSAIC_GPU = Module(N.MOSAIC_GPU, NewImport("jax.experimental.pallas", "mosaic_gpu", "plgpu"), dotted=False)

# Submodules a plain `import jax` loads itself; others are reachable as attributes only once
# something imports them.
_LOADED_BY_JAX = frozenset({"jax.lax", "jax.numpy"})


@dataclass(frozen=True)
class Spelling:
    text: str  # how generated code writes the module: "pl", "jax.lax"
    add: Optional[NewImport] = None  # the import the rewrite must add; None when the file has it

    def clashes(self, ctx: ModuleContext) -> bool:
        """The new import's name already spells something in the file (the import would shadow it)."""
        return self.add is not None and not name_is_free(ctx, self.add.local)


def spelling(ctx: ModuleContext, module: Module) -> Spelling:
    """For code anywhere in the file: a name an import binds to `module`, else its dotted path
    under `import jax` when that reaches it, else the name a new import binds."""
    for local, full in ctx.imports.bindings.items():
        if full == module.path:
            return Spelling(local)
    if _dotted_ok(ctx, module) and ctx.imports.bindings.get("jax") == "jax":
        return Spelling(module.path)
    return Spelling(module.new.local, module.new)


def spelling_at(ctx: ModuleContext, module: Module, at: cst.CSTNode) -> Optional[Spelling]:
    """For code at `at`: only module-level imports that no local name hides there count. A free
    conventional name (a new import) is preferred over the dotted path; None when neither fits."""
    alias = module_alias(ctx, module.path)
    if alias is not None and _visible(ctx, alias, at):
        return Spelling(alias)
    if name_is_free(ctx, module.new.local):
        return Spelling(module.new.local, module.new)
    if _dotted_ok(ctx, module) and module_alias(ctx, "jax") == "jax" and _visible(ctx, "jax", at):
        return Spelling(module.path)
    return None


def _dotted_ok(ctx: ModuleContext, module: Module) -> bool:
    return module.dotted and (module.path in _LOADED_BY_JAX or module.path in ctx.imports.modules)


def _visible(ctx: ModuleContext, name: str, at: cst.CSTNode) -> bool:
    """`name` at `at` means only module-level bindings (no local shadows it)."""
    scope = scope_at(ctx, at)
    if scope is None:
        return False
    found = scope[name]
    return bool(found) and all(isinstance(a.scope, GlobalScope) for a in found)


def add_imports(module: cst.Module, imports: Iterable[Optional[NewImport]]) -> cst.Module:
    """Add each import (None: nothing to add), one pass each in the order given."""
    from libcst.codemod import CodemodContext  # imported here: libcst.codemod loads libcst.matchers,
    from libcst.codemod.visitors import AddImportsVisitor  # a third of the CLI's start-up, used only by rewrites
    for new in imports:
        if new is None:
            continue
        context = CodemodContext()
        AddImportsVisitor.add_needed_import(context, new.module, new.obj, new.asname)
        module = AddImportsVisitor(context).transform_module(module)
    return module


# The imports a lifted loop may leave unused: (module, name bound by `from module import name`,
# alias of `import module as alias`).
_LOOP_IMPORTS = (("jax", "lax", None), ("jax.lax", "fori_loop", None))
# ... and a range read as a window (`jnp.arange`, `lax.iota`).
RANGE_IMPORTS = (("jax", "lax", None), ("jax.numpy", None, "jnp"), ("jax.numpy", "arange", None),
                 ("jax.lax", "iota", None), ("jax.lax", "broadcasted_iota", None))


def drop_unused_loop_imports(module: cst.Module, original: cst.Module, candidates=_LOOP_IMPORTS) -> cst.Module:
    """`from jax import lax` / `from jax.lax import fori_loop` (or other `candidates`) that only
    served what the rewrite removed: one that `original` (the tree before the rewrite) already
    left unused is the user's to keep or remove, not the rewrite's."""
    from libcst.codemod import CodemodContext  # imported here: see add_imports
    from libcst.codemod.visitors import RemoveImportsVisitor

    context = CodemodContext()
    served = [(parent, name, alias) for parent, name, alias in candidates if _read_outside_imports(original, alias or name)]
    for parent, name, alias in served:
        RemoveImportsVisitor.remove_unused_import(context, parent, name, alias)
    return RemoveImportsVisitor(context).transform_module(module) if served else module


def _read_outside_imports(module: cst.Module, name: str) -> bool:
    return any(isinstance(n, cst.Name) and n.value == name and not _in_import(n, module) for n in walk(module))


def _in_import(node: cst.CSTNode, module: cst.Module) -> bool:
    """`node` is part of a module-level (or guarded) import statement's names."""
    for stmt in _top_level(module.body):
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, (cst.Import, cst.ImportFrom)) and any(n is node for n in walk(small)):
                    return True
    return False


def module_alias(ctx: ModuleContext, module: str) -> Optional[str]:
    """A name bound to `module` by a module-level import (what every function of the file sees)."""
    for stmt in _top_level(ctx.module.body):
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, cst.Import):
                    for alias in small.names:
                        if N.dotted(alias.name) == module and alias.asname is not None:
                            return alias.asname.name.value  # type: ignore[union-attr]
                        if N.dotted(alias.name) == module and "." not in module:
                            return module
                elif isinstance(small, cst.ImportFrom) and small.module is not None and not small.relative:
                    base = N.dotted(small.module)
                    if isinstance(small.names, cst.ImportStar):
                        continue
                    for alias in small.names:
                        if f"{base}.{N.dotted(alias.name)}" == module:
                            return alias.asname.name.value if alias.asname is not None else N.dotted(alias.name)  # type: ignore[union-attr]
    return None


def _top_level(body: Iterable[cst.CSTNode]) -> Iterable[cst.CSTNode]:
    """Module statements, including those under a module-level `if` / `try` (guarded imports)."""
    for stmt in body:
        yield stmt
        if isinstance(stmt, (cst.If, cst.Try)):
            blocks = [stmt.body]
            if isinstance(stmt, cst.Try):
                blocks += [h.body for h in stmt.handlers]
            orelse = stmt.orelse
            if isinstance(orelse, cst.If):
                yield from _top_level([orelse])
            elif orelse is not None:
                blocks.append(orelse.body)
            for block in blocks:
                if isinstance(block, cst.IndentedBlock):
                    yield from _top_level(block.body)


def name_is_free(ctx: ModuleContext, name: str) -> bool:
    """No node of the module spells `name`: a new import of it shadows nothing."""
    return not any(isinstance(n, cst.Name) and n.value == name for n in walk(ctx.module))


def pallas_alias(ctx: ModuleContext) -> str:
    """How this module spells `jax.experimental.pallas`: its alias, the dotted path, or `pl`."""
    return spelling(ctx, PALLAS).text
