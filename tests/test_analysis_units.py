"""Unit tests for discovery, provenance and window arithmetic, on small inline kernels."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from pallas_fix.analysis.context import ModuleContext
from pallas_fix.analysis.discovery.discovery import discover
from pallas_fix.engine import analyze_source
from pallas_fix.core.model import Backend, Origin

HEADER = """
import functools
import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
"""


def _findings(body: str):
    src = HEADER + textwrap.dedent(body)
    return src, analyze_source(src, "k.py").findings


def _codes(body: str) -> list[str]:
    return [f.code for f in _findings(body)[1]]


def test_analysis_never_imports_jax():
    # Built outside the f-string: Python 3.11 allows no backslash inside an f-string expression.
    kernel = HEADER + "def k(x_ref, o_ref):\n    o_ref[pl.ds(pl.program_id(0) * 8, 8)] = x_ref[...]\n"
    code = (
        "import sys\n"
        "from pallas_fix.engine import analyze_source\n"
        f"analyze_source({kernel!r}, 'k.py')\n"
        "print(any(m == 'jax' or m.startswith('jax.') for m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize(
    "compiler_params, imports, expected",
    [
        ("pltpu.CompilerParams()", "from jax.experimental.pallas import tpu as pltpu", Backend.TPU),
        ("plgpu.CompilerParams()", "from jax.experimental.pallas import mosaic_gpu as plgpu", Backend.MOSAIC_GPU),
        ("pltr.CompilerParams(num_warps=4)", "from jax.experimental.pallas import triton as pltr", Backend.TRITON),
        ("dict(mosaic=dict())", "", Backend.TPU),
        ("{'triton': {}}", "", Backend.TRITON),
        ("None", "from jax.experimental.pallas import tpu as pltpu", Backend.TPU),
        ("None", "", Backend.UNKNOWN),
    ],
)
def test_backend_detection(compiler_params, imports, expected):
    src = HEADER + imports + textwrap.dedent(
        f"""
        def k(x_ref, o_ref):
            o_ref[...] = x_ref[...]
        def f(x):
            return pl.pallas_call(k, out_shape=x, compiler_params={compiler_params})(x)
        """
    )
    [site] = discover(ModuleContext(src))
    assert site.backend is expected


def test_discovery_forms():
    src = HEADER + textwrap.dedent(
        """
        from jax.experimental.pallas import pallas_call as PC
        def k(x_ref, o_ref, *, bs):
            o_ref[...] = x_ref[...]
        def direct(x):
            return pl.pallas_call(functools.partial(k, bs=8), out_shape=x)(x)
        def stored(x):
            call = PC(k, out_shape=x, grid_spec=pl.GridSpec(grid=(2,), in_specs=[None]))
            return call(x)
        @functools.partial(pl.pallas_call, out_shape=jax.ShapeDtypeStruct((8,), jnp.float32))
        def deco(x_ref, o_ref):
            o_ref[...] = x_ref[...]
        def use(x):
            return deco(x)
        """
    )
    sites = discover(ModuleContext(src))
    forms = {(s.form, s.kernel_name) for s in sites}
    assert forms == {("direct", "k"), ("stored", "k"), ("decorator", "deco")}
    direct = next(s for s in sites if s.form == "direct")
    assert set(direct.partial_kwargs) == {"bs"} and direct.invocation is not None
    stored = next(s for s in sites if s.form == "stored")
    assert stored.grid_spec is not None and "grid" in stored.grid_spec_keywords and stored.invocation is not None


def test_partial_bound_and_default_sizes_are_static():
    codes = _codes(
        """
        BS = 16
        def k(x_ref, o_ref, *, bs, n=2):
            for j in range(n):
                o_ref[pl.ds(j * bs, bs)] = x_ref[pl.ds(BS * j, BS)]
        def f(x):
            return pl.pallas_call(functools.partial(k, bs=8), out_shape=x)(x)
        """
    )
    assert codes == []


@pytest.mark.parametrize(
    "start, code",
    [
        # The loop accumulates into o_ref in place (`+=`): a reduction, so a loop-index start is PF102.
        ("i * 8", "PF102"),
        ("pl.multiple_of(i * 8, 8)", "PF102"),
        ("(i + 1) * 8", "PF102"),
        ("i * 8 + 3", "PF106"),
        ("i * 4", "PF106"),
        ("i.astype(jnp.float32) * 8", "PF107"),
        ("jnp.int32(3) * 8", "PF104"),
        ("idx_ref[i]", "PF105"),
        ("idx_ref[pl.ds(2, 1)]", "PF107"),
        # a one-element slice made 0-d is a scalar load (GPU interpret mode accepts it)
        ("idx_ref[pl.ds(2, 1)].reshape(())", "PF105"),
        ("idx_ref[pl.ds(2, 1)].squeeze()", "PF105"),
        ("jnp.squeeze(idx_ref[pl.ds(2, 1)])", "PF105"),
        ("idx_ref[pl.ds(2, 1)][0]", "PF105"),
        ("idx_ref[pl.ds(2, 1)].reshape((1,))", "PF107"),
    ],
)
def test_start_classification(start, code):
    codes = _codes(
        f"""
        def k(idx_ref, x_ref, o_ref):
            def body(i, c):
                o_ref[pl.ds(0, 8)] += x_ref[pl.ds({start}, 8)]
                return c
            lax.fori_loop(0, 4, body, None)
        def f(i, x):
            return pl.pallas_call(k, out_shape=x)(i, x)
        """
    )
    assert codes == [code]


def test_helper_parameters_take_their_arguments_provenance():
    src, findings = _findings(
        """
        def load_block(ref, j, size):
            return ref[pl.ds(j * size, size), :]
        def k(x_ref, o_ref):
            def body(i, acc):
                return acc + load_block(x_ref, i, 8)
            o_ref[...] = lax.fori_loop(0, 4, body, jnp.zeros((8, 128), jnp.float32))
        def f(x):
            return pl.pallas_call(k, out_shape=x)(x)
        """
    )
    [f] = findings
    assert f.code == "PF102" and f.origin == Origin.LOOP.value
    assert src.splitlines()[f.span.line - 1].strip().startswith("return ref[pl.ds(")


def test_suppression_comment():
    _, findings = _findings(
        """
        def k(x_ref, o_ref):
            o_ref[pl.ds(pl.program_id(0) * 8, 8)] = x_ref[...]  # pallas-fix: ignore[PF103]
            o_ref[pl.ds(pl.program_id(0) * 8, 8)] += 1  # pallas-fix: ignore[PF101]
        def f(x):
            return pl.pallas_call(k, out_shape=x, grid=(2,))(x)
        """
    )
    assert [f.code for f in findings] == ["PF103"]


def test_block_index_arithmetic():
    from pallas_fix.analysis.loops.affine import Coeff, block_index, decompose, Hooks
    import libcst as cst

    def hooks():
        return Hooks(
            is_dynamic=lambda e: isinstance(e, cst.Name) and e.value == "i",
            atom_key=lambda e: "i" if isinstance(e, cst.Name) and e.value == "i" else None,
            atom_bounds=lambda e: (None, None),
            static_int=lambda e: None,
            inline=lambda n: None,
            strip=lambda e: None,
            code=lambda n: cst.Module([]).code_for_node(n),
        )

    def blk(start: str, size: str):
        s = decompose(cst.parse_expression(start), hooks())
        z = decompose(cst.parse_expression(size), hooks()).as_coeff()
        return block_index(s, z)

    b = blk("(i - 1) * bs + 2 * bs", "bs")
    assert b is not None and b.atoms == {"i": 1} and b.offset == 1
    assert blk("i * bs", "bk") is None
    b = blk("2 * i * 64", "64")
    assert b.atoms == {"i": 2} and b.offset == 0
    assert blk("i * 8 + 4", "8") is None
    assert Coeff(6, ("bs",)).divide(Coeff(3, ("bs",))) == 2


def test_python_slices_with_traced_bounds_are_non_block_windows():
    codes = _codes(
        """
        def k(x_ref, o_ref):
            def body(i, c):
                o_ref[i * 8:(i + 1) * 8] = x_ref[i * 8:(i + 1) * 8]
                return c
            lax.fori_loop(0, 4, body, None)
        def f(x):
            return pl.pallas_call(k, out_shape=x)(x)
        """
    )
    assert codes == ["PF106", "PF106"]


def test_stepped_loop_trip_count_uses_the_modules_spelling_of_pallas():
    from pallas_fix.engine import fix_source

    src = textwrap.dedent(
        """
        import jax
        import jax.experimental.pallas

        def k(x_ref, o_ref):
            @jax.experimental.pallas.loop(0, x_ref.shape[0], step=8)
            def _(r):
                o_ref[jax.experimental.pallas.ds(r, 8), :] = x_ref[jax.experimental.pallas.ds(r, 8), :] * 2

        def f(x):
            assert x.shape[0] % 8 == 0  # whole steps: otherwise the last block is partial (refused)
            return jax.experimental.pallas.pallas_call(k, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
        """
    )
    out = fix_source(src, "k.py").source
    assert "jax.experimental.pallas.cdiv(x.shape[0], 8)" in out
    assert "pl." not in out.replace("jax.experimental.pallas.", "")


# The offset is a kernel-side value (`nb` reads `o_ref.shape`), so no index_map can spell it.
@pytest.mark.parametrize("lower, offset", [("nb // 2", "`nb // 2`"), ("2 * half", "`half`")])
def test_a_loop_from_a_computed_lower_bound_is_refused_for_its_offset(lower, offset):
    _, findings = _findings(
        f"""
        def k(x_ref, o_ref):
            nb = o_ref.shape[0] // 16
            half = nb // 4
            def body(i, c):
                o_ref[pl.ds(i * 16, 16)] = x_ref[pl.ds(i * 16, 16)]
                return c
            lax.fori_loop({lower}, nb, body, None)
        def f(x):
            return pl.pallas_call(k, out_shape=x)(x)
        """
    )
    assert findings and all(not f.fixable for f in findings)
    assert all(f"the block offset {offset} of" in f.refusal and "cannot be written at the pallas_call" in f.refusal
               for f in findings), [f.refusal for f in findings]


def test_refs_unpacked_in_both_arms_of_a_static_if_are_refs():
    # astronomix (real corpus part i): `*refs` unpacked one way per static flag, then read through
    # integer arrays built from the program id in a nested helper. Combining the two bindings
    # typed the ref as an int, and the kernel had no finding at all.
    src, findings = _findings(
        """
        def call(x, nx, bx, accumulate):
            def kernel(*refs):
                if accumulate:
                    f_ref, o_ref = refs
                else:
                    f_ref, o_ref = refs
                ii = (pl.program_id(0) * bx + jnp.arange(bx)) % nx
                def diff(var):
                    return f_ref[var, ii] - f_ref[var, (ii - 1) % nx]
                for var in range(2):
                    o_ref[var, ...] = diff(var)
            return pl.pallas_call(kernel, grid=(nx // bx,), out_shape=x)(x)
        """
    )
    assert [f.code for f in findings] == ["PF108", "PF108"]
    assert all("`f_ref`" in f.message for f in findings)


@pytest.mark.parametrize("appended, codes", [("(i0 + k) % n", ["PF108"]), ("k * 8", [])])
def test_a_list_holds_what_is_appended_to_it(appended, codes):
    # nufftax (real corpus part i): gather indices appended to a list bound empty; the list read
    # as the empty list's nothing, so the data-dependent gather had no finding.
    src, findings = _findings(
        f"""
        def kernel(x_ref, t_ref, o_ref, *, n):
            i0 = jnp.ceil(x_ref[:]).astype(jnp.int32)
            idx = []
            for k in range(4):
                idx.append({appended})
            acc = jnp.zeros_like(x_ref[:])
            for k in range(4):
                acc = acc + t_ref[idx[k]]
            o_ref[:] = acc
        def f(x, t):
            return pl.pallas_call(functools.partial(kernel, n=t.shape[0]), out_shape=x)(x, t)
        """
    )
    assert [f.code for f in findings] == codes
    if codes:
        [f] = findings
        assert not f.fixable and "a data-dependent gather" in f.refusal


_PICKED = '''
import functools
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _scaled_kernel(x_ref, o_ref, *, bm):
    i = pl.program_id(0)
    o_ref[pl.ds(i * bm, bm), :] = x_ref[pl.ds(i * bm, bm), :] * 2.0


def _plain_kernel(x_ref, o_ref, *, bm):
    i = pl.program_id(0)
    o_ref[pl.ds(i * bm, bm), :] = x_ref[pl.ds(i * bm, bm), :]


def run(x, scaled: bool, bm=8):
    if scaled:
        kernel_fn = _scaled_kernel
    else:
        kernel_fn = _plain_kernel
    return pl.pallas_call(
        functools.partial(kernel_fn, bm=bm),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(x.shape[0] // bm,),
        compiler_params=pltpu.CompilerParams(),
    )(x)
'''


def test_a_kernel_picked_by_a_name_bound_in_each_arm_is_read():
    """`kernel_fn = _a` / `kernel_fn = _b` in the arms of `if flag:`, then
    `functools.partial(kernel_fn, ...)` (flashoptim-jax, part j): both defs are the call's kernel.
    They got no finding at all; now each is analysed, and each variant's lift of an operand adds
    the call's specs, which both run: the two write the same specs, so they are made together
    (rewrite.callsite.variant_arms; program_id_blocks/refuse_pid_variants_disagree: blocks that
    differ are refused, naming them)."""
    findings = analyze_source(_PICKED, "k.py").findings
    lines = {f.span.line for f in findings}
    assert {11, 16} <= lines, lines  # a window of each variant
    lifts = [f for f in findings if f.code == "PF103"]
    assert lifts and all(f.plan is not None for f in lifts), [f.refusal for f in lifts]
    assert all("and the same operand's window in `_plain_kernel`" in f.plan.description for f in lifts if f.span.line == 11)
    one = _PICKED.replace("    else:\n        kernel_fn = _plain_kernel\n", "")
    assert {f.span.line for f in analyze_source(one, "k.py").findings} == {11}  # one binding: the one kernel
