"""A kernel defined once per arm of a static `if` is analysed in every def (and not rewritten); a
def redefined in one block is not a variant: only the last one runs. The same for a body a kernel
picks when it runs and hands its refs, for kernels passed to the function holding the
pallas_call, and for a `plgpu.kernel` entry."""

from __future__ import annotations

import textwrap

from pallas_fix.engine import analyze_source

_KERNEL = """
    def kernel(x_ref, o_ref):
        @pl.loop(0, x_ref.shape[0] // 16)
        def _(i):
            o_ref[pl.ds(i * 16, 16), :] = x_ref[pl.ds(i * 16, 16), :] * {factor}
"""


def _module(first_indent: str, second_indent: str, head: str, middle: str) -> str:
    one = textwrap.indent(textwrap.dedent(_KERNEL.format(factor="2.0")), first_indent)
    two = textwrap.indent(textwrap.dedent(_KERNEL.format(factor="3.0")), second_indent)
    return (
        "import jax\nfrom jax.experimental import pallas as pl\n\n\n"
        "def run(x, transpose=False):\n"
        f"{head}{one}{middle}{two}"
        "    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)\n"
    )


def _lines(src: str, text: str) -> set[int]:
    return {n for n, line in enumerate(src.splitlines(), 1) if text in line}


def test_both_arms_of_a_static_if_are_findings_and_refused():
    src = _module("        ", "        ", "    if transpose:\n", "    else:\n")
    findings = analyze_source(src, "k.py").findings
    assert {f.span.line for f in findings} == _lines(src, "o_ref[pl.ds(i * 16, 16), :] =")
    assert len(_lines(src, "o_ref[pl.ds(i * 16, 16), :] =")) == 2
    assert findings and all(not f.fixable for f in findings)
    assert all("defined 2 times in one scope" in (f.refusal or "") for f in findings), [f.refusal for f in findings]
    # Both defs take the same windows; a def whose body reads whole refs takes different ones.
    told = "`o_ref` dim 0 by a loop index, `x_ref` dim 0 by a loop index"
    assert all(f"the variants take the same windows (line 8: {told}; line 14: {told})" in f.refusal for f in findings), \
        [f.refusal for f in findings]
    whole = src.replace("            o_ref[pl.ds(i * 16, 16), :] = x_ref[pl.ds(i * 16, 16), :] * 3.0\n",
                        "            o_ref[...] = x_ref[...] * 3.0\n")
    findings = analyze_source(whole, "k.py").findings
    assert findings and all(f"the variants take different windows (line 8: {told}; line 14: whole refs)" in f.refusal
                            for f in findings), [f.refusal for f in findings]


def test_a_def_redefined_in_one_block_is_not_a_variant():
    src = _module("    ", "    ", "", "")
    findings = analyze_source(src, "k.py").findings
    last = max(_lines(src, "o_ref[pl.ds(i * 16, 16), :] ="))
    assert {f.span.line for f in findings} == {last}
    assert not any("defined 2 times" in (f.refusal or "") for f in findings)


def _per_arm_module(head: str, tail: str = "") -> str:
    """Each arm defines `kernel` and runs its own pallas_call (the second through a function the
    arm defines); `head` opens the `if` chain, `tail` is added after it."""
    one = textwrap.indent(textwrap.dedent(_KERNEL.format(factor="2.0")), "            ")
    two = textwrap.indent(textwrap.dedent(_KERNEL.format(factor="3.0")), "            ")
    call = "pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)"
    return (
        "import jax\nfrom jax.experimental import pallas as pl\n\n\n"
        "def run(x, flags):\n"
        f"{head}"
        "        if flags[0]:\n"
        f"{one}"
        f"            out = {call}\n"
        "        else:\n"
        f"{two}"
        "            def go(x):\n"
        f"                return {call}\n"
        "            out = go(x)\n"
        f"{tail}"
        "    return out\n"
    )


def test_each_arm_with_its_own_pallas_call_runs_its_own_def():
    src = _per_arm_module("    if True:\n")
    findings = analyze_source(src, "k.py").findings
    assert len({f.span.line for f in findings}) == 2
    assert findings and all(f.fixable for f in findings), [f.refusal for f in findings]


def test_arms_in_a_loop_are_variants_of_each_call():
    """In a loop, a call in one arm may run after the other arm rebound the name (a closure
    reads it when it runs)."""
    src = _per_arm_module("    for _ in range(2):\n")
    findings = analyze_source(src, "k.py").findings
    assert findings and all(not f.fixable for f in findings)



def test_an_elif_chain_gives_each_call_its_arms_def():
    """Three defs in the arms of one `if` / `elif` / `else` chain, each arm with its own call."""
    arms = []
    for n, test in enumerate(("if mode == 0:", "elif mode == 1:", "else:")):
        body = textwrap.indent(textwrap.dedent(_KERNEL.format(factor=f"{n + 2}.0")), "        ")
        call = "        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)\n"
        arms.append(f"    {test}\n{body}{call}")
    src = "import jax\nfrom jax.experimental import pallas as pl\n\n\ndef run(x, mode):\n" + "".join(arms)
    findings = analyze_source(src, "k.py").findings
    assert len({f.span.line for f in findings}) == 3
    assert findings and all(f.fixable for f in findings), [f.refusal for f in findings]


_DISPATCH = """\
import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl

BS = 16


def _whole(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2


def _tiled(x_ref, o_ref):
    i = pl.program_id(0)
    o_ref[pl.ds(i * BS, BS), :] = x_ref[pl.ds(i * BS, BS), :] * 2


def _relu(x):
    return jnp.maximum(x, 0)


def _gelu(x):
    return jax.nn.gelu(x)


def dispatching(x_ref, o_ref, *, tiled):
    kernel = _tiled if tiled else _whole
    kernel(x_ref, o_ref)


def activating(x_ref, o_ref, *, use_gelu):
    act = _gelu if use_gelu else _relu
    scale = act(jnp.float32(2.0))

    def body(i, c):
        o_ref[pl.ds(i * BS, BS), :] = act(x_ref[pl.ds(i * BS, BS), :]) * scale
        return c

    lax.fori_loop(0, x_ref.shape[0] // BS, body, 0)


def looping(x_ref, o_ref, *, tiled):  # `dispatching`, with the call in a loop body
    kernel = _tiled if tiled else _whole

    @pl.loop(0, 2)
    def _(j):
        kernel(x_ref, o_ref)


def run(x, tiled=True):
    y = pl.pallas_call(functools.partial(dispatching, tiled=tiled), grid=(x.shape[0] // BS,),
                       out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
    return pl.pallas_call(functools.partial(activating, use_gelu=True),
                          out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(y)
"""


def test_a_body_a_kernel_picks_and_hands_its_refs_is_analysed_and_refused():
    """`kernel = _tiled if tiled else _whole; kernel(x_ref, o_ref)`: _tiled's windows are
    findings, and no fix: one set of BlockSpecs would serve _whole too."""
    # called in the kernel, or in a loop body inside it
    in_loop = _DISPATCH.replace("functools.partial(dispatching,", "functools.partial(looping,")
    for kernel, src in (("dispatching", _DISPATCH), ("looping", in_loop)):
        findings = [f for f in analyze_source(src, "k.py").findings if f.kernel == kernel]
        assert {f.span.line for f in findings} == _lines(_DISPATCH, "o_ref[pl.ds(i * BS, BS), :] = x_ref")
        assert findings and all(not f.fixable for f in findings)
        assert all("a name bound to one of `_tiled`, `_whole`" in (f.refusal or "") for f in findings), [f.refusal for f in findings]


def test_an_activation_picked_by_a_flag_keeps_the_fix():
    """`act = _gelu if use_gelu else _relu` called on values touches no ref: the lift stands."""
    findings = [f for f in analyze_source(_DISPATCH, "k.py").findings if f.kernel == "activating"]
    assert len(findings) == 2 and all(f.fixable for f in findings), [f.refusal for f in findings]


def test_kernels_passed_to_a_helper_get_their_own_specs_at_their_calls():
    """Each call passes its kernel with its own grid, and the helper writes no specs: the lift
    gives the helper spec parameters defaulting to `pl.no_block_spec` and writes the lifted
    kernel's specs at its own call, so the other kernel's call runs as before
    (rewrite.callsite.spec_params)."""
    from kernel_loading import FIXTURES
    from pallas_fix.engine import fix_source

    path = FIXTURES / "detect" / "kernel_passed_to_helper.py"
    findings = analyze_source(path.read_text(), str(path)).findings
    assert {f.kernel for f in findings} == {"_scale_kernel", "_shift_kernel"}
    assert all(f.fixable for f in findings if f.kernel == "_scale_kernel"), [f.refusal for f in findings]
    assert not any(f.fixable for f in findings if f.kernel == "_shift_kernel")
    fixed = fix_source(path.read_text(), str(path)).source
    assert "def call_kernel(*, kernel, grid, in_specs=pl.no_block_spec, out_specs=pl.no_block_spec):" in fixed
    assert "            in_specs=in_specs,\n            out_specs=out_specs,\n" in fixed
    assert "in_specs=[pl.BlockSpec((BS, x.shape[1]), lambda i: (i, 0))]," in fixed
    assert "return call_kernel(kernel=_shift_kernel, grid=(1,)) + y" in fixed  # whole, as before
    # A helper that binds the name a new parameter would take gets no such parameter: the input's
    # spec would go into the one pallas_call, refused; the output's is threaded alone.
    src = path.read_text().replace("        return pl.pallas_call(", "        in_specs = None\n        return pl.pallas_call(")
    findings = [f for f in analyze_source(src, str(path)).findings if f.kernel == "_scale_kernel"]
    assert [f.fixable for f in findings] == [True, False], [f.refusal for f in findings]
    assert "lifting `_scale_kernel` would change `call_kernel`" in findings[1].refusal
    fixed = fix_source(src, str(path)).source
    assert "out_specs=out_specs" in fixed and "in_specs=in_specs" not in fixed
    # A decorated helper (`jax.jit` may take a list argument as static or traced) takes none.
    src = path.read_text().replace("    def call_kernel(", "    @jax.named_call\n    def call_kernel(")
    assert not any(f.fixable for f in analyze_source(src, str(path)).findings)


def test_a_plgpu_kernel_entry_is_analysed_and_refused():
    from kernel_loading import FIXTURES

    path = FIXTURES / "detect" / "mosaic_gpu_kernel_entry.py"
    findings = analyze_source(path.read_text(), str(path)).findings
    assert [f.code for f in findings] == ["PF109"] * 3
    assert all(not f.fixable and "runs under `plgpu.kernel`" in (f.refusal or "") for f in findings)


def test_one_kernel_every_call_passes_in_is_lifted_and_a_call_that_hides_its_kernel_refuses_it():
    """`call_kernel(x, kernel=_scale_kernel, ...)` twice: the pallas_call runs that one kernel, so
    its windows are fixable (the golden pair is program_id_blocks/pid_kernel_passed_in). Once some
    use of the helper does not say which kernel it passes, the pallas_call may run another."""
    from kernel_loading import FIXTURES

    src = (FIXTURES / "codemods" / "program_id_blocks" / "pid_kernel_passed_in_before.py").read_text()
    assert [f.fixable for f in analyze_source(src, "k.py").findings] == [True, True]
    hidden = (
        src.replace("    y = call_kernel(x,", "    g = call_kernel\n    y = call_kernel(x,"),
        src.replace("call_kernel(y, kernel=_scale_kernel, factor=3.0)", "call_kernel(y, **dict(kernel=_scale_kernel, factor=3.0))"),
        src.replace("call_kernel(y, kernel=_scale_kernel, factor=3.0)", "call_kernel(y, kernel=jax.nn.relu, factor=3.0)"),
        # the helper rebinds its kernel parameter: its pallas_call may run a kernel no call passes
        src.replace("        return pl.pallas_call(\n            functools.partial(kernel,",
                    "        if factor > 2.5:\n            kernel = jax.nn.relu\n        return pl.pallas_call(\n"
                    "            functools.partial(kernel,"),
        # a module-level helper: another module may pass it another kernel
        src.replace("def scale_twice(x):\n    def call_kernel", "def call_kernel").replace(
            "        )(y)\n\n    y = call_kernel", "        )(y)\n\n\ndef scale_twice(x):\n    y = call_kernel"),
    )
    for changed in hidden:
        findings = analyze_source(changed, "k.py").findings
        assert findings and all(not f.fixable and "so the one pallas_call may run other kernels" in (f.refusal or "") for f in findings), \
            [f.refusal for f in findings]


def test_two_kernels_passed_in_are_refused_saying_how_their_windows_compare():
    from kernel_loading import FIXTURES

    src = (FIXTURES / "codemods" / "program_id_blocks" / "pid_kernel_passed_in_before.py").read_text()
    negate = "\n\ndef _negate_kernel(x_ref, o_ref, *, factor):\n    i = pl.program_id(0)\n    o_ref[pl.ds(i * BS, BS), :] = -x_ref[pl.ds(i * BS, BS), :]\n"
    same = src.replace("\n\ndef scale_twice", negate + "\n\ndef scale_twice").replace(
        "call_kernel(y, kernel=_scale_kernel, factor=3.0)", "call_kernel(y, kernel=_negate_kernel, factor=3.0)")
    findings = analyze_source(same, "k.py").findings
    assert len(findings) == 4 and all(not f.fixable for f in findings)
    # Each kernel's specs would go to its own call, but the helper's out_shape reads its own `y`.
    assert all(f.refusal.startswith("`y` in out_shape (line 29) reads names of `call_kernel`, and the specs of this kernel "
                                    "are written at its call") for f in findings), [f.refusal for f in findings]
    # A helper decorated (no spec parameters threaded through it): the windows compared.
    deco = same.replace("    def call_kernel(", "    @jax.named_call\n    def call_kernel(")
    findings = analyze_source(deco, "k.py").findings
    assert len(findings) == 4 and all(not f.fixable for f in findings)
    assert all("pass 2 kernels (`_scale_kernel` (line 34), `_negate_kernel` (line 35))" in f.refusal
               and "their windows fall on the same operands the same way, but pallas-fix does not lift kernels passed in together"
               in f.refusal for f in findings), [f.refusal for f in findings]
    # Windowed by a loop in one and by the program id in the other: named per operand (the grid
    # written in the helper, so that the calls share it).
    path = FIXTURES / "detect" / "kernel_passed_to_helper.py"
    src = path.read_text().replace("grid=grid,", "grid=(x.shape[0] // BS,),").replace(", grid=(x.shape[0] // BS,))", ")")
    src = src.replace(", grid=(1,))", ")").replace("def call_kernel(*, kernel, grid):", "@jax.named_call\n    def call_kernel(*, kernel):")
    findings = analyze_source(src, str(path)).findings
    assert all("their windows differ (operand 0: dim 0 by pl.program_id(0) in `_scale_kernel` (`x_ref`), "
               "dim 0 by a loop index in `_shift_kernel` (`x_ref`); operand 1:" in f.refusal for f in findings), [f.refusal for f in findings]


def test_a_body_picked_when_the_kernel_runs_is_refused_saying_how_the_variants_compare():
    """The refusal says whether one lift could serve every variant: different windows (`_whole`
    takes whole refs), the same windows (still refused: the lift would be written in a body
    picked at run time), or a variant not defined in the module (nothing to compare)."""
    def refusals(src: str) -> list[str]:
        return [f.refusal or "" for f in analyze_source(src, "k.py").findings if f.kernel == "dispatching"]

    assert all("the variants take different windows (`_tiled`: `o_ref` dim 0 by pl.program_id(0), `x_ref` dim 0 by "
               "pl.program_id(0); `_whole`: whole refs)" in r for r in refusals(_DISPATCH))
    same = _DISPATCH.replace("    o_ref[...] = x_ref[...] * 2\n", "    i = pl.program_id(0)\n    o_ref[pl.ds(i * BS, BS), :] = x_ref[pl.ds(i * BS, BS), :] * 3\n")
    found = refusals(same)
    assert len(found) == 4 and all("the variants take the same windows" in r and "`_whole`: `o_ref` dim 0 by pl.program_id(0)" in r
                                   and "does not lift windows in a body picked when the kernel runs" in r for r in found), found
    missing = _DISPATCH.replace("kernel = _tiled if tiled else _whole\n    kernel(x_ref, o_ref)",
                                "kernel = _tiled if tiled else _elsewhere\n    kernel(x_ref, o_ref)")
    found = refusals(missing)
    assert found and all("`_elsewhere` is not defined in this module, so whether every variant needs the same grid axis "
                         "and blocks cannot be checked" in r for r in found), found


_DEFAULT_KERNEL = """
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

BS = 16


def _plain_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] - jnp.mean(x_ref[...])


def _fast_kernel(x_ref, o_ref):
    i = pl.program_id(0)
    o_ref[pl.ds(i * BS, BS), :] = x_ref[pl.ds(i * BS, BS), :] * 2.0


def scale(x, kernel=_plain_kernel, fast=False):
{rebind}
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(x.shape[0] // BS,))(x)
"""


def test_a_kernel_parameter_assigned_only_under_an_if_is_not_that_assignment():
    """`if fast: kernel = _fast_kernel` leaves the caller's kernel (here `_plain_kernel`, a whole-array
    mean) in the pallas_call otherwise: lifting `_fast_kernel` there gave `scale(x)` per-block means.
    An assignment every run makes before the call (a top-level statement) is the kernel."""
    for rebind in ("    if fast:\n        kernel = _fast_kernel", "    for _ in range(1):\n        kernel = _fast_kernel"):
        findings = analyze_source(_DEFAULT_KERNEL.format(rebind=rebind), "k.py").findings
        assert len(findings) == 2 and all(
            not f.fixable and "reaches its pallas_call through `kernel`, a parameter of `scale` that line 20 assigns it only "
            "on some runs; on the others the same pallas_call runs the caller's kernel" in (f.refusal or "")
            for f in findings), (rebind, [f.refusal for f in findings])
    assert not analyze_source(_DEFAULT_KERNEL.format(rebind="    pass"), "k.py").findings  # whatever the caller passes
    findings = analyze_source(_DEFAULT_KERNEL.format(rebind="    kernel = _fast_kernel"), "k.py").findings
    assert [f.fixable for f in findings] == [True, True], [f.refusal for f in findings]


_RELAYED = '''
import jax
from jax.experimental import pallas as pl

BS = 16


def _scale_kernel(x_ref, o_ref):
    i = pl.program_id(0)
    o_ref[pl.ds(i * BS, BS), :] = x_ref[pl.ds(i * BS, BS), :] * 2.0


def make_call(kernel, out_shape, grid):
    return pl.pallas_call(kernel, out_shape=out_shape, grid=grid)


def launch(kernel, x):
    return make_call(kernel, jax.ShapeDtypeStruct(x.shape, x.dtype), (x.shape[0] // BS,))(x)


def scale(x):
    return launch(_scale_kernel, x)
'''


def test_a_kernel_handed_on_through_two_helpers_is_analysed_and_refused():
    """`launch(kernel)` passes its parameter on to `make_call(kernel)`, which holds the pallas_call
    (rwkv_ops' launcher): the kernel is found through both, its windows reported, their fixes
    refused naming the chain; a kernel passed through one helper stays as it was."""
    findings = analyze_source(_RELAYED, "k.py").findings
    assert [f.kernel for f in findings] == ["_scale_kernel"] * 2, [f.kernel for f in findings]
    assert all(not f.fixable and f.refusal.startswith(
        "kernel `_scale_kernel` reaches its pallas_call through `launch` (line 22) then `make_call` (line 18)")
        for f in findings), [f.refusal for f in findings]
    # `launch` rebinding its parameter says nothing of which kernel runs: nothing is followed.
    rebound = _RELAYED.replace("def launch(kernel, x):\n", "def launch(kernel, x):\n    kernel = jax.named_call(kernel)\n")
    assert analyze_source(rebound, "k.py").findings == []


def test_each_kernel_passed_to_one_pallas_call_is_planned_on_its_own():
    """Kernels passed to one helper share its pallas_call node; their refs of one name (`o_ref`,
    `x_ref`) are planned per kernel, and each refusal names its own kernel (redteam10 found
    `_swap_kernel`'s findings refused in `_scale_kernel`'s name)."""
    src = '''
import functools

import jax
from jax.experimental import pallas as pl


def _scale_kernel(x_ref, o_ref, *, factor):
    i = pl.program_id(0)
    o_ref[i] = x_ref[i] * factor


def _swap_kernel(x_ref, y_ref, o_ref):
    i = pl.program_id(0)
    o_ref[i] = x_ref[i] + y_ref[0, i]


def _call(kernel, args, out_shape, n):
    return pl.pallas_call(kernel, grid=(n,), out_shape=out_shape)(*args)


def run(x, y):
    a = _call(functools.partial(_scale_kernel, factor=2.0), (x,), jax.ShapeDtypeStruct(x.shape, x.dtype), x.shape[0])
    b = _call(functools.partial(_scale_kernel, factor=3.0), (y[0],), jax.ShapeDtypeStruct(y[0].shape, y.dtype), y.shape[1])
    return _call(_swap_kernel, (a, y), jax.ShapeDtypeStruct(a.shape, a.dtype), a.shape[0]), b
'''
    findings = analyze_source(src, "k.py").findings
    assert {f.kernel for f in findings} == {"_scale_kernel", "_swap_kernel"}
    assert all(not f.fixable and f.refusal.startswith(f"kernel `{f.kernel}` reaches its pallas_call") for f in findings), \
        [(f.kernel, f.refusal) for f in findings]
