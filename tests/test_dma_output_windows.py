"""An output left in HBM (`memory_space=pl.ANY` / `pltpu.HBM`) that the kernel writes by DMA into
its program's block (issue 28, pallas_fix/rewrite/inblock/dma_outputs.py).

The pairs (golden text, both interpreters, the dynamic-slice count) and the refusal fixtures run in
test_codemod_pairs.py with the rest of program_id_blocks/ (`pid_dma_hbm_*`, `refuse_pid_dma_hbm_*`,
`pid_offset_dma_any_output`). Here: the jaxpr check of what the rewrite moves (the kernel's output
ref becomes the program's VMEM block, every DMA stays, the ones into the output lose their dynamic
start, the data-chosen gathers keep theirs); refusals the fixtures do not cover (another backend,
DMAs that may overlap, one waited by a later pass, under `pl.when`); the `*sems` and scratch-count
reads the lift needs; and the two real-corpus files it was built for.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kernel_loading import FIXTURES, abstract_args, load_module
from pallas_fix.core.config import Config
from pallas_fix.core.model import Backend
from pallas_fix.engine import analyze_source
from pallas_fix.verify.examples.sources import collect_examples

FOLDER = FIXTURES / "codemods" / "program_id_blocks"
PAIRS = ["pid_dma_hbm_block", "pid_dma_hbm_chunks", "pid_dma_hbm_head", "pid_offset_dma_any_output"]


def _kernel(path: Path):
    """(kernel jaxpr, index of the output ref among its invars) of the file's first example."""
    import jax

    example = collect_examples(path, path.read_text(encoding="utf-8"), pyproject=False)[0]
    args, kwargs = abstract_args(example)
    jaxpr = jax.make_jaxpr(lambda *a: getattr(load_module(path), example.entry)(*a, **kwargs))(*args)
    call = next(e for e in jaxpr.jaxpr.eqns if e.primitive.name == "pallas_call")
    kernel = call.params["jaxpr"]
    n_scratch = call.params["grid_mapping"].num_scratch_operands
    return kernel, len(kernel.invars) - n_scratch - 1  # one output in these kernels


def _dmas(jaxpr) -> list:
    out = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dma_start":
            out.append(eqn)
        for value in eqn.params.values():
            for sub in value if isinstance(value, (list, tuple)) else [value]:
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    out += _dmas(inner)
    return out


def _dynamic_starts(eqn) -> int:
    """Traced scalar integer operands of a DMA (not literals): the traced starts of its windows."""
    return sum(1 for v in eqn.invars if not hasattr(v, "val") and getattr(v.aval, "shape", None) == ()
               and "int" in str(v.aval.dtype))


@pytest.mark.parametrize("name", PAIRS)
def test_the_output_dma_lands_in_the_program_block(name):
    before, ob = _kernel(FOLDER / f"{name}_before.py")
    after, oa = _kernel(FOLDER / f"{name}_after.py")
    whole, block = before.invars[ob].aval, after.invars[oa].aval
    assert "any" in str(whole) and "any" not in str(block), (whole, block)
    assert whole.shape[1:] == block.shape[1:] and block.shape[0] < whole.shape[0]
    dmas_before, dmas_after = _dmas(before), _dmas(after)
    assert len(dmas_before) == len(dmas_after)  # each DMA kept, re-based
    into_before = [e for e in dmas_before if before.invars[ob] in e.invars]
    into_after = [e for e in dmas_after if after.invars[oa] in e.invars]
    assert into_before and len(into_before) == len(into_after)
    assert all(_dynamic_starts(e) for e in into_before)  # the program id's start
    assert not any(_dynamic_starts(e) for e in into_after)  # inside the block: static offsets
    gathers = lambda dmas, out: sorted(_dynamic_starts(e) for e in dmas if out not in e.invars)  # noqa: E731
    assert gathers(dmas_before, before.invars[ob]) == gathers(dmas_after, after.invars[oa])  # the reads stay


def _output_finding(source: str, config: Config | None = None):
    result = analyze_source(source, "<t>", config)
    (finding,) = [f for f in result.findings if f.code == "PF103" and "`o_ref`" in f.message]
    return finding


_BASE = (FOLDER / "pid_dma_hbm_block_before.py").read_text(encoding="utf-8")
_OUT = """    out = pltpu.make_async_copy(src_ref=rows, dst_ref=o_ref.at[pl.ds(i * bm, bm)], sem=sem)
    out.start()
    out.wait()
"""


def _variant(new_out: str) -> str:
    assert _OUT in _BASE
    return _BASE.replace(_OUT, new_out)


def test_the_base_kernel_has_a_fix():
    assert _output_finding(_BASE).plan is not None


def test_refused_on_another_backend():
    finding = _output_finding(_BASE, Config(backend=Backend.TRITON))
    assert finding.plan is None and "only for TPU (Mosaic) kernels" in finding.refusal


def test_refused_when_waited_by_a_later_pass():
    """The copy of one pass waited in the next: the last pass's copy is never waited in the step."""
    source = _variant("""    prev = None
    for c in range(bm // 8):
        if prev is not None:
            prev.wait()
        prev = pltpu.make_async_copy(rows.at[pl.ds(c * 8, 8)], o_ref.at[pl.ds(i * bm + c * 8, 8)], sem)
        prev.start()
""")
    finding = _output_finding(source)
    assert finding.plan is None and "read before its DMA is made" in finding.refusal


def test_refused_under_pl_when():
    source = _variant("""    @pl.when(i >= 0)
    def _():
        out = pltpu.make_async_copy(src_ref=rows, dst_ref=o_ref.at[pl.ds(i * bm, bm)], sem=sem)
        out.start()
        out.wait()
""")
    finding = _output_finding(source)
    assert finding.plan is None and "not at the kernel's top level or in a static Python `for` loop" in finding.refusal


def test_refused_where_windows_may_overlap():
    """Windows of 16 rows every 8: two passes copy into the same rows."""
    source = _variant("""    for c in range(bm // 8 - 1):
        cp = pltpu.make_async_copy(rows.at[pl.ds(c * 8, 16)], o_ref.at[pl.ds(i * bm + c * 8, 16)], sem)
        cp.start()
        cp.wait()
""")
    finding = _output_finding(source)
    assert finding.plan is None and "do not overlap" in finding.refusal


def test_a_window_wider_than_its_step_names_no_loop():
    """`pl.ds(i * bm, 2 * bm)`: no loop walks the window, so the refusal says what it needs of the
    block (red team 14: it said to bound 'the loop that walks it' by `bm // 2 * bm`)."""
    source = _variant(_OUT.replace("o_ref.at[pl.ds(i * bm, bm)]", "o_ref.at[pl.ds(i * bm, 2 * bm)]"))
    finding = _output_finding(source)
    assert finding.plan is None
    assert "it fits only where `bm >= 2 * bm`" in finding.refusal and "loop" not in finding.refusal


def test_one_dma_at_a_fixed_offset_is_not_an_overlap():
    """One DMA per step into `pl.ds(i * bm, 8)`, `bm >= 8` stated: one window cannot overlap another;
    it was refused as windows pallas-fix 'cannot prove do not overlap' (red team 14; the
    pid_dma_hbm_head pair runs it)."""
    head = _OUT.replace("src_ref=rows,", "src_ref=rows.at[pl.ds(0, 8)],").replace("pl.ds(i * bm, bm)", "pl.ds(i * bm, 8)")
    source = _variant(head).replace("    if m % bm:", "    assert bm >= 8\n    if m % bm:")
    assert _output_finding(source).plan is not None
    assert _output_finding(source.replace("    assert bm >= 8\n", "")).plan is None  # the bound is what proves it


def test_column_chunks_are_not_called_the_same_block():
    """A static loop whose DMAs move along the columns (`pl.ds(c * 128, 128)`) copies different
    bytes each pass: refused, as pallas-fix compares only the program id's rows, but no longer as
    'the same block is copied into it in every pass' (red team 14)."""
    source = _variant("""    for c in range(2):
        out = pltpu.make_async_copy(rows.at[:, pl.ds(c * 128, 128)], o_ref.at[pl.ds(i * bm, bm), pl.ds(c * 128, 128)], sem)
        out.start()
        out.wait()
""")
    finding = _output_finding(source)
    assert finding.plan is None and "the same block is copied" not in finding.refusal
    assert "a window moving along another dim it does not compare" in finding.refusal


def test_a_descriptor_rebuilt_to_wait_is_named_as_such():
    """`make_async_copy(rows, o_ref.at[pl.ds(i * bm, bm)], sem).wait()` moves no data (detection
    gives it no window); the refusal said `o_ref` was 'accessed without a program_id window along
    dim 0' at a line that has one (red team 14)."""
    source = _variant(_OUT + "    pltpu.make_async_copy(rows, o_ref.at[pl.ds(i * bm, bm)], sem).wait()\n")
    finding = _output_finding(source)
    assert finding.plan is None and "without a program_id window" not in finding.refusal
    assert "built only to be waited" in finding.refusal


def test_a_descriptor_started_again_after_its_wait_is_refused():
    """`out.start(); out.wait(); ...; out.start()`: the second copy may still run when the block is
    written back (red team 14: proposed as safe; TPU interpret mode gave the first copy's rows)."""
    again = "    rows[...] = rows[...] * 2.0\n    out.start()\n"
    finding = _output_finding(_variant(_OUT + again))
    assert finding.plan is None and "is used again after it is waited (line 24)" in finding.refusal
    chunks = (FOLDER / "pid_dma_hbm_chunks_before.py").read_text(encoding="utf-8")
    assert _output_finding(chunks).plan is not None
    loop = "    for cp in copies:\n        cp.wait()\n"
    for later in ("    cp.start()\n", "    rows[...] = rows[...] * 2.0\n    cp.start()\n"):  # the last chunk, again
        finding = _output_finding(chunks.replace(loop, loop + later))
        assert finding.plan is None and "is used again after it is waited" in finding.refusal
    done = chunks.replace(loop, loop + "    cp = None\n    del cp\n")  # rebound: another value
    assert _output_finding(done).plan is not None


def test_an_exit_between_start_and_wait_is_refused():
    """`cp.start()`, `if c == bm // 8 - 1: break`, `cp.wait()`: the last chunk is never waited (red
    team 14: proposed as safe; TPU interpret mode left its rows NaN in the block)."""
    source = _variant("""    for c in range(bm // 8):
        cp = pltpu.make_async_copy(rows.at[pl.ds(c * 8, 8)], o_ref.at[pl.ds(i * bm + c * 8, 8)], sem)
        cp.start()
        if c == bm // 8 - 1:
            break
        cp.wait()
""")
    finding = _output_finding(source)
    assert finding.plan is None and "is not started and then waited in the same step" in finding.refusal
    assert _output_finding(source.replace("            break\n", "            pass\n")).plan is not None
    chunks = (FOLDER / "pid_dma_hbm_chunks_before.py").read_text(encoding="utf-8")
    appended = "        copies.append(cp)\n"
    for exit_ in ("        if c == 0:\n            return\n", "    if bm == 16:\n        return\n"):
        finding = _output_finding(chunks.replace(appended, appended + exit_))  # the wait loop skipped
        assert finding.plan is None and "is not started and then waited in the same step" in finding.refusal


def test_a_block_shared_across_a_parallel_axis_is_refused():
    """Grid (m // bm, 2), step (i, j) copying its columns `pl.ds(j * 128, 128)` of the rows at `i`:
    in HBM the two steps of a row block write disjoint bytes from any core; the block of `bm` rows at
    `i` is shared by them, and on an axis marked "parallel" each core writes its copy back (red team
    14: proposed as safe; TPU interpret mode on 8 cores found the race). "arbitrary" keeps the lift."""
    source = _variant("""    j = pl.program_id(1)
    out = pltpu.make_async_copy(rows.at[:, pl.ds(j * 128, 128)], o_ref.at[pl.ds(i * bm, bm), pl.ds(j * 128, 128)], sem)
    out.start()
    out.wait()
""").replace("f32[40, 128]", "f32[40, 256]").replace("grid=(m // bm,),", "grid=(m // bm, 2),")
    params = "        ),\n        compiler_params=pltpu.CompilerParams(dimension_semantics=({}, {})),\n    )(ids, table)"
    assert "        ),\n    )(ids, table)" in source

    def rows_finding(semantics):
        text = source.replace("        ),\n    )(ids, table)", params.format(*semantics))
        found = [f for f in analyze_source(text, "<t>").findings if f.code == "PF103" and "`o_ref`" in f.message
                 and "`i * bm`" in f.message]
        assert len(found) == 1
        return found[0]

    refused = rows_finding(('"parallel"', '"parallel"'))
    assert refused.plan is None and 'its block would not follow grid axis 1, marked "parallel"' in refused.refusal
    assert rows_finding(('"parallel"', '"arbitrary"')).plan is not None


def test_a_wait_list_read_elsewhere_is_refused():
    """`copies` handed to a helper may be waited anywhere, or not at all."""
    source = (FOLDER / "pid_dma_hbm_chunks_before.py").read_text(encoding="utf-8")
    loop = "    for cp in copies:\n        cp.wait()\n"
    assert loop in source
    finding = _output_finding(source.replace(loop, "    jax.tree.map(lambda cp: cp.wait(), copies)\n"))
    assert finding.plan is None and "is not started and then waited in the same step" in finding.refusal


def test_a_wait_list_bound_again_is_refused():
    """`copies = []` again before `for cp in copies: cp.wait()`: the loop waits a fresh list and no
    chunk is waited in the step (red team 14: proposed as safe; TPU interpret mode gave all NaN)."""
    source = (FOLDER / "pid_dma_hbm_chunks_before.py").read_text(encoding="utf-8")
    loop = "    for cp in copies:\n        cp.wait()\n"
    for rebinding in ("    copies = []\n", "    copies, done = [], True\n"):
        finding = _output_finding(source.replace(loop, rebinding + loop))
        assert finding.plan is None and "to a list bound once" in finding.refusal


def test_sems_read_other_than_as_a_dma_semaphore_stays_refused():
    """Only `sems[k]` given to a DMA as its `sem` is skipped; any other read of `*sems` may name an
    operand, so the mapping stays unknown."""
    source = (FOLDER / "pid_dma_hbm_chunks_before.py").read_text(encoding="utf-8")
    assert _output_finding(source).plan is not None
    bad = source.replace("    copies = []\n", "    copies = []\n    jax.tree.map(lambda s: s, sems)\n")
    finding = _output_finding(bad)
    assert finding.plan is None and "maps `*refs` to operands only through" in finding.refusal


def test_scratch_count_reads_a_repeated_list():
    import libcst as cst

    from pallas_fix.analysis.discovery.operand_refs import _repeated_count

    def count(text, names=None):
        return _repeated_count(cst.parse_expression(text), lambda e: cst.parse_expression(names[e.value]) if names else e)

    assert count("[pltpu.SemaphoreType.DMA] * 4") == 4
    assert count("2 * [a, b]") == 4
    assert count("[a] * NSEM", {"NSEM": "3"}) == 3
    assert count("[a] * n") is None  # not a literal: the count stays unknown
    assert count("xs * 2") is None


REAL = FIXTURES / "real"


@pytest.mark.parametrize("name", ["tpu_kernels__embedding_lookup_packed", "tpu_kernels__embedding_lookup"])
def test_the_real_embedding_lookups_get_the_output_lift(name):
    path = REAL / f"{name}.py"
    source = path.read_text(encoding="utf-8")
    assert "# held-out: no" in source
    result = analyze_source(source, str(path))
    outputs = [f for f in result.findings if f.code == "PF103"]
    assert outputs and all(f.plan is not None for f in outputs), [f.refusal for f in outputs]
    gathers = [f for f in result.findings if f.code == "PF105"]
    assert gathers and all(f.plan is None for f in gathers)  # data-chosen rows: they stay


def test_a_dma_into_an_output_already_in_vmem_is_checked_the_same_way():
    """The usual lift blocks a VMEM output whatever writes it; a DMA into it must land in the step
    too, since the block is written back when the step ends."""
    vmem = _BASE.replace("            out_specs=pl.BlockSpec(memory_space=pl.ANY),\n", "")
    assert vmem != _BASE and _output_finding(vmem).plan is not None
    later = vmem.replace(_OUT, """    out = pltpu.make_async_copy(src_ref=rows, dst_ref=o_ref.at[pl.ds(i * bm, bm)], sem=sem)
    out.start()

    @pl.when(i == pl.num_programs(0) - 1)
    def _():
        out.wait()
""")
    finding = _output_finding(later)
    assert finding.plan is None and "`o_ref` is written by DMA and its DMA `out`" in finding.refusal


_NEXT_ROW = """    @pl.when(i + 1 < pl.num_programs(0))
    def _():
        pltpu.make_async_copy(table_ref.at[pl.ds(0, 1)], rows.at[pl.ds(0, 1)], sem).start()

"""


def test_a_copy_on_the_output_semaphore_left_running_is_refused():
    """A copy on the output's semaphore started and not waited in its step (a prefetch for the next
    step) adds to the count the output's `.wait()` reads, so that wait may return while the output's
    copy runs and the pipeline writes the block back without its rows. In HBM the copy still lands,
    so the interpreters agree with the rewrite; only the proof can refuse it (red team 14's open case:
    proposed as safe before)."""
    for running in (_NEXT_ROW, "    pltpu.make_async_copy(table_ref.at[pl.ds(0, 1)], rows.at[pl.ds(0, 1)], sem).start()\n"):
        finding = _output_finding(_variant(running + _OUT))
        assert finding.plan is None, running
        assert "its semaphore `sem` is also the semaphore of the DMA at line" in finding.refusal
        assert "give the output's DMA a semaphore of its own" in finding.refusal


def test_a_drained_copy_on_the_output_semaphore_is_not_left_running():
    """Started in place and drained by a kernel-level wait of the buffer the output then copies
    (the packed embedding lookup's form): every copy on the semaphore has landed. A drain of another
    buffer proves nothing about the rows the output copies."""
    start = "    pltpu.make_async_copy(table_ref.at[pl.ds(0, 1)], rows.at[pl.ds(0, 1)], sem).start()\n"
    drained = _variant(start + "    pltpu.make_async_copy(rows, rows, sem).wait()\n" + _OUT)
    assert _output_finding(drained).plan is not None
    other = _variant(start + "    pltpu.make_async_copy(table_ref, table_ref, sem).wait()\n" + _OUT)
    finding = _output_finding(other)
    assert finding.plan is None and "also the semaphore of the DMA at line" in finding.refusal


def test_a_semaphore_used_otherwise_is_refused():
    finding = _output_finding(_variant("    pltpu.semaphore_signal(sem)\n" + _OUT))
    assert finding.plan is None and "its semaphore `sem` is used other than as a DMA's semaphore" in finding.refusal
    rebound = _output_finding(_variant(_OUT.replace("    out = ", "    sem = sem\n    out = ", 1)))
    assert rebound.plan is None and "is bound again in the kernel" in rebound.refusal
