"""One LibCST codemod per rewrite recipe, and the order the engine asks them in.

Installed as `pallas_fix.codemods` (the folder is mapped in pyproject.toml, so no top-level
`codemods` package lands in site-packages). Each module reads like its recipe (match, check,
rewrite) and ends with its `RECIPE`; LibCST's own runner reaches them through
`pallas_fix.frontends.libcst_commands`.

The order matters: when two recipes plan a fix for the same index, the first one's plan is the
one offered.
"""

from pallas_fix.codemods import (
    contiguous_window,
    grid_to_loop,
    lift_loop,
    lift_reduction,
    program_id_blocks,
    scalar_prefetch,
    scalar_start,
    static_unroll,
    traced_constant,
)
from pallas_fix.core.plans import Recipe

PLANNERS: list[Recipe] = [
    lift_loop.RECIPE,
    program_id_blocks.RECIPE,
    scalar_start.RECIPE,
    contiguous_window.RECIPE,
    traced_constant.RECIPE,
    lift_reduction.RECIPE,
    scalar_prefetch.RECIPE,
    grid_to_loop.RECIPE,
    static_unroll.RECIPE,
]
