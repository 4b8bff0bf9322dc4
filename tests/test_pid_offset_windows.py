"""Program-id windows at an offset inside their program's block (issue 28,
pallas_fix/rewrite/inblock/offset_windows.py): the jaxpr check of where the windows land.

The pairs themselves (golden text, both interpreters, the dynamic-slice count, refusals with their
messages) run in test_codemod_pairs.py with the rest of program_id_blocks/. Here: in the traced
kernel, every ref the rewrite blocked is the program's block (`bm` rows) in the after-file and the
whole array in the before-file, and the windows a traced walk keeps (`walk-kept` pairs) are as
many as before, now slicing that block.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kernel_loading import abstract_args, file_flags, load_module
from pallas_fix.verify.examples.sources import collect_examples

FOLDER = Path(__file__).parent / "fixtures" / "codemods" / "program_id_blocks"
PAIRS = sorted(p.name[: -len("_before.py")] for p in FOLDER.glob("pid_offset_*_before.py"))


def _kernel_ref_shapes(path: Path) -> list[tuple[int, ...]]:
    """The shapes of the refs the (first) pallas_call's kernel receives, at the first example."""
    import jax

    example = collect_examples(path, path.read_text(encoding="utf-8"), pyproject=False)[0]
    args, kwargs = abstract_args(example)
    jaxpr = jax.make_jaxpr(lambda *a: getattr(load_module(path), example.entry)(*a, **kwargs))(*args)
    call = next(e for e in jaxpr.jaxpr.eqns if e.primitive.name == "pallas_call")
    return [tuple(v.aval.shape) for v in call.params["jaxpr"].invars]


def _block_rows(path: Path) -> int:
    example = collect_examples(path, path.read_text(encoding="utf-8"), pyproject=False)[0]
    _args, kwargs = abstract_args(example)
    return kwargs["bm"] if "bm" in kwargs else kwargs["block"]  # the size the rows are blocked by


def test_the_offset_pairs_are_there():
    assert {"pid_offset_rows", "pid_offset_two_windows", "pid_offset_fori", "pid_offset_hinted_plloop",
            "pid_offset_cdiv_guarded", "pid_offset_tiles_2d", "pid_offset_skip_header", "pid_offset_named_start"} <= set(PAIRS)


@pytest.mark.parametrize("name", PAIRS)
def test_the_kernel_sees_the_program_block(name):
    before, after = FOLDER / f"{name}_before.py", FOLDER / f"{name}_after.py"
    bm = _block_rows(before)
    whole = _kernel_ref_shapes(before)
    blocked = _kernel_ref_shapes(after)
    assert len(whole) == len(blocked)
    moved = [(old, new) for old, new in zip(whole, blocked) if old != new]  # an output already blocked stays
    assert moved
    for old, new in moved:
        assert old[0] > bm and new[0] == bm and len(new) == len(old), (old, new, bm)


def test_a_window_no_block_of_its_size_expresses_is_a_program_id_finding_once_fixed():
    """pid_offset_skip_header's windows (`i * bm + 8 + c * 16`, 16 rows) are PF106 on their own;
    with program-id-blocks' fix they are PF103 findings, and the planner runs on a file whose
    only findings they are."""
    from pallas_fix.engine import analyze_source

    path = FOLDER / "pid_offset_skip_header_before.py"
    result = analyze_source(path.read_text(encoding="utf-8"), str(path))
    assert [(f.code, f.fixable) for f in result.findings] == [("PF103", True)]


def test_a_kept_walk_is_declared_where_the_start_stays_traced():
    kept = {n for n in PAIRS if file_flags((FOLDER / f"{n}_before.py").read_text(encoding="utf-8"), "walk-kept") is not None}
    assert kept == {"pid_offset_fori", "pid_offset_hinted_plloop"}
