"""Expose a pallas-fix rewrite as a LibCST codemod, for `python -m libcst.tool codemod -x ...`.

LibCST's runner hands us one module at a time; we run the same engine the CLI runs (analysis,
one plan per round, re-analysis until stable) restricted to this codemod's plans, so both paths
produce the same text. Verification is the CLI's job: LibCST's runner cannot run interpreters.
"""

from __future__ import annotations

import libcst as cst
from libcst.codemod import CodemodCommand, SkipFile


def make_codemod(name: str, description: str) -> type[CodemodCommand]:
    class _PallasFixCodemod(CodemodCommand):
        DESCRIPTION = description

        def transform_module_impl(self, tree: cst.Module) -> cst.Module:
            from pallas_fix.config import load_config
            from pallas_fix.engine import fix_source
            from pathlib import Path

            path = self.context.filename or "<codemod>"
            config = load_config(Path(path)) if self.context.filename else None
            result = fix_source(tree.code, path, config, codemods={name})
            if result.error:
                raise SkipFile(result.error)
            if not result.changed:
                unsafe = [f for f in result.remaining if f.fixable and f.fix_id == name]
                if unsafe:
                    raise SkipFile(
                        f"{len(unsafe)} fix(es) here are marked unsafe; set `unsafe-fixes = true` under "
                        "[tool.pallas-fix] in pyproject.toml to apply them with this runner"
                    )
                raise SkipFile("nothing to rewrite")
            return cst.parse_module(result.source)

    _PallasFixCodemod.__name__ = "".join(part.capitalize() for part in name.split("-"))
    _PallasFixCodemod.__qualname__ = _PallasFixCodemod.__name__
    return _PallasFixCodemod
