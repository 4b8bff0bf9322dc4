"""Lines a rewrite adds are broken to the file's own width (pallas_fix.rewrite.text.line_width)."""

from __future__ import annotations

import ast

from pallas_fix.rewrite.text import visual_indent
from pallas_fix.rewrite.text.line_width import code_width, fit_width, rejoin

BEFORE = '''def call(x):
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
    )(x)
'''

LONG = ("        in_specs=[pl.BlockSpec((BM, x.shape[1]), lambda i: (i, 0)), "
        "pl.BlockSpec((BM, gate.shape[1]), lambda i: (i, 0))],\n")


def _after(*lines: str, before: str = BEFORE) -> str:
    head, tail = before.split("    )(x)\n")
    return head + "".join(lines) + "    )(x)\n" + tail


def test_a_long_new_keyword_list_gets_one_element_per_line():
    after = _after(LONG)
    fitted = fit_width(BEFORE, after)
    assert "        in_specs=[\n            pl.BlockSpec((BM, x.shape[1]), lambda i: (i, 0)),\n" in fitted
    assert "            pl.BlockSpec((BM, gate.shape[1]), lambda i: (i, 0)),\n        ],\n" in fitted
    assert ast.dump(ast.parse(fitted)) == ast.dump(ast.parse(after))
    assert max(len(line) for line in fitted.splitlines()) <= 79


def test_a_long_new_call_keyword_gets_its_arguments_on_their_own_lines():
    line = '        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary")),\n'
    fitted = fit_width(BEFORE, _after(line))
    assert ('        compiler_params=pltpu.CompilerParams(\n'
            '            dimension_semantics=("parallel", "parallel", "arbitrary"),\n        ),\n') in fitted


def test_a_long_list_plus_a_tail_splits_at_the_plus_then_breaks_the_list_if_needed():
    short = "        in_specs=[pl.BlockSpec((BM, x.shape[1]), lambda i: (i, 0))] + [pl.BlockSpec()] * (len(operands) - 1),\n"
    fitted = fit_width(BEFORE, _after(short))
    assert ("        in_specs=[pl.BlockSpec((BM, x.shape[1]), lambda i: (i, 0))]\n"
            "        + [pl.BlockSpec()] * (len(operands) - 1),\n") in fitted
    long = LONG.rstrip(",\n") + " + [pl.BlockSpec()] * (len(operands) - 2),\n"
    fitted = fit_width(BEFORE, _after(long))
    assert ("            pl.BlockSpec((BM, gate.shape[1]), lambda i: (i, 0)),\n        ]\n"
            "        + [pl.BlockSpec()] * (len(operands) - 2),\n") in fitted
    assert ast.dump(ast.parse(fitted)) == ast.dump(ast.parse(_after(long)))
    assert max(len(line) for line in fitted.splitlines()) <= 79


def test_lines_within_the_files_width_and_lines_that_were_there_stay():
    wide = BEFORE.replace("kernel,", "kernel,  # " + "x" * 120)
    after = _after(LONG, before=wide)
    assert fit_width(wide, after) == after  # the file is that wide already
    assert fit_width(_after(LONG), _after(LONG)) == _after(LONG)  # not a new line


def test_crlf_and_tabs_are_kept():
    tabbed = BEFORE.replace("    ", "\t")
    head, tail = tabbed.split("\t)(x)\n")
    before = tabbed.replace("\n", "\r\n")
    after = (head + LONG.replace("        ", "\t\t") + "\t)(x)\n" + tail).replace("\n", "\r\n")
    fitted = fit_width(before, after)
    assert "\t\tin_specs=[\r\n\t\t\tpl.BlockSpec((BM, x.shape[1]), lambda i: (i, 0)),\r\n" in fitted
    assert "\n" not in fitted.replace("\r\n", "")


def test_a_line_with_a_comment_or_no_brackets_is_left_alone():
    commented = LONG.replace("],\n", "],  # two specs\n")
    assert fit_width(BEFORE, _after(commented)) == _after(commented)
    plain = "        interpret=" + " or ".join(["flag"] * 30) + ",\n"
    assert fit_width(BEFORE, _after(plain)) == _after(plain)


def test_arguments_aligned_with_an_open_bracket_indent_the_list_by_the_files_block_indent():
    # A 2-space file whose call arguments line up with `pallas_call(`: the list's elements go one
    # block indent (2) past the keyword, not as far again as the alignment.
    before = ("def call(x):\n"
              "  return pl.pallas_call(kernel,\n"
              "                        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)\n")
    long = ("                        in_specs=[pl.BlockSpec((BM, x.shape[1]), lambda i: (i, 0)), "
            "pl.BlockSpec((BM, gate.shape[1]), lambda i: (i, 0))],\n")
    after = before.replace("x.dtype))(x)\n", "x.dtype),\n" + long + "                        )(x)\n")
    fitted = fit_width(before, after)
    assert "                        in_specs=[\n                          pl.BlockSpec((BM, x.shape[1])" in fitted, fitted
    assert ast.dump(ast.parse(fitted)) == ast.dump(ast.parse(after))


VISUAL = ("def call(x):\n"
          "    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),\n"
          "                          compiler_params=pltpu.CompilerParams(), interpret=True)(x)\n")
ALIGN = " " * len("    return pl.pallas_call(")


def _visual_after(new: str, before: str = VISUAL) -> str:
    return before.replace(ALIGN + "compiler_params", ALIGN + new + "compiler_params")


def test_arguments_added_to_a_visual_indent_call_stay_aligned_with_its_bracket():
    after = _visual_after("grid=(x.shape[0] // BM,), out_specs=pl.BlockSpec((BM, 128), lambda i: (i, 0)), ")
    fitted = fit_width(VISUAL, after)
    assert fitted == ("def call(x):\n"
                      "    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),\n"
                      + ALIGN + "grid=(x.shape[0] // BM,),\n"
                      + ALIGN + "out_specs=pl.BlockSpec((BM, 128), lambda i: (i, 0)),\n"
                      + ALIGN + "compiler_params=pltpu.CompilerParams(), interpret=True)(x)\n"), fitted
    assert ast.dump(ast.parse(fitted)) == ast.dump(ast.parse(after))


def test_arguments_added_to_the_line_that_opens_a_visual_call_fill_to_the_width():
    before = ("def call(x):\n"
              "    fn = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),\n"
              "                        interpret=True)\n")
    after = before.replace("x.dtype),\n", "x.dtype), grid=(x.shape[0] // BM,), out_specs=pl.BlockSpec((BM,), lambda i: (i,)),\n")
    fitted = fit_width(before, after)
    assert fitted == ("def call(x):\n"
                      "    fn = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),\n"
                      "                        grid=(x.shape[0] // BM,),\n"
                      "                        out_specs=pl.BlockSpec((BM,), lambda i: (i,)),\n"
                      "                        interpret=True)\n"), fitted


def test_a_visual_call_whose_new_argument_cannot_fit_at_its_bracket_switches_to_hanging_style():
    after = _visual_after("in_specs=[pl.BlockSpec((BM, x.shape[1]), lambda i: (i, 0)), "
                          "pl.BlockSpec((BM, x.shape[1]), lambda i: (i, 0))], ")
    fitted = fit_width(VISUAL, after)
    assert fitted == ("def call(x):\n"
                      "    return pl.pallas_call(\n"
                      "        kernel,\n"
                      "        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),\n"
                      "        in_specs=[\n"
                      "            pl.BlockSpec((BM, x.shape[1]), lambda i: (i, 0)),\n"
                      "            pl.BlockSpec((BM, x.shape[1]), lambda i: (i, 0)),\n"
                      "        ],\n"
                      "        compiler_params=pltpu.CompilerParams(),\n"
                      "        interpret=True,\n"
                      "    )(x)\n"), fitted
    assert ast.dump(ast.parse(fitted)) == ast.dump(ast.parse(after))


def test_a_visual_call_with_a_comment_is_not_switched_to_hanging_style():
    before = VISUAL.replace("x.dtype),\n", "x.dtype),  # rows\n")
    after = _visual_after("in_specs=[pl.BlockSpec((BM, x.shape[1]), lambda i: (i, 0)), "
                          "pl.BlockSpec((BM, x.shape[1]), lambda i: (i, 0))], ", before=before)
    assert fit_width(before, after) == after


def test_a_long_guard_message_is_split_by_implicit_string_concatenation():
    message = "jax.tree.leaves(kwargs['outs'])[0].shape[0] must be at least cdiv(m, mat_block_dim) * mat_block_dim"
    line = f'    raise ValueError("{message}")\n'
    after = BEFORE.replace("    return", "    if n < m:\n    " + line + "    return")
    fitted = fit_width(BEFORE, after)
    assert '        raise ValueError(\n            "jax.tree.leaves' in fitted, fitted
    assert fitted.count('            "') == 2 and "        )\n" in fitted
    assert max(len(text) for text in fitted.splitlines()) <= 79
    assert ast.dump(ast.parse(fitted)) == ast.dump(ast.parse(after))


def test_a_lambdas_parameters_are_not_split_as_arguments():
    before = ("spec = pl.BlockSpec((BM, 128),\n"
              "                    lambda i, j: (i, j))\n")
    after = before.replace("(i, j))", "(i, j), pipeline_mode=pl.Buffered(buffer_count=3), memory_space=pltpu.VMEM)")
    fitted = fit_width(before, after)
    assert fitted == ("spec = pl.BlockSpec((BM, 128),\n"
                      "                    lambda i, j: (i, j),\n"
                      "                    pipeline_mode=pl.Buffered(buffer_count=3),\n"
                      "                    memory_space=pltpu.VMEM)\n"), fitted
    # The comma between the lambda's parameters is not one of BlockSpec's argument separators.
    commas = visual_indent.scan(after).commas[(1, 19)]
    assert [c for c in commas if c[0] == 2] == [(2, 39), (2, 82)], commas


def test_a_long_f_string_guard_is_cut_only_outside_its_fields():
    message = "trace.shape[0] ({trace.shape[0]}) must be at least pl.cdiv(weight_info.shape[1], block_dim) * block_dim"
    after = BEFORE.replace("    return", f'    if n < m:\n        raise ValueError(f"{message}")\n    return')
    fitted = fit_width(BEFORE, after)
    pieces = [line.strip() for line in fitted.splitlines() if line.strip().startswith(('f"', '"'))]
    assert len(pieces) == 2 and pieces[0].startswith('f"trace.shape[0] ({trace.shape[0]})'), pieces
    assert pieces[1].startswith('"'), pieces  # no field left in it: a plain string
    assert max(len(text) for text in fitted.splitlines()) <= 79
    assert ast.dump(ast.parse(fitted)) == ast.dump(ast.parse(after))


def test_a_lengthened_signature_hangs_its_parameters_on_one_line_when_they_fit():
    before = "def kernel(a_ref, b_ref, o_ref, *, blocksize_m, blocksize_k, blocksize_n):\n    pass\n"
    after = before.replace("blocksize_n)", "blocksize_n, o_rows)")
    fitted = fit_width(before, after)
    assert fitted == ("def kernel(\n"
                      "    a_ref, b_ref, o_ref, *, blocksize_m, blocksize_k, blocksize_n, o_rows\n"
                      "):\n    pass\n"), fitted
    longer = before.replace("blocksize_n)", "blocksize_n, o_rows, o_cols, a_rows)")
    assert "    *,\n    blocksize_m,\n" in fit_width(before, longer)  # too long for one line: one each


def test_a_visual_subscript_is_not_switched_to_hanging_style():
    # x[i] as x[i,] would be a tuple index: only a call's arguments may get a trailing comma.
    before = "y = x[pl.ds(0, 8),\n      0]\n"
    after = before.replace("      0]", "      pl.ds(program_id_of_the_outer_axis * block_rows_of_this_kernel, block_rows_of_this_kernel)]")
    assert fit_width(before, after) == after


def test_a_docstring_line_past_120_columns_does_not_set_the_width():
    """A real kernel's one-line summary runs on; a docstring kept to a wider limit sets it."""
    summary = '"""' + "A summary of what the kernel computes, " * 4 + '"""\n'
    fitted = fit_width(summary + BEFORE, summary + _after(LONG))
    assert "        in_specs=[\n" in fitted
    assert code_width(summary + BEFORE) == 79
    kept = '"""' + "x" * 94 + '"""\n'  # 100 columns: a file kept to 100
    assert code_width(kept + BEFORE) == 100


def test_a_bracket_broken_early_and_shortened_later_is_joined_back():
    original = "def k(x_ref, o_ref):\n    x = pltriton.load(x_ref.at[idx[:, None], cols[None, :]])\n    o_ref[...] = x\n"
    final = "def k(x_ref, o_ref):\n    x = pltriton.load(\n        x_ref,\n    )\n    o_ref[...] = x\n"
    assert rejoin(original, final) == "def k(x_ref, o_ref):\n    x = pltriton.load(x_ref)\n    o_ref[...] = x\n"
    kept = "def k(x_ref, o_ref):\n    x = pltriton.load(\n        x_ref,\n    )\n"
    assert rejoin(kept, kept) == kept  # the user's own layout
    wide = final.replace("x_ref,\n", "x_ref" + "_" * 80 + ",\n").replace("(x_ref", "(x_ref")
    assert rejoin(original, wide) == wide  # would not fit the width on one line
