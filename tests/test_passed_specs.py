"""Kernels passed into a local helper together with their own grid and specs (issue 28): each
kernel is planned against its own call of the helper, its lift edits that call's arguments, and
what the calls share (the helper, a spec list both copy) must stay as it is. The golden pairs are
program_id_blocks/pid_kernels_passed_with_own_specs and pid_kernels_passed_with_copied_specs."""

from __future__ import annotations

from kernel_loading import FIXTURES

from pallas_fix.engine import analyze_source, fix_source

_OWN = FIXTURES / "codemods" / "program_id_blocks" / "pid_kernels_passed_with_own_specs_before.py"
_COPIED = FIXTURES / "codemods" / "program_id_blocks" / "pid_kernels_passed_with_copied_specs_before.py"


def _by_kernel(src: str) -> dict[str, list]:
    out: dict[str, list] = {}
    for f in analyze_source(src, "k.py").findings:
        out.setdefault(f.kernel, []).append(f)
    return out


def test_each_kernel_reads_the_grid_and_specs_its_own_call_passes():
    analysis = analyze_source(_OWN.read_text(), "k.py").analysis
    forwarded = {s.kernel_name: s.forwarded for s in analysis.sites}
    assert forwarded == {"_rows_kernel": ("grid", "in_specs", "out_specs"), "_cols_kernel": ("grid", "in_specs", "out_specs")}
    found = _by_kernel(_OWN.read_text())
    assert sorted(found) == ["_cols_kernel", "_rows_kernel"]
    assert all(f.fixable for fs in found.values() for f in fs), [f.refusal for fs in found.values() for f in fs]


def test_a_grid_the_helper_writes_for_both_stays_when_no_lift_changes_it():
    """`grid=(n // BR,)` in the helper serves both kernels (both window rows by the program id);
    the lifts keep the grid, so only the specs each call passes change."""
    src = _OWN.read_text().replace("\n        grid=(n // BR,),", "").replace("\n        grid=(m // BC,),", "")
    src = src.replace("grid=grid,", "grid=(n // BR,),").replace("kernel, grid, in_specs", "kernel, in_specs")
    src = src.replace("o_ref[:, pl.ds(j * BC, BC)] = x_ref[:, pl.ds(j * BC, BC)]", "o_ref[pl.ds(j * BR, BR), :] = x_ref[pl.ds(j * BR, BR), :]")
    found = _by_kernel(src)
    assert all(f.fixable for fs in found.values() for f in fs), [f.refusal for fs in found.values() for f in fs]
    fixed = fix_source(src, "k.py", unsafe=True)
    assert not fixed.error and "grid=(n // BR,)," in fixed.source and fixed.source.count("lambda j: (j, 0)") == 2


def test_a_check_the_lift_needs_goes_before_the_helpers_call():
    """A grid the helper writes that the bounds proof cannot tie to the blocks (`(4,)`) needs a
    check: it goes before this kernel's call of the helper, where the sizes it reads stand and
    which only this kernel runs, never into the helper that every call runs."""
    src = _OWN.read_text().replace("grid=grid,", "grid=(4,),").replace("kernel, grid, in_specs", "kernel, in_specs")
    src = src.replace("        grid=(n // BR,),\n", "").replace("        grid=(m // BC,),\n", "")
    found = _by_kernel(src)
    assert all(f.fixable and f.fix_safety.value == "unsafe" for fs in found.values() for f in fs)
    fixed = fix_source(src, "k.py", unsafe=True).source
    assert "    if n < 4 * BR:\n        raise ValueError(f\"n ({n}) must be at least 4 * BR\")\n    y = call_kernel(" in fixed
    assert "    if m < 4 * BC:\n        raise ValueError(f\"m ({m}) must be at least 4 * BC\")\n    z = call_kernel(" in fixed
    assert fixed.count("grid=(4,),") == 1  # the helper's grid as it was


def test_a_spec_list_both_calls_pass_is_not_edited_for_one_and_the_output_windows_still_lift():
    """Both calls pass the one list `specs` (no copies): a lift of an input window would change
    its spec for the other kernel too, so those are refused; the output windows, whose specs each
    call writes itself, lift. (With a copy per call the new spec is set on the copy:
    program_id_blocks/pid_kernels_passed_set_on_copy.)"""
    src = _COPIED.read_text().replace("+ jnp.sum(w_ref[...])", "+ w_ref[:, pl.ds(j * BC, BC)]")
    src = src.replace("    specs = [pl.BlockSpec((1, m), lambda i: (0, 0))]  # w, whole in both kernels\n", "    specs = [pl.BlockSpec((1, m), lambda i: (0, 0)), pl.BlockSpec((n, m), lambda i: (0, 0))]\n")
    src = src.replace("in_specs=row_specs", "in_specs=specs").replace("in_specs=col_specs", "in_specs=specs")
    found = _by_kernel(src)
    told = {(f.kernel, f.message.split("`")[1]): (f.fixable, f.refusal) for fs in found.values() for f in fs}
    assert {k for k, (fixable, _) in told.items() if fixable} == {("_rows_kernel", "o_ref"), ("_cols_kernel", "o_ref")}, told
    assert all(r.startswith("`specs` (in_specs) is also used elsewhere and the rewrite would change it there too")
               for fixable, r in told.values() if not fixable), told
    fixed = fix_source(src, "k.py", unsafe=True)
    assert "specs = [pl.BlockSpec((1, m), lambda i: (0, 0)), pl.BlockSpec((n, m), lambda i: (0, 0))]" in fixed.source


def test_a_shared_item_that_is_not_a_plain_spec_is_not_set_on_the_copy_and_is_refused():
    """`None if w is None else pl.BlockSpec(...)` in the list both calls copy: pallas-fix sets a new
    spec on a copy only for a plain BlockSpec item, and editing the shared list would hand the
    other kernel the block too: refused, naming the statement and the call that reads it."""
    src = (FIXTURES / "codemods" / "program_id_blocks" / "pid_kernels_passed_set_on_copy_before.py").read_text()
    src = src.replace("specs = [pl.BlockSpec((1, m), lambda i: (0, 0))]", "specs = [None if w is None else pl.BlockSpec((1, m), lambda i: (0, 0))]")
    found = _by_kernel(src)
    told = {(f.kernel, f.message.split("`")[1]): (f.fixable, f.refusal) for fs in found.values() for f in fs}
    assert [k for k, (fixable, _) in told.items() if not fixable] == [("_cols_kernel", "w_ref")], told
    assert told[("_cols_kernel", "w_ref")][1].startswith(
        "lifting `_cols_kernel` would change `specs = [None if w is None else pl.BlockSpec((1, m), lamb...` (line 38), "
        "which the call of `call_kernel` on line 43 (passing `_rows_kernel`) reads; what the calls of `call_kernel` share "
        "must stay as it is"), told


def test_a_grid_passed_by_a_name_the_helper_also_binds_is_not_read_through_it():
    """`grid=grid` where the wrapper's `grid` is also the helper's parameter: read inside the
    helper, the name is the parameter, so that call's grid is not taken (the kernel is refused),
    while the other call's literal grid is."""
    src = _OWN.read_text().replace("        grid=(n // BR,),\n", "        grid=grid,\n").replace(
        "    n, m = x.shape\n", "    n, m = x.shape\n    grid = (n // BR,)\n")
    analysis = analyze_source(src, "k.py").analysis
    assert {s.kernel_name: s.forwarded for s in analysis.sites}["_rows_kernel"] == ("in_specs", "out_specs")
    found = _by_kernel(src)
    assert not any(f.fixable for f in found["_rows_kernel"])
    assert all("cannot read the grid `grid`" in f.refusal for f in found["_rows_kernel"]), [f.refusal for f in found["_rows_kernel"]]
    assert all(f.fixable for f in found["_cols_kernel"])


def test_one_kernel_passed_by_two_calls_with_two_grids_is_not_read_through_either():
    """Both calls pass `_rows_kernel`, each with its own grid: one lift cannot edit both calls, so
    no call's arguments stand for the pallas_call's, and the kernel is refused."""
    src = _OWN.read_text().replace("kernel=_cols_kernel", "kernel=_rows_kernel")
    analysis = analyze_source(src, "k.py").analysis
    assert [s.forwarded for s in analysis.sites] == [()]
    found = _by_kernel(src)
    assert found["_rows_kernel"] and not any(f.fixable for f in found["_rows_kernel"])


def _sized_by_helper_parameter() -> str:
    """Each kernel takes its block size `bs` through the helper's `functools.partial(kernel,
    bs=bs)`, `bs` a parameter of the helper that each call passes."""
    src = _OWN.read_text()
    for kernel, size, start in (("_rows_kernel", "BR", "i"), ("_cols_kernel", "BC", "j")):
        src = src.replace(f"def {kernel}(x_ref, o_ref, *, factor):", f"def {kernel}(x_ref, o_ref, *, factor, bs):")
        src = src.replace(f"pl.ds({start} * {size}, {size})", f"pl.ds({start} * bs, bs)")
    src = src.replace("out_specs, factor):", "out_specs, factor, bs):").replace("partial(kernel, factor=factor)", "partial(kernel, factor=factor, bs=bs)")
    return src.replace("        factor=2.0,\n", "        factor=2.0,\n        bs=BR,\n").replace("        factor=3.0,\n", "        factor=3.0,\n        bs=BC,\n")


def test_a_size_the_helper_binds_is_not_written_beside_the_call():
    """The lift would write the block size as the kernel gets it, `bs`, which outside the helper
    names nothing (or something else): refused, and the file stays as it is."""
    import libcst as cst

    from pallas_fix.rewrite.callsite.forwarded import _helper_names_written

    src = _sized_by_helper_parameter()
    assert not any(f.fixable for fs in _by_kernel(src).values() for f in fs)
    assert fix_source(src, "k.py", unsafe=True).source == src
    # The check itself, on the text the lift would write without the bounds check it also needs.
    result = analyze_source(src, "k.py")
    site = next(s for s in result.analysis.sites if s.kernel_name == "_rows_kernel")
    helper = result.analysis.ctx.enclosing_function(site.call)
    lifted = src.replace("out_specs=pl.BlockSpec((n, m), lambda i: (0, 0)),", "out_specs=pl.BlockSpec((bs, m), lambda i: (i, 0)),")
    why = _helper_names_written(result.analysis.ctx, site, helper, cst.parse_module(lifted))
    assert why is not None and why.startswith("lifting `_rows_kernel` would write `bs`, read inside `call_kernel`, beside its call on line"), why
    assert _helper_names_written(result.analysis.ctx, site, helper, cst.parse_module(src)) is None


def test_grid_and_specs_passed_by_position_are_read_and_edited_at_the_call():
    src = _OWN.read_text().replace("def call_kernel(*, kernel, grid, in_specs, out_specs, factor):",
                                   "def call_kernel(kernel, grid, in_specs, out_specs, *, factor):")
    for kw in ("kernel", "grid", "in_specs", "out_specs"):
        src = src.replace(f"\n        {kw}=", "\n        ")
    assert "        _rows_kernel,\n        (n // BR,),\n" in src
    found = _by_kernel(src)
    assert all(f.fixable for fs in found.values() for f in fs), [f.refusal for fs in found.values() for f in fs]
    fixed = fix_source(src, "k.py", unsafe=True).source
    assert fixed.count("pl.BlockSpec((BR, m), lambda i: (i, 0))") == 2 and fixed.count("pl.BlockSpec((n, BC), lambda j: (0, j))") == 2


def test_specs_the_helper_reorders_in_place_are_not_read_through_the_call():
    """`in_specs.reverse()` in the helper before its pallas_call: the caller's item k is not operand
    k's spec there, so a new spec written into the call's list would go to the other operand. The
    helper's `in_specs` is read as it stands in the helper (modified there: refused), and no
    call's list is edited. Before, both kernels lifted and the rewrites failed to trace."""
    src = _OWN.read_text().replace("        return pl.pallas_call(\n", "        in_specs.reverse()\n        return pl.pallas_call(\n")
    analysis = analyze_source(src, "k.py").analysis
    assert {s.kernel_name: s.forwarded for s in analysis.sites} == {
        "_rows_kernel": ("grid", "out_specs"), "_cols_kernel": ("grid", "out_specs")}
    found = _by_kernel(src)
    assert all(not f.fixable and f.refusal.startswith("`in_specs` (in_specs) is modified after it is built")
               for fs in found.values() for f in fs), [f.refusal for fs in found.values() for f in fs]
    assert fix_source(src, "k.py", unsafe=True).source == src


def test_a_grid_the_helper_hands_to_another_function_is_not_read_through_the_call():
    """`print(grid)` in the helper: a function the helper hands a parameter may change it in place
    (a list), so only a parameter the helper reads at its pallas_call alone is taken from the call."""
    src = _OWN.read_text().replace("        return pl.pallas_call(\n", "        print(grid)\n        return pl.pallas_call(\n")
    analysis = analyze_source(src, "k.py").analysis
    assert {s.kernel_name: s.forwarded for s in analysis.sites} == {
        "_rows_kernel": ("in_specs", "out_specs"), "_cols_kernel": ("in_specs", "out_specs")}


def test_a_shared_list_another_pallas_call_copies_is_not_edited_for_one_kernel():
    """`specs` is copied by `_cols_kernel`'s call of the helper and by a plain pallas_call of
    another kernel (`plain_specs = specs.copy()`). `_cols_kernel`'s call stands in a `for` header,
    where no statement before it can set the new spec of `w` on its copy, so the lift would edit
    `specs` itself (no other call of the helper reads it), and the plain pallas_call would get
    `w`'s new block. Before, it did (the plain
    kernel's `w_ref[...]` became a (1, 32) block); now that lift is refused, naming the pallas_call
    that reads `specs`, and the others still apply."""
    src = _COPIED.read_text().replace("+ jnp.sum(w_ref[...])", "+ w_ref[:, pl.ds(j * BC, BC)]")
    src = src.replace("row_specs = specs.copy()", "row_specs = [pl.BlockSpec((1, m), lambda i: (0, 0))]")
    src = src.replace("""    z = call_kernel(
        kernel=_cols_kernel,
        grid=(m // BC,),
        in_specs=col_specs,
        out_specs=pl.BlockSpec((n, m), lambda j: (0, 0)),
    )
    return y - z""", """    for z in [call_kernel(
        kernel=_cols_kernel,
        grid=(m // BC,),
        in_specs=col_specs,
        out_specs=pl.BlockSpec((n, m), lambda j: (0, 0)),
    )]:
        pass
    plain_specs = specs.copy()
    plain_specs.append(pl.BlockSpec((n, m), lambda i: (0, 0)))
    p = pl.pallas_call(
        _plain_kernel,
        out_shape=jax.ShapeDtypeStruct((1, m), x.dtype),
        in_specs=plain_specs,
        out_specs=pl.BlockSpec((1, m), lambda i: (0, 0)),
    )(w, x)
    return y - z + p""")
    src = src.replace("def scale_rows_shift_cols(", "def _plain_kernel(w_ref, x_ref, o_ref):\n    o_ref[...] = jnp.sum(x_ref[...], axis=0, keepdims=True) + w_ref[...]\n\n\ndef scale_rows_shift_cols(")
    found = _by_kernel(src)
    told = {(f.kernel, f.message.split("`")[1]): (f.fixable, f.refusal) for fs in found.values() for f in fs}
    assert [k for k, (fixable, _) in told.items() if not fixable] == [("_cols_kernel", "w_ref")], told
    assert told[("_cols_kernel", "w_ref")][1].startswith(
        "lifting `_cols_kernel` would change `specs = [pl.BlockSpec((1, m), lambda i: (0, 0))] # w, who...` (line 42), "
        "which the pallas_call on line 62 reads"), told
    fixed = fix_source(src, "k.py", unsafe=True)
    assert not fixed.error and "    specs = [pl.BlockSpec((1, m), lambda i: (0, 0))]  # w, whole in both kernels\n" in fixed.source


def test_no_check_before_a_helper_call_that_runs_only_in_one_branch():
    """`_call(...) if y.shape[0] == heads else s`: a check written before the statement would run
    where the helper's call does not, rejecting a call the original returns `s` for (redteam10)."""
    src = (FIXTURES / "codemods" / "program_id_blocks" / "pid_kernels_threaded_specs_before.py").read_text()
    call = "    return _call(functools.partial(_mix_kernel, heads=heads), (s, y), jax.ShapeDtypeStruct(s.shape, s.dtype), batch * heads)"
    assert call in src
    for branch in (call + " if y.shape[0] == heads else s", call.replace("return _call", "return y.shape[0] != heads or _call")):
        varied = src.replace(call, branch).replace("    assert y.shape == (heads, batch, rows, n)\n", "")
        fixed = fix_source(varied, "k.py", unsafe=True)
        assert not fixed.error and "raise ValueError" not in fixed.source, fixed.source
        assert "(s, y)," in fixed.source and "_mix_kernel" in fixed.source


def test_the_screens_statement_keys_of_a_module_are_never_those_of_another_module():
    """The forwarded screen keys the analysed module's statements once per module context
    (forwarded._module_keyed): a context analysed after another one died (whose id it may reuse),
    of a changed source, compares the plan's text with its own statements, not the old ones."""
    import gc

    import libcst as cst

    from pallas_fix.rewrite.callsite.forwarded import _helper_names_written

    src = _sized_by_helper_parameter()
    lifted = src.replace("out_specs=pl.BlockSpec((n, m), lambda i: (0, 0)),", "out_specs=pl.BlockSpec((bs, m), lambda i: (i, 0)),")

    def why(analysed: str):
        result = analyze_source(analysed, "k.py")
        site = next(s for s in result.analysis.sites if s.kernel_name == "_rows_kernel")
        helper = result.analysis.ctx.enclosing_function(site.call)
        return _helper_names_written(result.analysis.ctx, site, helper, cst.parse_module(lifted))

    assert why(src) is not None  # the lift writes `bs` beside the call of `src`
    gc.collect()
    assert why(lifted) is None  # analysed as it is, the lifted text adds nothing to itself
    gc.collect()
    assert why(src) is not None


_TWO_SETS = FIXTURES / "codemods" / "program_id_blocks" / "pid_kernels_passed_two_sets_on_copy_before.py"


def _cols_refusals(src: str) -> list[str]:
    return [f.refusal for f in _by_kernel(src)["_cols_kernel"] if not f.fixable]


def test_an_item_set_on_a_copy_is_read_as_that_slots_spec():
    """`col_specs[1] = spec` before the call, the statement a lift writes on a copy: a later round
    reads slot 1 as `spec` and edits it there (before, the list counted as modified and the second
    lift was refused)."""
    from pallas_fix.rewrite.callsite.spelling.built_lists import built_items

    src = _TWO_SETS.read_text().replace(
        "    z = call_kernel(\n", "    col_specs[1] = pl.BlockSpec((1, m), lambda j: (0, 0))  # b\n    z = call_kernel(\n")
    assert _cols_refusals(src) == []
    analysis = analyze_source(src, "k.py").analysis
    ctx = analysis.ctx
    site = next(s for s in analysis.sites if s.kernel_name == "_cols_kernel")
    spec = site.kw("in_specs")
    items, _reads, parts = built_items(ctx, spec, site.passed_by)
    assert [ctx.code(i) for i in items] == ["pl.BlockSpec((1, m), lambda i: (0, 0))", "pl.BlockSpec((1, m), lambda j: (0, 0))",
                                            "pl.BlockSpec((n, m), lambda j: (0, 0))"]
    assert [p.value for p in parts] == ["col_specs", "specs"]
    fixed = fix_source(src, "k.py", unsafe=True).source
    assert "    col_specs[0] = pl.BlockSpec((1, BC), lambda i: (0, i))\n    col_specs[1] = pl.BlockSpec((1, BC), lambda j: (0, j))  # b\n" in fixed


def test_an_item_set_past_the_end_or_from_the_end_is_not_read():
    """`col_specs[3] = ...` on a three-item list raises in Python, and `col_specs[-1] = ...` is not
    a slot the reader numbers: both leave the list unread, as before."""
    for index in ("3", "-1"):
        src = _TWO_SETS.read_text().replace(
            "    z = call_kernel(\n", f"    col_specs[{index}] = pl.BlockSpec((n, BC), lambda j: (0, j))\n    z = call_kernel(\n")
        refusals = _cols_refusals(src)
        assert refusals and all(r.startswith("`col_specs` (in_specs) is modified after it is built") for r in refusals), refusals
