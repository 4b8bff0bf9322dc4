"""Unit tests for what call-site edits must prove: block bounds and divisibility (analysis.loops.proofs),
the meaning of a partial-bound name at the pallas_call (analysis.values.same_value), and the semantics a
new grid axis may have (rewrite.blocks.grid_params). The fixtures under tests/fixtures/codemods/ test
the same mechanisms end to end."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from pallas_fix.analysis.context import ModuleContext, walk
from pallas_fix.analysis.loops.proofs import Facts, Prover, read_facts
from pallas_fix.analysis.result import analyze
from pallas_fix.analysis.values.same_value import same_value_at
from pallas_fix.analysis.loops.symbolic import Poly, Symbols
from pallas_fix.frontends.service import analyze_source
from pallas_fix.rewrite.blocks.plan import NewAxis
from pallas_fix.rewrite.callsite.reading import CallSite
from pallas_fix.rewrite.blocks.grid_params import new_axis_semantics
from pallas_fix.rewrite.callsite.spelling.operands import CallSiteError


def _setup(body: str):
    """The module, its symbols, a prover from the checks in `f`, and `f`'s last statement."""
    ctx = ModuleContext(textwrap.dedent(body))
    fn = next(n for n in walk(ctx.module) if isinstance(n, cst.FunctionDef) and n.name.value == "f")
    stmts = ctx.body_statements(fn)
    symbols = Symbols(ctx)
    facts = Facts()
    read_facts(symbols, stmts[:-1], stmts[-1], facts)
    return ctx, symbols, Prover(symbols, facts), stmts[-1]


def _poly(ctx: ModuleContext, symbols: Symbols, text: str, at) -> Poly:
    return symbols.poly(cst.parse_expression(text), at)


@pytest.mark.parametrize(
    "checks, count, fits",
    [
        ("", "x.shape[0] // 16", True),  # floor: count * 16 <= n
        ("", "pl.cdiv(x.shape[0], 16)", False),  # ragged
        ("", "(x.shape[0] + 15) // 16", False),  # ragged, spelled by hand
        ("assert x.shape[0] % 16 == 0", "pl.cdiv(x.shape[0], 16)", True),
        ("if n % 16:\n                raise ValueError(n)", "pl.cdiv(n, 16)", True),
        ("assert not n % 16", "pl.cdiv(n, 16)", True),
        ("assert x.shape[0] >= pl.cdiv(n, 16) * 16", "pl.cdiv(n, 16)", True),  # a padded array
        ("if x.shape[0] < 16 * pl.cdiv(n, 16):\n                raise ValueError(n)", "pl.cdiv(n, 16)", True),
        ("assert x.shape[0] <= pl.cdiv(n, 16) * 16", "pl.cdiv(n, 16)", False),
        # the negated-floor idioms are ceilings too: their quotient atom is not taken as positive
        # when its numerator or divisor is negative (it made `-(-n // 16) * 16 <= n` "proved")
        ("", "-(-x.shape[0] // 16)", False),
        ("", "-(x.shape[0] // -16)", False),
        ("assert x.shape[0] % 16 == 0", "-(-x.shape[0] // 16)", True),
        ("", "-x.shape[0] // 16 + 2 * (x.shape[0] // 16)", False),  # -cdiv(n, 16) + 2 * (n // 16)
        ("assert x.shape == (64, 8)", "4", True),
        ("assert x.shape == (48, 8)", "4", False),
        ("", "4", False),  # nothing says the array has 64 rows
    ],
)
def test_blocks_of_16_fit_the_rows(checks: str, count: str, fits: bool):
    ctx, symbols, prover, last = _setup(
        f"""
        from jax.experimental import pallas as pl
        def f(x):
            n, d = x.shape
            {checks}
            return None
        """
    )
    room = _poly(ctx, symbols, "x.shape[0]", last) - _poly(ctx, symbols, count, last).scale(16)
    assert prover.nonneg(room) is fits


def test_nested_floor_counts_fit_a_flattened_grid():
    ctx, symbols, prover, last = _setup(
        """
        def f(x):
            m, d = x.shape
            return None
        """
    )
    # blocks of 32 at index i * 4 + j on a grid (m // 128, 4): the last ends at 32 * 4 * (m // 128)
    end = _poly(ctx, symbols, "m // (32 * 4)", last).scale(128)
    assert prover.nonneg(_poly(ctx, symbols, "x.shape[0]", last) - end)


def test_divisibility_from_a_product_and_from_checks():
    ctx, symbols, prover, last = _setup(
        """
        def f(x, bs):
            assert x.shape[0] % (2 * bs) == 0
            return None
        """
    )
    p = lambda t: _poly(ctx, symbols, t, last)  # noqa: E731
    assert prover.divides(p("bs"), p("bs * 4"))
    assert prover.divides(p("bs"), p("x.shape[0]"))
    assert prover.divides(p("bs"), p("x.shape[0] - 2 * bs"))
    assert not prover.divides(p("bs"), p("x.shape[1]"))
    assert not prover.divides(p("16"), p("40"))


def test_a_name_bound_twice_is_no_single_atom():
    ctx, symbols, _prover, last = _setup(
        """
        def f(x):
            n = x.shape[0]
            n = n // 2
            return None
        """
    )
    fn = next(n for n in walk(ctx.module) if isinstance(n, cst.FunctionDef))
    second = ctx.body_statements(fn)[1]
    assert _poly(ctx, symbols, "n", second) != _poly(ctx, symbols, "n", last)
    # Read twice in one place (as a guard is read back where it is written), it is one value there.
    assert _poly(ctx, symbols, "n", last) == _poly(ctx, symbols, "n", last)


def _reads_of(ctx, name: str) -> list:
    return [n for n in walk(ctx.module) if isinstance(n, cst.Name) and n.value == name
            and not isinstance(ctx.parent(n), (cst.AssignTarget, cst.Param))]


def test_a_name_bound_in_both_arms_is_one_value_after_the_if():
    """`if big: bn = 128 else: bn = 16`, then the grid and the block read `bn`: the same value
    wherever it is read after the `if`, until something binds it again."""
    ctx, symbols, _prover, _last = _setup(
        """
        def f(x, big):
            if big:
                bn = 128
            else:
                bn = 16
            grid = (x.shape[0] // bn,)
            block = (bn, x.shape[1])
            bn = bn * 2
            other = bn
            return None
        """
    )
    grid_read, block_read, doubled_read, other_read = [symbols.poly(n, n) for n in _reads_of(ctx, "bn")]
    assert grid_read == block_read
    assert other_read != grid_read  # bound again in between
    assert doubled_read == grid_read  # `bn = bn * 2` reads the value before it binds `bn` again


@pytest.mark.parametrize("extra, read", [
    ("    def bump():\n        nonlocal bn\n        bn += 1\n", -1),  # a called function may rebind it
    ("    im = lambda i: (i * bn, 0)\n", 1),                           # a closure reads it when it runs
])
def test_a_name_bound_in_both_arms_stays_opaque_where_it_may_change_unseen(extra: str, read: int):
    source = textwrap.dedent(
        """
        def f(x, big):
            if big:
                bn = 128
            else:
                bn = 16
            grid = (x.shape[0] // bn,)
        EXTRA    return bn
        """
    ).replace("EXTRA", extra)
    ctx = ModuleContext(source)
    symbols = Symbols(ctx)
    reads = [symbols.poly(n, n) for n in _reads_of(ctx, "bn") if not isinstance(ctx.parent(n), cst.NameItem)]
    assert reads[0] != reads[read]


def _partial_value(src: str):
    ctx = ModuleContext(textwrap.dedent(src))
    partial = next(n for n in walk(ctx.module) if isinstance(n, cst.Call) and ctx.code(n.func) == "functools.partial")
    call = next(n for n in walk(ctx.module) if isinstance(n, cst.Call) and ctx.code(n.func) == "pl.pallas_call")
    return ctx, partial.args[1].value, call


@pytest.mark.parametrize(
    "between, same",
    [
        ("pass", True),
        ("block = block * 4", False),
        ("block += 1", False),
        ("for block in (8, 16):\n                pass", False),
    ],
)
def test_a_partial_bound_name_at_the_pallas_call(between: str, same: bool):
    ctx, value, call = _partial_value(
        f"""
        def f(x, block):
            kern = functools.partial(k, bs=block)
            {between}
            return pl.pallas_call(kern)(x)
        """
    )
    assert same_value_at(ctx, value, call) is same


def test_a_rebinding_after_the_call_or_in_a_loop_around_it():
    ctx, value, call = _partial_value(
        """
        def f(x, block):
            kern = functools.partial(k, bs=block)
            y = pl.pallas_call(kern)(x)
            block = 2 * block
            return y
        """
    )
    assert same_value_at(ctx, value, call)
    ctx, value, call = _partial_value(
        """
        def f(xs, block):
            kern = functools.partial(k, bs=block)
            for x in xs:
                y = pl.pallas_call(kern)(x)
                block = 2 * block
            return y
        """
    )
    assert not same_value_at(ctx, value, call)


def test_a_module_level_partial_read_by_a_later_call():
    ctx, value, call = _partial_value(
        """
        BLOCK = 8
        kern = functools.partial(k, bs=BLOCK)
        def f(x):
            return pl.pallas_call(kern)(x)
        BLOCK = 32
        """
    )
    assert not same_value_at(ctx, value, call)


_RESIDENT = """
import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
{imports}

def k(x_ref, o_ref, s_ref):
    s_ref[...] = jnp.zeros(s_ref.shape, s_ref.dtype)

    def body(i, c):
        o_ref[pl.ds(i * 8, 8), :] = x_ref[pl.ds(i * 8, 8), :]
        return c

    lax.fori_loop(0, 4, body, None)

def f(x):
    return pl.pallas_call(k, out_shape=(x, jax.ShapeDtypeStruct((8, 128), x.dtype)){params})(x)
"""


@pytest.mark.parametrize(
    "imports, params, expected",
    [
        ("from jax.experimental.pallas import tpu as pltpu", ", compiler_params=pltpu.CompilerParams()", "arbitrary"),
        ("from jax.experimental.pallas import mosaic_gpu as plgpu", ", compiler_params=plgpu.CompilerParams()", "sequential"),
        ("", "", None),  # no backend named: the axis might run in parallel
    ],
)
def test_an_output_resident_across_the_new_axis_makes_it_sequential(imports: str, params: str, expected):
    analysis = analyze(_RESIDENT.format(imports=imports, params=params), "k.py")
    site = analysis.sites[0]
    cs = CallSite(analysis.ctx, site, analysis.detection.envs.get(site.kernel))
    axis = NewAxis(trip=cst.Integer("4"), name="i", semantics="parallel")
    assert new_axis_semantics(cs, axis, {"x_ref", "o_ref", "s_ref"}) == "parallel"  # every output moves
    if expected is None:
        with pytest.raises(CallSiteError, match="would race"):
            new_axis_semantics(cs, axis, {"x_ref", "o_ref"})
    else:
        assert new_axis_semantics(cs, axis, {"x_ref", "o_ref"}) == expected


def test_a_stepped_loop_is_not_told_to_use_a_count_that_would_not_help():
    # pl.loop(0, nb, step=2): blocks 0, 2, 4, ...; `make the count n // bs` would not make it provable
    source = '''
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def even_kernel(x_ref, o_ref):
    nb = x_ref.shape[0] // 32

    @pl.loop(0, nb, step=2)
    def _(r):
        rows = pl.ds(r * 32, 32)
        o_ref[rows, :] = jnp.tanh(x_ref[rows, :])


def tanh_even_blocks(x):
    return pl.pallas_call(even_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), input_output_aliases={0: 0})(x)
'''
    findings = analyze_source(source, "k.py").findings
    assert findings and all(not f.fixable for f in findings)
    assert all("block `2 * k`" in f.refusal and "make the count" not in f.refusal for f in findings), [f.refusal for f in findings]


# -- the module's own ceil-division helper (analysis.loops.symbolic._inlined) ----------------------

_CDIV = """
from jax.experimental import pallas as pl
{helper}
def f(x, bs):
    n, d = x.shape
    return None
"""


def _helper_poly(helper: str, text: str) -> tuple[Poly, Poly]:
    ctx, symbols, _prover, last = _setup(_CDIV.format(helper=textwrap.dedent(helper)))
    return _poly(ctx, symbols, text, last), _poly(ctx, symbols, "pl.cdiv(n, bs)", last)


def test_a_hand_spelled_ceiling_over_a_symbolic_block_is_pl_cdiv():
    mine, cdiv = _helper_poly("", "(n + bs - 1) // bs")
    assert mine == cdiv


@pytest.mark.parametrize("text", ["-(-n // bs)", "-(n // -bs)", "cdiv(n, bs)"])
def test_a_negated_floor_over_a_symbolic_block_is_pl_cdiv(text: str):
    # the quotient of `-n` is negative: read as an atom taken positive it made a ragged grid "fit"
    mine, cdiv = _helper_poly("def cdiv(a, b):\n    return -(-a // b)\n", text)
    assert mine == cdiv


def test_a_floor_of_a_negated_count_spells_its_positive_atom_so_a_guard_reads_it_back():
    ctx, symbols, _prover, last = _setup(_CDIV.format(helper=""))
    mine = _poly(ctx, symbols, "-n // bs", last)
    ((key,), coeff), = mine.terms
    assert coeff == -1 and symbols.atoms[key].text == "-(-n // bs)"  # the atom is `pl.cdiv(n, bs)`


def test_the_modules_ceil_division_helper_is_read_as_pl_cdiv():
    ctx, symbols, _prover, last = _setup(_CDIV.format(helper="def cdiv(a, b):\n    return (a + b - 1) // b\n"))
    mine = _poly(ctx, symbols, "cdiv(n, bs)", last)
    assert mine == _poly(ctx, symbols, "pl.cdiv(n, bs)", last)
    (key,), = [m for m, _c in mine.terms]
    assert symbols.atoms[key].text == "cdiv(n, bs)"  # messages and guards spell it as the code does


@pytest.mark.parametrize("helper", [
    "def cdiv(a, b):\n    return (a + b - 1) // b\ncdiv = max\n",             # the name is rebound
    "def cdiv(a, b):\n    return -(-a // b) if a else 0\n",                   # not an integer polynomial
    "def cdiv(a, b):\n    return (a + B - 1) // B\nB = 8\n",                    # reads a global
    "def cdiv(a, b):\n    c = a + b - 1\n    return c // b\n",                 # more than one statement
    "import functools\n@functools.cache\ndef cdiv(a, b):\n    return (a + b - 1) // b\n",  # decorated
    "def cdiv(a, *b):\n    return (a + 1) // 2\n",                             # star parameters
])
def test_a_helper_that_is_not_plainly_its_return_expression_stays_opaque(helper: str):
    mine, cdiv = _helper_poly(helper, "cdiv(n, bs)")
    assert mine != cdiv


def test_a_helper_called_with_fewer_arguments_than_it_has_parameters_stays_opaque():
    mine, cdiv = _helper_poly("def cdiv(a, b=128):\n    return (a + b - 1) // b\n", "cdiv(n)")
    assert mine != cdiv and len(mine.terms) == 1 and mine.terms[0][0][0].startswith("?")


@pytest.mark.parametrize("rebind", [
    "    match 64:\n        case bn:\n            pass\n",
    "    from errno import ENOEXEC as bn\n",
    "    from errno import bn\n",
])
def test_a_name_bound_in_both_arms_stays_opaque_past_a_binding_scope_bindings_misses(rebind: str):
    """A `match` capture or an import rebinds `bn` between the grid and the block: two values
    (red team: `grid = (n // bn,)`, then `case bn:`, made a safe-marked lift whose blocks run past
    the end)."""
    source = textwrap.dedent(
        """
        def f(x, big):
            if big:
                bn = 128
            else:
                bn = 16
            grid = (x.shape[0] // bn,)
        REBIND    return bn
        """
    ).replace("REBIND", rebind)
    ctx = ModuleContext(source)
    symbols = Symbols(ctx)
    reads = [symbols.poly(n, n) for n in _reads_of(ctx, "bn") if not isinstance(ctx.parent(n), (cst.MatchAs, cst.ImportAlias, cst.AsName))]
    assert reads[0] != reads[-1]


@pytest.mark.parametrize("unpack, wrong", [
    ("*_, bn = (16, 32, 64)", "32"),        # bn is 64, the last element
    ("first, *_, bn = x.shape", "x.shape[2]"),  # bn is x.shape[-1], whatever the rank
])
def test_a_name_after_a_star_target_is_not_read_by_position(unpack: str, wrong: str):
    """Red team: `*_, bn = (16, 32, 64)` made `bn` 32 to the prover, so a lift whose blocks of 64
    run past the end was marked safe."""
    ctx = ModuleContext(f"def f(x):\n    {unpack}\n    return bn, {wrong}\n")
    symbols = Symbols(ctx)
    ret = next(n for n in walk(ctx.module) if isinstance(n, cst.Return)).value
    bn, other = (symbols.poly(el.value, el.value) for el in ret.elements)
    assert bn != other


@pytest.mark.parametrize("source", [
    # module code: another module, or a function through globals(), may rebind BN between reads
    "if BIG:\n    BN = 128\nelse:\n    BN = 16\nGRID = (N // BN,)\nreset()\nBLOCK = (BN, 128)\n",
    # red team: `exec` rebinds a global no statement spells; one assignment is no single value then
    "BN = 16\nGRID = (N // BN,)\nexec('BN = 64')\nBLOCK = (BN, 128)\n",
])
def test_a_module_name_is_no_one_value_across_module_code(source: str):
    ctx = ModuleContext(source)
    symbols = Symbols(ctx)
    grid_read, block_read = [symbols.poly(n, n) for n in _reads_of(ctx, "BN")]
    assert grid_read != block_read


@pytest.mark.parametrize("before", ["    x = a\n    x = x * 2.0\n", ""])
def test_an_array_rebound_by_a_match_capture_has_another_shape(before: str):
    """Red team: `x.shape[0]` read for the grid, then `case x:` rebinds `x` to another array that
    the pallas_call gets: the prover took both shapes for one (a safe-marked lift whose blocks ran
    past the end of the shorter array)."""
    source = f"def f(x, a, b):\n{before}    g = x.shape[0]\n    match b:\n        case x:\n            pass\n    h = x.shape[0]\n"
    ctx = ModuleContext(source)
    symbols = Symbols(ctx)
    first, second = [symbols.poly(n, n) for n in walk(ctx.module) if isinstance(n, cst.Subscript)]
    assert first != second


@pytest.mark.parametrize("source", [
    "def f(x):\n    bn = 16\n    g = x.shape[0] // bn\n    match 64:\n        case bn:\n            pass\n    b = bn\n",
    "def f(x, bn):\n    g = x.shape[0] // bn\n    from errno import ENOEXEC as bn\n    b = bn\n",
    "bn = 16\ndef f(x):\n    from errno import bn\n    g = x.shape[0] // bn\n    b = bn\n",
])
def test_a_name_a_capture_or_import_binds_is_no_known_value(source: str):
    """Red team: one `bn = 16` (or a parameter, or a module `bn`) and a `case bn:` / import of
    `bn` in the function: the prover read `bn` as 16 (or the parameter) everywhere."""
    ctx = ModuleContext(source)
    symbols = Symbols(ctx)
    reads = [symbols.poly(n, n) for n in _reads_of(ctx, "bn") if not isinstance(ctx.parent(n), (cst.MatchAs, cst.ImportAlias, cst.AsName))]
    assert reads[0] != reads[-1] and reads[-1] != Poly.const(16)


def test_a_module_name_a_function_rebinds_through_global_is_no_known_value():
    """Red team (pre-existing): `BN = 16` at module level, `def set_big(): global BN; BN = 64`, and a
    wrapper that reads BN for the grid, calls set_big() and reads BN for the block: both were 16."""
    source = "BN = 16\ndef set_big():\n    global BN\n    BN = 64\ndef f(n):\n    g = n // BN\n    set_big()\n    b = BN\n"
    ctx = ModuleContext(source)
    symbols = Symbols(ctx)
    reads = [symbols.poly(n, n) for n in _reads_of(ctx, "BN") if not isinstance(ctx.parent(n), cst.NameItem)]
    assert reads[0] != reads[-1] and reads[-1] != Poly.const(16)


def test_a_name_a_nested_function_rebinds_through_nonlocal_is_no_known_value():
    """Red team (pre-existing): `bn = 16`, `def grow(): nonlocal bn; bn = 64`, the grid reads bn,
    grow() runs, the block reads bn: both were 16 to the prover."""
    source = "def f(n):\n    bn = 16\n    def grow():\n        nonlocal bn\n        bn = 64\n    g = n // bn\n    grow()\n    b = bn\n"
    ctx = ModuleContext(source)
    symbols = Symbols(ctx)
    f = ctx.module.body[0]
    reads = [symbols.poly(n, n) for n in _reads_of(ctx, "bn") if ctx.scope_of(n) is f and not isinstance(ctx.parent(n), cst.NameItem)]
    assert reads[0] != reads[-1] and reads[-1] != Poly.const(16)


@pytest.mark.parametrize("value, same", [
    ("pl.pallas_call(k, grid=(c.shape[0] // 8,))(x, c)", True),  # the value runs before `c` is bound again
    ("pl.pallas_call(k, grid=(c.shape[0] // 8,), in_specs=[spec(lambda: c.shape[0])])(x, c)", True),
    ("g(lambda: c.shape[0])", False),  # a lambda's body runs when called: perhaps after the binding
    ("g((c := h(x)).shape[0], c.shape[0])", False),  # a walrus binds `c` while the value runs
])
def test_a_read_in_the_value_that_binds_its_name_again_sees_the_earlier_binding(value: str, same: bool):
    """`y, c = pl.pallas_call(...)(x, c)`: a block shape `c.shape[1]` written in the call is the
    parameter's, as the operand `c` is (lstm_cell's c_prev in the real corpus read as two values, so
    its lift took a check where the lockstep rule needed none)."""
    ctx = ModuleContext(f"def f(x, c):\n    n = c.shape[0]\n    y, c = {value}\n    return y, c\n")
    symbols = Symbols(ctx)
    first, *later = [n for n in walk(ctx.module) if isinstance(n, cst.Subscript) and ctx.code(n) == "c.shape[0]"]
    reads = [symbols.poly(n, n) for n in later if not any(isinstance(a, cst.Lambda) for a in ctx.ancestors(n))]
    lambda_reads = [symbols.poly(n, n) for n in later if any(isinstance(a, cst.Lambda) for a in ctx.ancestors(n))]
    if same:
        assert reads and all(r == symbols.poly(first, first) for r in reads)
    else:
        assert all(r != symbols.poly(first, first) for r in reads + lambda_reads)


def test_a_rebound_parameter_is_one_value_after_its_binding():
    """`block_q = min(block_q, seq_len)` (jax-triton's attention): the grid's `pl.cdiv(seq_len,
    block_q)` and the partial's `block_q` read after it are one value; the read in its own value
    is the parameter."""
    ctx = ModuleContext("def f(x, bq):\n    n = bq\n    bq = min(bq, x.shape[0])\n    g = (x.shape[0] // bq,)\n"
                        "    b = bq\n    return g, b\n")
    symbols = Symbols(ctx)
    before, inner, grid_read, block_read = [symbols.poly(n, n) for n in _reads_of(ctx, "bq")]
    assert grid_read == block_read and before == inner and grid_read != before


def test_a_read_in_a_generator_expression_is_not_the_binding_before_it():
    """`(pl.pallas_call(partial(kernel, bn=bn), ...)(x) for _ in r)` runs when consumed: after
    `bn = big` below it, not with the `bn` that `assert m % bn == 0` checked (red-team: the lift was
    marked safe, and its partial last block differed from the original's clamped slice)."""
    ctx = ModuleContext("def f(x, bq, big):\n    bq = min(bq, x.shape[0])\n    g = (x.shape[0] // bq,)\n"
                        "    r = (bq for _ in [0])\n    bq = big\n    return g, next(r)\n")
    symbols = Symbols(ctx)
    _inner, grid_read, lazy_read = [symbols.poly(n, n) for n in _reads_of(ctx, "bq")]
    assert grid_read != lazy_read


@pytest.mark.parametrize("between, same", [
    ("", True),
    ("    grid_.append(1)\n", False),  # a list changed in place
    ("    grid_[0] = 7\n", False),
    ("    use(grid_)\n", False),  # a call may change it
    ("    grid[0] = 7\n", False),  # the caller's list, the same object as `grid_` (`grid_ = grid`)
    ("    grid.append(1)\n", False),
    ("    n = grid[0]\n", True),
])
def test_an_entry_of_a_sequence_nothing_changes_is_one_value(between: str, same: bool):
    ctx = ModuleContext("def f(x, grid=None):\n    grid_ = grid\n    if grid_ is None:\n        grid_ = [x.shape[0] // 8, 2]\n"
                        f"    a = grid_[0]\n{between}    b = grid_[0]\n    return a, b\n")
    symbols = Symbols(ctx)
    a, b = [symbols.poly(n, n) for n in walk(ctx.module) if isinstance(n, cst.Subscript) and ctx.code(n) == "grid_[0]"
            and not isinstance(ctx.parent(n), cst.AssignTarget)]
    assert (a == b) is same


@pytest.mark.parametrize("maps, rank", [
    ("lambda _, j: (j, 0, 0)", 2),
    ("lambda *_: (0, 0, 0)", None),  # takes any grid: a caller's grid of another length runs in the original
    ("lambda i: (0, 0, 0)", None),  # one index, a two-entry default: no length
])
def test_a_defaulted_grid_reads_as_its_entries_when_the_index_maps_fix_its_length(maps: str, rank):
    from pallas_fix.rewrite.callsite.grid_shape import defaulted_grid
    ctx = ModuleContext(
        "from jax.experimental import pallas as pl\n"
        "def f(x, grid=None):\n    grid_ = grid\n    if grid_ is None:\n        grid_ = (x.shape[1] // 8, x.shape[0])\n"
        f"    return pl.pallas_call(k, grid=grid_, in_specs=[pl.BlockSpec((None, 8, 4), {maps})])(x)\n")
    call = next(n for n in walk(ctx.module) if isinstance(n, cst.Call) and ctx.code(n.func) == "pl.pallas_call")
    grid = next(a.value for a in call.args if a.keyword is not None and a.keyword.value == "grid")
    entries = defaulted_grid(ctx, grid, call, lambda _a: None)
    assert (None if entries is None else [ctx.code(e) for e in entries]) == (None if rank is None else [f"grid_[{k}]" for k in range(rank)])


@pytest.mark.parametrize("calls, same", [
    ("    r = call()\n", True),  # called after the binding: the closure reads that value
    ("    r = call()\n    s = call()\n", True),
    ("    r = call()\n    bn = 64\n    s = call()\n", False),  # its calls see two values
    ("    r = run(call)\n", False),  # passed on: it may run anywhere
    ("    r = (call() for _ in [0])\n    bn = 64\n    s = next(r)\n", False),  # runs when consumed, after `bn = 64`
])
def test_a_closure_reads_the_value_its_calls_see(calls: str, same: bool):
    """axlearn's `def call_kernel(*, kernel, grid, ...)` reads `block_k` from its wrapper, which
    bound it (`block_k = min(block_k, kv_seq_len)`) before every call of `call_kernel`."""
    ctx = ModuleContext("def f(x, bn):\n    bn = min(bn, x.shape[0])\n    g = (x.shape[0] // bn,)\n\n"
                        f"    def call():\n        return bn\n\n{calls}    return g\n")
    symbols = Symbols(ctx)
    outer, inner = [symbols.poly(n, n) for n in _reads_of(ctx, "bn")][1:3]
    assert (outer == inner) is same


@pytest.mark.parametrize("index, param", [
    ("(j, 0, 0)", "i"),  # a throwaway `_`: named once the new index reads its axis
    ("(j, _ * 0, 0)", "_"),  # read in the body: renamed, the rebuilt body read an unbound (or a global) `_`
])
def test_an_index_map_parameter_its_body_reads_keeps_its_name(index: str, param: str):
    from pathlib import Path
    from pallas_fix.engine import fix_source
    before = Path(__file__).parent / "fixtures/codemods/program_id_blocks/pid_defaulted_grid_triton_before.py"
    source = before.read_text().replace("lambda _, j: (j, 0, 0)", f"lambda _, j: {index}")
    source = source.replace("    grid_ = grid\n", "    assert seq_len % block_q == 0\n    grid_ = grid\n")
    fixed = fix_source(source, "k.py", unsafe=True).source
    maps = [line.strip() for line in fixed.splitlines() if "lambda" in line]
    assert len(maps) == 2 and all(m.startswith(f"lambda {param}, j:") or f"lambda {param}, j:" in m for m in maps), maps


def test_a_defaulted_grid_takes_its_length_from_its_own_call_only():
    """Whole-array operands take any grid: another pallas_call's index_maps in the same wrapper say
    nothing about this one's (a caller's grid of another length runs in the original)."""
    from pallas_fix.rewrite.callsite.grid_shape import defaulted_grid
    ctx = ModuleContext(
        "from jax.experimental import pallas as pl\n"
        "def f(x, grid=None):\n    grid_ = grid\n    if grid_ is None:\n        grid_ = (x.shape[0] // 8, 2)\n"
        "    y = pl.pallas_call(k2, grid=(4, 4), in_specs=[pl.BlockSpec((8, 8), lambda i, j: (i, j))])(x)\n"
        "    return pl.pallas_call(k, grid=grid_)(y)\n")
    calls = [n for n in walk(ctx.module) if isinstance(n, cst.Call) and ctx.code(n.func) == "pl.pallas_call"]
    grid = next(a.value for a in calls[1].args if a.keyword is not None and a.keyword.value == "grid")
    assert defaulted_grid(ctx, grid, calls[1], lambda _a: None) is None


@pytest.mark.parametrize("extra, same", [
    ("", True),
    # Any write of an attribute of `bs` in the module: its fields may change between two reads.
    ("    bs.bm = 8\n", False),
    ("    setattr(bs, 'bm', 8)\n", False),
    ("    del bs.bm\n", False),
    # `bs` rebound between the reads: two bindings, two values.
    ("    bs = other\n", False),
])
def test_a_field_of_a_name_is_one_value_where_nothing_writes_it(extra, same):
    source = textwrap.dedent(
        """
        def f(x, block_sizes, other):
            bs = block_sizes
            a = x.shape[0] // bs.bm
        EXTRA    b = bs.bm
        """
    ).replace("EXTRA", extra)
    ctx = ModuleContext(source)
    reads = [n for n in walk(ctx.module) if isinstance(n, cst.Attribute) and ctx.code(n) == "bs.bm"
             and not isinstance(ctx.parent(n), (cst.AssignTarget, cst.Del))]
    symbols = Symbols(ctx)
    first, last = (symbols.poly(n, n) for n in (reads[0], reads[-1]))
    assert (first == last) == same


@pytest.mark.parametrize("rank, same", [(2, True), (3, False), (None, False)])
def test_a_dim_read_from_the_back_is_the_front_dim_where_the_rank_is_known(rank, same):
    ctx = ModuleContext("def f(x):\n    n = x.shape[-1]\n    m = x.shape[1]\n")
    symbols = Symbols(ctx)
    symbols.ranks = lambda key: rank if key.startswith("x@") else None
    n, m = (next(n for n in walk(ctx.module) if isinstance(n, cst.Name) and n.value == v) for v in ("n", "m"))
    assert (symbols.poly(cst.Name("n"), n) == symbols.poly(cst.Name("m"), m)) == same


@pytest.mark.parametrize("module, between, same", [
    ("", "", True),
    # The object written through another name: an alias, a helper's parameter, a method's `self`.
    ("", "    cfg2 = bs\n    cfg2.bm = 8\n", False),
    ("def shrink(cfg):\n    cfg.bm = cfg.bm * 2\n", "    shrink(bs)\n", False),
    ("class B:\n    def grow(self):\n        self.bm += 1\n", "    bs.grow()\n", False),
    ("", "    object.__setattr__(bs, 'bm', 8)\n", False),
    ("", "    setattr(cfg2, name, 8)\n", False),
    # A property (or any function named like the field) may answer differently each read.
    ("class B:\n    @property\n    def bm(self):\n        return next(sizes)\n", "", False),
    # Another field written elsewhere says nothing about `bm`.
    ("def widen(cfg):\n    cfg.bn = 8\n", "    widen(bs)\n", True),
])
def test_a_field_written_through_any_name_is_no_one_value(module, between, same):
    """redteam8: `kernel = partial(k, bm=bs.bm); shrink(bs); pallas_call(kernel, ...)` lifted to a
    BlockSpec of `bs.bm` read after `shrink` doubled it: the module writes `.bm`, only not as `bs.bm`."""
    source = module + "\n\ndef f(x, block_sizes, cfg2, name):\n    bs = block_sizes\n    a = x.shape[0] // bs.bm\n" + between + "    b = bs.bm\n"
    ctx = ModuleContext(source)
    fn = next(n for n in walk(ctx.module) if isinstance(n, cst.FunctionDef) and n.name.value == "f")
    reads = [n for n in walk(fn) if isinstance(n, cst.Attribute) and ctx.code(n) == "bs.bm"]
    symbols = Symbols(ctx)
    first, last = (symbols.poly(n, n) for n in (reads[0], reads[-1]))
    assert (first == last) == same


@pytest.mark.parametrize("example, safe", [
    ("# pallas-fix: example col_scale(f32[16, 512])\n", True),  # the examples state rank 2
    ("", False),  # only the kernel's two subscripts say rank 2
])
def test_a_dim_from_the_back_takes_no_rank_from_the_kernels_subscripts(example: str, safe: bool):
    """redteam8: `x_ref[:, cols]` is legal on a rank-3 ref, whose `x.shape[-1]` is not `x.shape[1]`:
    with no example, the count of the kernel's subscripts made `n = x.shape[-1]; grid=(n // BN,)` a
    safe-marked lift, and the rank-2 BlockSpecs it wrote failed on the f32[8, 256, 256] call the
    original ran."""
    from pathlib import Path
    from pallas_fix.core.model import FixSafety
    before = Path(__file__).parent / "fixtures/codemods/program_id_blocks/pid_negative_dim_cols_before.py"
    source = before.read_text().replace("# pallas-fix: example col_scale(f32[16, 512])\n", example)
    findings = analyze_source(source, "k.py").findings
    assert findings and all(f.fixable for f in findings)
    assert all((f.fix_safety == FixSafety.SAFE) == safe for f in findings), [f.fix_safety for f in findings]


@pytest.mark.parametrize("source, same", [
    # bound once by unpacking a sequence (`(bm,) = block_shape`): one int at every read after it
    ("def f(block_shape, n):\n    (bm,) = block_shape\n    a = n // bm\n    return bm, bm\n", True),
    # the same unpacking in a loop takes another value each pass: no single value
    ("def f(shapes):\n    for s in shapes:\n        (bm,) = s\n    return bm, bm\n", False),
])
def test_a_name_unpacked_once_from_a_sequence_is_one_value(source: str, same: bool):
    """The embedding lookups of the real corpus read `(bm,) = block_shape`: their blocks of `bm`
    rows over `m // bm` steps were unprovable while each read of `bm` was an opaque atom of its own."""
    ctx = ModuleContext(source)
    symbols = Symbols(ctx)
    ret = next(n for n in walk(ctx.module) if isinstance(n, cst.Return)).value
    first, second = (symbols.poly(el.value, el.value) for el in ret.elements)
    assert (first == second) is same
