"""Kernels that reach their pallas_call through a chain of launcher helpers and a `**settings`
dict (issue 28, pass-lin/rwkv_ops' `launch` / `make_pallas_call`): the dict literal is read as
the call's keywords, a compiler_params set under a branch the config fixes names the backend,
the spec parameters are threaded through every helper, and what the chain cannot hand on is
refused, saying why. The golden pair is program_id_blocks/pid_launcher_chain (interpreters and
jaxpr checks run by test_codemod_pairs)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from kernel_loading import FIXTURES, load_module

from pallas_fix.core.model import Backend
from pallas_fix.engine import analyze_source, fix_source

_PAIR = FIXTURES / "codemods" / "program_id_blocks" / "pid_launcher_chain"
_BEFORE = _PAIR.with_name(_PAIR.name + "_before.py")
_AFTER = _PAIR.with_name(_PAIR.name + "_after.py")


def _sites(src: str) -> dict:
    return {s.kernel_name: s for s in analyze_source(src, "k.py").analysis.sites}


def _refusals(src: str, kernel: str) -> set:
    return {f.refusal for f in analyze_source(src, "k.py").findings if f.kernel == kernel and not f.fixable}


def test_the_dict_entries_and_a_compiler_params_under_a_fixed_branch_are_the_calls_keywords():
    sites = _sites(_BEFORE.read_text())
    norm = sites["_norm_kernel"]
    assert norm.backend is Backend.TRITON and norm.backend_reason == "compiler_params is the Triton CompilerParams"
    assert norm.forwarded == ("grid", "in_specs", "out_specs", "out_shape") and norm.thread == ("in_specs", "out_specs")
    assert [norm.keywords[k].value.__class__.__name__ for k in ("grid", "out_shape")] == ["Tuple", "List"]  # the outer call's


def _both_backends(src: str) -> str:
    """`every_whole` importing Mosaic GPU as rwkv_ops' whole_specs does: the imports name no one backend."""
    return src.replace("def every_whole(count, backend):\n", "def every_whole(count, backend):\n    from jax.experimental.pallas import mosaic_gpu as plgpu\n\n")


def test_a_branch_the_config_does_not_fix_leaves_the_backend_unknown_and_says_so():
    src = _both_backends(_BEFORE.read_text()).replace('setup = Setup("triton")', "setup = Setup(backend_name())")
    src = src.replace("INTERPRET = True\n", "INTERPRET = True\n\n\ndef backend_name():\n    return \"triton\"\n")
    norm = _sites(src)["_norm_kernel"]
    assert norm.backend is Backend.UNKNOWN
    assert norm.backend_reason.startswith('compiler_params is set only under `if setup.backend == "triton"` (line '), norm.backend_reason
    assert not norm.forwarded  # whole pl.ANY specs are whole arrays on Triton only
    assert all("reaches its pallas_call through `run`" in r for r in _refusals(src, "_norm_kernel"))


def test_a_branch_the_config_rules_out_sets_nothing():
    src = _both_backends(_BEFORE.read_text()).replace('setup = Setup("triton")', 'setup = Setup("mgpu")')
    norm = _sites(src)["_norm_kernel"]
    assert "compiler_params" not in norm.keywords and norm.backend is Backend.UNKNOWN
    assert norm.backend_reason == "no compiler_params or backend-specific import (use --backend)"


def test_settings_the_dict_does_not_say_are_refused_with_what_to_change():
    src = _BEFORE.read_text()
    cases = {
        "written twice": src.replace('        settings["compiler_params"]', '        settings["grid"] = grid\n        settings["compiler_params"]'),
        "also read or changed": src.replace("    return pl.pallas_call(kernel, interpret=INTERPRET, **settings)",
                                            "    settings.update(interpret=INTERPRET)\n    return pl.pallas_call(kernel, **settings)"),
        "built by a loop": src.replace('    settings = {\n        "grid": grid,', '    settings = {\n        "grid": grid,\n    }\n    for key in ():\n        settings[key] = None\n    settings |= {'),
    }
    for label, varied in cases.items():
        assert varied != src, label
        told = _refusals(varied, "_norm_kernel")
        assert told and all("reaches its pallas_call through `run` (line" in r and "`**` settings pallas-fix cannot read" in r
                            for r in told), (label, told)
        assert fix_source(varied, "k.py", unsafe=True).source == varied, label


def test_a_parameter_handed_over_with_double_star_is_not_read():
    src = _BEFORE.read_text().replace("def build(kernel, n_in, out_shape, setup, grid):", "def build(kernel, n_in, out_shape, setup, grid, extra={}):")
    src = src.replace("**settings)", "**settings, **extra)")
    assert all("`**` settings pallas-fix cannot read" in r for r in _refusals(src, "_norm_kernel"))


def test_a_helper_of_the_chain_called_elsewhere_is_refused_naming_the_call():
    """`build` also called directly: a kernel reaching it by both routes gets no threaded specs, and
    one passed only directly leaves `build` called twice: the chain may run other kernels."""
    direct = "    return y + z + w + build({k}, 1, [x], Setup(\"triton\"), (1,))(x)[0]\n"
    src = _BEFORE.read_text().replace("    return y + z + w\n", direct.format(k="_double_kernel"))
    told = _refusals(src, "_norm_kernel")
    assert told and all("and a kernel reaches the pallas_call through more than one call, so the lift cannot give each" in r
                        for r in told), told
    src = _BEFORE.read_text().replace("    return y + z + w\n", direct.format(k="_flip_kernel")).replace(
        "def norm_then_gate(", "def _flip_kernel(x_ref, o_ref):\n    o_ref[...] = x_ref[...][::-1]\n\n\ndef norm_then_gate(")
    told = _refusals(src, "_norm_kernel")
    assert told and all("`build` is called 2 times, not only by `run`, so the chain may run other kernels" in r for r in told), told


def test_an_out_shape_built_by_a_function_is_read_at_the_outer_call():
    """`_outs(x)` passed down the chain: read as the list it returns, in the outer call's names
    (tests/test_built_out_shapes.py has the reader's own cases and refusals)."""
    src = _BEFORE.read_text().replace("def norm_then_gate(x, g):", "def _outs(x):\n    return [jax.ShapeDtypeStruct(x.shape, x.dtype)]\n\n\ndef norm_then_gate(x, g):")
    src = src.replace("y = run(_norm_kernel, [jax.ShapeDtypeStruct((B, N, D), x.dtype)],", "y = run(_norm_kernel, _outs(x),")
    assert not _refusals(src, "_norm_kernel")
    fixed = fix_source(src, "k.py", unsafe=True).source
    assert "_outs(x)," in fixed  # the out_shape stays as written
    assert "out_specs=[pl.BlockSpec((None, None, x.shape[2]), lambda i, j: (i, j, 0))]" in fixed, fixed


def test_a_grid_written_inside_the_chain_is_not_read_at_the_outer_call():
    src = _BEFORE.read_text().replace("    call = build(kernel, len(operands), out_shape, setup, grid)",
                                      "    call = build(kernel, len(operands), out_shape, setup, (grid[0], grid[1]))")
    told = _refusals(src, "_norm_kernel")
    assert told and all("its grid `grid` is not a parameter every helper hands on untouched from the outermost call" in r
                        for r in told), told


def test_specs_other_than_whole_arrays_are_not_threaded():
    src = _BEFORE.read_text().replace("    return [pl.BlockSpec(memory_space=pl.ANY) for _ in range(count)]",
                                      "    return [pl.BlockSpec((1, 1, 16), lambda i, j: (i, j, 0)) for _ in range(count)]")
    told = _refusals(src, "_norm_kernel")
    assert told and all("its spec list other than absent or whole arrays on Triton" in r for r in told), told


def test_a_caller_passing_no_specs_gets_the_whole_arrays_it_got_before():
    """Another module calling `run` with a kernel of its own and no specs: the threaded `run` and
    `build` hand it the whole specs of before."""
    before, after = load_module(_BEFORE), load_module(_AFTER)
    x = jnp.arange(2 * 3 * 16, dtype=jnp.float32).reshape(2, 3, 16)

    def flip(x_ref, o_ref):
        o_ref[...] = x_ref[...][::-1]

    outs = [m.run(flip, [jax.ShapeDtypeStruct(x.shape, x.dtype)], (1,), (x,))[0] for m in (before, after)]
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_array_equal(outs[1], x[::-1])
    assert "def run(kernel, out_shape, grid, operands, in_specs=None, out_specs=None):" in _AFTER.read_text()


def test_a_key_written_after_the_call_and_a_shadowing_name_are_refused():
    src = _BEFORE.read_text().replace("    return pl.pallas_call(kernel, interpret=INTERPRET, **settings)",
                                      "    call = pl.pallas_call(kernel, interpret=INTERPRET, **settings)\n"
                                      "    settings[\"name\"] = \"late\"\n    return call")
    assert all("`**` settings pallas-fix cannot read" in r for r in _refusals(src, "_norm_kernel"))
    src = _BEFORE.read_text().replace("    setup = Setup(\"triton\")\n", "    setup = Setup(\"triton\")\n    out_specs = None\n")
    told = _refusals(src, "_norm_kernel")
    assert told and all("a helper of the chain binds a name `out_specs` of its own, which a new spec parameter would shadow" in r for r in told), told


def test_a_chain_whose_pallas_call_takes_no_specs_gets_them_threaded_and_runs_the_same():
    """No spec entries in the dict: the chain gets parameters defaulting to `pl.no_block_spec`, the
    pallas_call takes them beside `**settings`, and a later round reads them through the chain."""
    src = _BEFORE.read_text().replace('        "in_specs": every_whole(n_in, setup.backend),\n', "").replace(
        '        "out_specs": every_whole(len(out_shape), setup.backend),\n', "")
    fixed = fix_source(src, "k.py")
    assert not fixed.error and fixed.source != src
    assert "kernel, out_shape, grid, operands, in_specs=pl.no_block_spec, out_specs=pl.no_block_spec\n):" in fixed.source
    assert "in_specs=in_specs" in fixed.source.split("def run(")[0]  # the pallas_call takes them
    assert not any(f.fixable or "reaches its pallas_call" in (f.refusal or "") for f in analyze_source(fixed.source, "k.py").findings)
    before = load_module(_BEFORE, src)
    after = load_module(_AFTER, fixed.source)
    x = jax.random.normal(jax.random.key(0), (2, 3, 16), jnp.float32)
    g = jax.random.normal(jax.random.key(1), (2, 3), jnp.float32)
    np.testing.assert_allclose(after.norm_then_gate(x, g), before.norm_then_gate(x, g), rtol=1e-6)


def test_a_chain_of_three_helpers_threads_every_one_and_names_them_outermost_first():
    """`run` -> `dispatch` -> `build`: KernelSite.relayed_by is outermost first (it was innermost first
    from discovery, unnoticed with one relay), every helper hands the specs on, and the rewrite runs
    as the original."""
    src = _BEFORE.read_text().replace('''def run(kernel, out_shape, grid, operands):
    setup = Setup("triton")''', '''def run(kernel, out_shape, grid, operands):
    return dispatch(kernel, out_shape, grid, operands)


def dispatch(kernel, out_shape, grid, operands):
    setup = Setup("triton")''')
    norm = _sites(src)["_norm_kernel"]
    assert [c.func.value for c in norm.relayed_by] == ["run", "dispatch"] and norm.forwarded
    fixed = fix_source(src, "k.py")
    assert not fixed.error and "def dispatch(kernel, out_shape, grid, operands, in_specs=None, out_specs=None):" in fixed.source
    assert "def run(kernel, out_shape, grid, operands, in_specs=None, out_specs=None):" in fixed.source
    assert any("`run` then `dispatch` then `build` take in_specs / out_specs parameters" in d for d in fixed.applied), fixed.applied
    before, after = load_module(_BEFORE, src), load_module(_AFTER, fixed.source)
    x = jax.random.normal(jax.random.key(2), (2, 3, 16), jnp.float32)
    g = jax.random.normal(jax.random.key(3), (2, 3), jnp.float32)
    np.testing.assert_allclose(after.norm_then_gate(x, g), before.norm_then_gate(x, g), rtol=1e-6)


def _threaded_with_default(default: str) -> str:
    """The golden pair's chain as a later round leaves it (`whole if in_specs is None else in_specs`
    in `build`, handed down from `run`), `run`'s in_specs defaulting to `default`, and a call of
    `run` leaving it out: the kernel runs with that default, not the whole arrays."""
    src = _BEFORE.read_text()
    for old, new in [
        ("def build(kernel, n_in, out_shape, setup, grid):", "def build(kernel, n_in, out_shape, setup, grid, in_specs=None, out_specs=None):"),
        ('"in_specs": every_whole(n_in, setup.backend),', '"in_specs": every_whole(n_in, setup.backend) if in_specs is None else in_specs,'),
        ('"out_specs": every_whole(len(out_shape), setup.backend),',
         '"out_specs": every_whole(len(out_shape), setup.backend) if out_specs is None else out_specs,'),
        ("def run(kernel, out_shape, grid, operands):", f"def run(kernel, out_shape, grid, operands, in_specs={default}, out_specs=None):"),
        ("call = build(kernel, len(operands), out_shape, setup, grid)",
         "call = build(kernel, len(operands), out_shape, setup, grid, in_specs=in_specs, out_specs=out_specs)"),
        ("INTERPRET = True\n", "INTERPRET = True\nUPPER = [pl.BlockSpec((2, 3, 8), lambda i, j: (0, 0, 1))]  # the upper half of D\n"),
        ("# pallas-fix: example norm_then_gate(f32[2, 3, 16], f32[2, 3])", "# pallas-fix: example norm_upper(f32[2, 3, 16])"),
    ]:
        assert old in src, old
        src = src.replace(old, new)
    return src[:src.index("def norm_then_gate")] + (
        "def norm_upper(x):\n    B, N, D = x.shape\n"
        "    return run(_norm_kernel, [jax.ShapeDtypeStruct((B, N, D // 2), x.dtype)], (B, N), (x,))[0]\n")


def test_a_threaded_parameter_defaulting_to_other_specs_is_not_read_as_whole_arrays():
    src = _threaded_with_default("UPPER")
    norm = _sites(src)["_norm_kernel"]
    assert not norm.forwarded
    assert "its in_specs parameter defaults to `UPPER` where the outermost call leaves it out, not None" in norm.relay_issue
    assert any("pass the specs at the call" in r for r in _refusals(src, "_norm_kernel"))
    assert fix_source(src, "k.py", unsafe=True).source == src  # the lift read `x_ref` as whole: 16 wide, not 8
    # the original runs, reading the upper half
    x = jax.random.normal(jax.random.PRNGKey(0), (2, 3, 16), jnp.float32)
    got = np.asarray(load_module(_BEFORE, src).norm_upper(x))
    upper = np.asarray(x[..., 8:])
    np.testing.assert_allclose(got, upper / np.sqrt(np.mean(upper * upper, axis=-1, keepdims=True) + 1e-6), rtol=1e-5)


def test_a_threaded_parameter_defaulting_to_none_still_reads_as_whole_arrays():
    norm = _sites(_threaded_with_default("None"))["_norm_kernel"]
    assert norm.forwarded == ("grid", "in_specs", "out_specs", "out_shape") and not norm.relay_issue


def test_a_spec_list_set_only_under_an_if_is_not_threaded():
    """`settings["in_specs"] = ...` under the Triton branch: the lift would pass `in_specs=in_specs`
    beside `**settings` holding the key too (a TypeError for every call of the chain)."""
    src = _BEFORE.read_text()
    for old, new in [('        "in_specs": every_whole(n_in, setup.backend),\n', ""),
                     ('        settings["compiler_params"]',
                      '        settings["in_specs"] = every_whole(n_in, setup.backend)\n        settings["compiler_params"]')]:
        assert old in src
        src = src.replace(old, new)
    norm = _sites(src)["_norm_kernel"]
    assert not norm.forwarded
    assert 'its in_specs is set only under `if setup.backend == "triton"` (line ' in norm.relay_issue
    assert fix_source(src, "k.py", unsafe=True).source == src
    x, g = jnp.ones((2, 3, 16), jnp.float32), jnp.ones((2, 3), jnp.float32)
    assert np.isfinite(np.asarray(load_module(_BEFORE, src).norm_then_gate(x, g))).all()  # the original runs
