"""One LibCST codemod per rewrite recipe.

Installed as `pallas_fix.codemods` (the folder is mapped in pyproject.toml, so no top-level
`codemods` package lands in site-packages). Importing this package registers each codemod's
planner with `pallas_fix.fixes`; each module also defines a `Codemod` class that LibCST's own
runner can execute: `python -m libcst.tool codemod -x pallas_fix.codemods.<module>.<Class> FILE`.
"""

from . import lift_loop  # noqa: E402,F401
from . import program_id_blocks  # noqa: E402,F401
from . import scalar_start  # noqa: E402,F401
from . import traced_constant  # noqa: E402,F401
from . import lift_reduction  # noqa: E402,F401
from . import grid_to_loop  # noqa: E402,F401
from . import static_unroll  # noqa: E402,F401
