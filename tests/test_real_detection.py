"""Static detection agrees with the jaxpr oracle on every kernel of the real corpus
(tests/fixtures/real/, held-out files included; issue 28): a file whose traced kernels have a
dynamic window gets findings, a finding stands in the statement of each such window (jax names
the line a multi-line call starts on, the detector the subscript's own), and every traced scalar
index the oracle sees is one the detector lists. Non-array example values stay static, as in
benchmarks/bench_coverage.py. KNOWN_GAPS lists what the detector still misses, file by file:
the test fails when a gap grows and when one closes (then shrink the table). ATTRIBUTED maps the
lines where jax names an access away from its kernel line (a custom_vjp rule's kernel, named at
the primal call) to the kernel lines the detector must cover instead."""

from __future__ import annotations

from pathlib import Path

import pytest

import libcst as cst

from kernel_loading import FIXTURES, load_module
from pallas_fix.analysis.accesses import scalar_index_dims
from pallas_fix.analysis.context import own_nodes
from pallas_fix.core.plans import use_key
from pallas_fix.engine import analyze_source
from pallas_fix.verify.examples.sources import collect_examples

REAL = sorted((FIXTURES / "real").glob("*.py"))

# file -> (window lines, scalar lines) of the jaxpr that no finding / no listed index covers yet.
KNOWN_GAPS: dict[str, tuple[set[int], set[int]]] = {
    # held-out files: lines from the oracle, not looked into.
    "marin__gated_rms_norm_gpu.py": ({101, 103, 104, 105, 106}, set()),
    "ring_attention_pallas__bwd_block.py": ({188}, set()),
    "sglang_jax__simple_gla_decode.py": ({73, 75, 126, 133}, set()),
    # part d (added with the files, from the test's own output; the planners were not read):
    # the Mosaic GPU ragged dot's windows, the TPU paged attention's page-table and length reads.
    "jax__mgpu_ragged_dot.py": ({131, 214}, set()),
    # (155, 175, 187 and 354 are listed since the kernel picked in the arms of `if inline_seq_dim:` is read)
    "jax__tpu_paged_attention.py": (set(), {69, 85, 97, 167}),
    # part e (added with the files, from the test's own output; the planners were not read):
    # the spike flag read by program id inside a decorator, `@pl.when(spike_ref[i_row])`.
    "brainevent__csr_plasticity_pre.py": (set(), {33, 47}),
    # part g (added with the files, from the test's own output; the planners were not read): the
    # RWKV-7 Triton scalar row `ref[b_idx, t, h, :]` read in the closure `load(ref)` inside the
    # token loop. cax's query window, `pl.ds(pl.program_id(0) * block_queries, ...)` returned by
    # its helper `_queries(...)`, was a gap too until the detector read a def that only returns a slice.
    "maxtext__rwkv7_wkv_gpu.py": (set(), {38}),
    # part i (added with the files, from the test's own output; the planners were not read): the
    # page-table reads and DMAs inside the methods of JetStream's `MultiPageAsyncCopyDescriptor`
    # (`self._page_indices[...]`, the `.start()` of `pages_hbm_ref.at[page_index]`, the read of
    # `vmem_buffer.at[buffer_index]`; held out, the lines are the oracle's). astronomix's windows
    # (refs unpacked in both arms of a static `if`) and nufftax's gather (indices appended to a
    # list) were gaps too until the detector read those forms.
    "jetstream__chunked_prefill_attention.py": (set(), {55, 63, 70}),
    # part j (added with the files, from the test's own output; the planners were not read): the
    # held-out Mosaic GPU chunk bmm: lines from the oracle. flashoptim's program-id chunks (the
    # kernel picked in the arms of `if quantize:` and handed on through `functools.partial`) got
    # no finding until discovery read a name bound to a def in each arm.
    "mamba2_jax_pallas__bmm_chunk_mgpu.py": ({78}, {75, 78}),
    # part k (added with the files, from the test's own output): dropless-moe's block-sparse
    # matmul reads its BlockCSR tables at the carry of a `lax.while_loop` (`A_col_ind[i]`,
    # `A_data[i]`), an index the detector does not follow through while_loop carries (its windows
    # do get findings); the held-out KDA DMA pre-process: lines from the oracle, not looked into.
    "dropless_moe__dsd_matmul.py": (set(), {62, 63}),
    "primatrix_tokamax__kda_bwd_dhu_pre_process.py": ({79}, {79}),
}
# Where jax names an access away from the kernel line the detector reports it at: file -> {the
# oracle's line: the kernel lines it stands for}. The backward rule of a custom_vjp is traced
# under the source info of the primal call (`_rms_call(...)`, line 131), so its kernel's
# windows (lines 52, 54, 69) come out at that call.
ATTRIBUTED: dict[str, dict[int, set[int]]] = {
    "easydel__rms_norm.py": {131: {52, 54, 69}},
}
# Files whose kernels have dynamic windows and no finding at all (held-out ones not looked into).
NO_FINDING: set[str] = set()


def _statement_lines(ctx, sub: cst.Subscript) -> set[int]:
    """The lines of the simple statement that holds `sub` (of `sub` itself in a compound one),
    and where that statement binds a DMA (`gather = pltpu.make_async_copy(src.at[...], ...)`) the
    lines of the `gather.start()` / `gather.wait()` statements, where jax names its accesses."""
    stmt = ctx.statement_of(sub)
    span = ctx.span(stmt if isinstance(stmt, cst.SimpleStatementLine) else sub)
    lines = set(range(span.line, span.end_line + 1))
    assign = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 else None
    if isinstance(assign, cst.Assign) and len(assign.targets) == 1 and isinstance(assign.targets[0].target, cst.Name):
        name = assign.targets[0].target.value
        for other in getattr(ctx.parent(stmt), "body", ()):
            call = other.body[0].value if isinstance(other, cst.SimpleStatementLine) and isinstance(other.body[0], cst.Expr) else None
            if (isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute) and call.func.attr.value in ("start", "wait")
                    and isinstance(call.func.value, cst.Name) and call.func.value.value == name):
                lines.add(ctx.span(other).line)
    return lines


def _static(path: Path, source: str) -> tuple[set[int], set[int], set[int]]:
    """(lines of the window findings, every line of their statements, every line of the
    statements of the traced integer scalar indices the detector lists)."""
    result = analyze_source(source, str(path))
    analysis = result.analysis
    ctx = analysis.ctx
    scalar = {use_key(u) for u in result.uses if u.kind == "scalar"}
    anchors = {f.anchor for f in result.findings if f.code.startswith("PF1") and f.anchor not in scalar}
    windows = [u for u in result.uses if use_key(u) in anchors]
    covered = set().union(*(_statement_lines(ctx, u.subscript) for u in windows))
    scalars: set[int] = set()
    for fn, env in (analysis.detection.envs.items() if analysis.detection is not None else ()):
        for node in own_nodes(fn.body):
            if type(node) is cst.Subscript and scalar_index_dims(node, env):
                scalars |= _statement_lines(ctx, node)
    return {u.span.line for u in windows}, covered, scalars


def oracle_lines(path: Path, source: str) -> tuple[set[int], set[int]]:
    """(window lines, scalar lines) of the dynamic ref accesses the jaxpr oracle finds in the
    kernels `path`'s examples trace to, at `path`'s own lines."""
    from pallas_fix.verify.judge.oracle import example_report

    examples = collect_examples(path, source, pyproject=False, recorded=False)
    assert examples, f"{path.name} has no example directive"
    module = load_module(path)
    windows: set[int] = set()
    scalars: set[int] = set()
    attributed = ATTRIBUTED.get(path.name, {})
    for ex in examples:
        report = example_report(getattr(module, ex.entry), ex)
        for a in report.accesses:
            if a.line is None or not a.file or Path(a.file).name != path.name:
                continue
            (scalars if a.kind == "scalar" else windows).update(attributed.get(a.line, {a.line}))
    return windows, scalars


@pytest.fixture(scope="module")
def lines():
    cache: dict[Path, tuple] = {}

    def get(path: Path):
        if path not in cache:
            source = path.read_text(encoding="utf-8")
            cache[path] = (oracle_lines(path, source), *_static(path, source))
        return cache[path]

    return get


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.stem)
def test_a_kernel_with_dynamic_windows_has_findings(path: Path, lines) -> None:
    (windows, _), static_lines, _, _ = lines(path)
    assert bool(static_lines or not windows) != (path.name in NO_FINDING), (
        f"{path.name}: dynamic windows in the jaxpr at lines {sorted(windows)}, no finding" if path.name not in NO_FINDING
        else f"{path.name} now has findings: take it out of NO_FINDING")


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.stem)
def test_every_dynamic_window_in_the_jaxpr_has_a_finding(path: Path, lines) -> None:
    (windows, _), _, covered, _ = lines(path)
    missing = windows - covered
    assert missing == KNOWN_GAPS.get(path.name, (set(), set()))[0], (
        f"{path.name}: dynamic windows in the jaxpr with no finding in their statement: {sorted(missing)}")


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.stem)
def test_every_scalar_index_in_the_jaxpr_is_listed(path: Path, lines) -> None:
    (_, scalars), _, _, static_scalars = lines(path)
    missing = scalars - static_scalars
    assert missing == KNOWN_GAPS.get(path.name, (set(), set()))[1], (
        f"{path.name}: traced scalar indices in the jaxpr that the detector does not list: {sorted(missing)}")


def _findings(name: str):
    path = FIXTURES / "real" / name
    return analyze_source(path.read_text(encoding="utf-8"), str(path)).findings


def test_a_prefetched_table_read_by_program_id_is_no_finding() -> None:
    """`lengths_ref[b]`, `b = pl.program_id(0)`: a scalar-prefetch entry read, already the fix form."""
    assert [f for f in _findings("maxtext__ragged_mqa.py") if f.code.startswith("PF1")] == []


def test_a_time_step_read_by_a_carrying_loop_is_a_refused_finding() -> None:
    """`x_ref[:, i + 1]` in a scan body bound with functools.partial: one time step per iteration
    of a loop that carries h, a dynamic access of the kernel's refs reported (PF102) and not lifted."""
    found = [f for f in _findings("recurrentgemma__lru_scan.py") if f.code.startswith("PF1")]
    assert sorted((f.span.line, f.code) for f in found) == [(126, "PF102"), (127, "PF102"), (129, "PF102")]
    assert all(not f.fixable and f.refusal for f in found)


def test_an_atomic_scatter_is_a_refused_integer_array_index() -> None:
    """`atomic_add(out_ref, jnp.where(m, positions, 0), v)` (line 44): the index is the atomic's
    argument, loaded from a ref; reported at the call as PF108 and left as it is, with why."""
    found = [f for f in _findings("brainevent__csr_diag_add.py") if f.span.line == 44]
    assert [f.code for f in found] == ["PF108"]
    assert not found[0].fixable
    assert found[0].refusal.startswith("`atomic_add` scatters into the whole `out_ref` at positions the kernel computes")
