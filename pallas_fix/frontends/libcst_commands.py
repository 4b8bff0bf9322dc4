"""Every pallas-fix rewrite as a LibCST codemod command, for `python -m libcst.tool codemod`:

    python -m libcst.tool codemod -x pallas_fix.frontends.libcst_commands.LiftIndependentLoop kernel.py

LibCST's runner hands us one module at a time; the command runs the same engine the CLI runs
(analysis, one plan per round, re-analysis until stable) restricted to its recipe's plans, so both
paths produce the same text. Verification is the CLI's job: LibCST's runner cannot run
interpreters. Recipes planned only under one target (`--target gpu-interpret`) get that target.
"""

from __future__ import annotations

from pathlib import Path

import libcst as cst
from libcst.codemod import CodemodCommand, SkipFile

from pallas_fix import codemods
from pallas_fix.core.config import Config, load_config
from pallas_fix.core.plans import Recipe
from pallas_fix.engine import fix_source


def command_for(recipe: Recipe) -> type[CodemodCommand]:
    class _PallasFixCommand(CodemodCommand):
        DESCRIPTION = recipe.description

        def transform_module_impl(self, tree: cst.Module) -> cst.Module:
            path = self.context.filename or "<codemod>"
            config = load_config(Path(path)) if self.context.filename else Config()
            if recipe.target is not None:
                config = config.merged(target=recipe.target)
            result = fix_source(tree.code, path, config, codemods={recipe.name})
            if result.error:
                raise SkipFile(result.error)
            if not result.changed:
                unsafe = [f for f in result.remaining if f.fixable and f.fix_id == recipe.name]
                if unsafe:
                    raise SkipFile(
                        f"{len(unsafe)} fix(es) here are marked unsafe; set `unsafe-fixes = true` under "
                        "[tool.pallas-fix] in pyproject.toml to apply them with this runner"
                    )
                raise SkipFile("nothing to rewrite")
            return cst.parse_module(result.source)

    _PallasFixCommand.__name__ = _PallasFixCommand.__qualname__ = recipe.command
    return _PallasFixCommand


LiftIndependentLoop = command_for(codemods.lift_loop.RECIPE)
ProgramIdBlocks = command_for(codemods.program_id_blocks.RECIPE)
ScalarStart = command_for(codemods.scalar_start.RECIPE)
ContiguousWindow = command_for(codemods.contiguous_window.RECIPE)
TracedConstantToInt = command_for(codemods.traced_constant.RECIPE)
LiftReduction = command_for(codemods.lift_reduction.RECIPE)
ScalarPrefetch = command_for(codemods.scalar_prefetch.RECIPE)
GridToLoop = command_for(codemods.grid_to_loop.RECIPE)
StaticUnroll = command_for(codemods.static_unroll.RECIPE)
