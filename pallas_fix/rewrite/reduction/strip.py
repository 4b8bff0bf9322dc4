"""R2 strip-mined (issue 27's "Strip-mine", issue 28): where the call is already pipelined over
other grid axes on TPU, a lift with one loop window per grid step multiplies the steps and ran
0.6-0.85x the original on a v5e. So there the new axis moves a block of `w` windows and the
kernel walks them inside the step with a Python `for` over static window numbers, the user's
own windows (`pl.ds(j * bk, bk)`, `j` now the window within the block) and body unchanged, the
carry read from scratch once before the windows and written once after: JAX's
ops/tpu/flash_attention.py's block_k_major / block_k. Measured on the chip
(benchmarks/tpu_experiments, flash_strip_lanes.py): four windows per step, unrolled, with
lane-dense softmax state, ran 1.35x (f32) and 1.42x (bf16) the user's original where it fits.

`w` is chosen for the chip at trace time, in the wrapper, by a helper the rewrite adds
(`_windows_per_step`): the most windows that divide the trip count (no partial block: the
strip covers exactly the elements the one-window lift covers, so its bounds proofs hold), at
most 8, with the strip-mined operands' blocks double-buffered within a VMEM budget.

Only where every window moves with the loop index alone (block index = the index, the loop
from 0 in steps of 1, inputs only), the carry has no step counter, and the window size is a
kernel parameter or a number: elsewhere the one-window lift stays as it was, and on a pipelined
TPU call, where that lift multiplies the steps, its fix message says why (`strip_plan`'s reason,
or what the wrapper could not write: the lift's `one_window` note), so the user can change it.

A causal bound (the loop runs to `upper`, a function of pl.program_id, and the one-window lift
skips the steps past it with `pl.when(k < upper)`): each window of the block runs under that
test on its GLOBAL number, the carry loaded from and stored to scratch inside it, so a skipped
window leaves the carry as it was (JAX's flash attention reads and writes its scratch per
block_k the same way). The index_map asks a step whose windows are all skipped
(`block * windows >= upper`: its first window is past the bound) for block 0, as the one-window
lift does; a step with a window computed keeps its own block.

A reversed walk (block index `n - 1 - k`, `n` written as the call writes the trip count): the
strip's block is `n // windows - 1 - k` (`windows` divides `n`), and its windows are walked last
to first, `count - 1 - window`, each with the index bound to its global value: the carry sees
the windows in the loop's order. The bounds proofs read one window's index (a strip is inside
the array where each of its windows is). Not under a causal bound: one window per step there. Where the body reads the index beyond its windows (a position, a mask), the `for` walks a
window number `window`, each window becomes `pl.ds(window * size, size)` and the index is bound
to its global value, `pl.program_id(axis) * windows + window`: the body sees the iteration
numbers the loop gave it, in the same order.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

import libcst as cst

from pallas_fix.analysis.context import walk
from pallas_fix.core import names as N
from pallas_fix.core.model import Backend
from pallas_fix.rewrite.blocks.plan import BlockIndexExpr, RefBlock, Windows
from pallas_fix.rewrite.reduction.carries import Carry
from pallas_fix.rewrite.reduction.carry_io import unpack_to_drop, unpacked_names
from pallas_fix.rewrite.text.scopes import bindings, underscored
from pallas_fix.rewrite.text.syntax import code, names_in, paren_text, variable_names

CAP = 8  # windows per step at most: the kernel unrolls them (JAX's kernel unrolls a handful)
BUDGET = 8 << 20  # bytes for the strip-mined operands' double-buffered blocks: half of v5e's 16 MiB scoped VMEM


@dataclass(frozen=True)
class Strip:
    """A strip-mined lift: the wrapper binds `windows.name` (via `windows.helper`), and the kernel
    walks `range(count)` windows per step (`count`: kernel-side, `k_ref.shape[1] // block_k`)."""

    windows: Windows
    count: str
    # Where the body reads the index beyond its windows (a position, a mask): the `for` walks
    # `local`, each window becomes `pl.ds(local * size, size)`, and the index is bound to the
    # loop's own iteration number, `global_index`, at the top of each window.
    local: Optional[str] = None
    global_index: Optional[str] = None
    # The windows walked last to first (block index `n - 1 - k`): the strip's block is
    # `n // windows - 1 - block`, and window `window` of the step is `count - 1 - window` of it.
    reversed: bool = False

    def helper_def(self, jnp: str) -> cst.FunctionDef:
        fn = cst.parse_statement(helper_source(self.windows.helper, jnp))
        assert isinstance(fn, cst.FunctionDef)
        return fn.with_changes(leading_lines=[], lines_after_decorators=[])

    def words(self) -> str:
        return (f"each step walking `{self.windows.name}` of its windows (the most that divide the trip count, at most "
                f"{CAP}, within {BUDGET >> 20} MiB of VMEM double-buffered: `{self.windows.helper}`)")


def helper_source(name: str, jnp: str) -> str:
    """The module-level helper the rewrite adds; tests run it as written. Its lines keep within
    79 columns (a name or a spelling of jax.numpy a few characters longer aside): the file it
    goes into may keep to PEP 8's width, and no later pass can break a comprehension."""
    return (
        f"def {name}(n, *windows):\n"
        f'    """How many of a reduction\'s `n` loop windows one grid step walks\n'
        f"    (pallas-fix): on a TPU, where the call is already pipelined over other\n"
        f"    axes, fewer and larger steps pay. The most that divide `n` (no partial\n"
        f"    block), at most {CAP} (the kernel unrolls them), with the blocks of\n"
        f"    `windows`, each (one window's block shape, dtype), double-buffered\n"
        f"    within {BUDGET >> 20} MiB: half the 16 MiB of VMEM a v5e gives a kernel by default,\n"
        f'    the rest for its other blocks."""\n'
        f"    window_bytes = 0\n"
        f"    for shape, dtype in windows:\n"
        f"        size = {jnp}.dtype(dtype).itemsize\n"
        f"        for d in shape:\n"
        f"            size *= d if isinstance(d, int) else 1\n"
        f"        window_bytes += size\n"
        f"    budget = {BUDGET >> 20} * 2**20\n"
        f"    fits = [w for w in range(1, min(n, {CAP}) + 1)\n"
        f"            if n % w == 0 and 2 * w * window_bytes <= budget]\n"
        f"    return max(fits, default=1)\n"
    )


def strip_plan(analysis, region, site, blocks: list[RefBlock], slots: dict, carry: Carry, guard: Optional[str],
               lifted_ids: set[int], extent_reads: list, pipelined, axis: int, pl: str, trip: str = "") -> Strip | str | None:
    """The strip-mined form of this lift over new grid axis `axis` (`pl`: how the file spells
    jax.experimental.pallas); None where no strip is wanted (not a pipelined TPU call, or
    --lift-for-memory); where one is wanted but the one-window lift stays (module docstring),
    the reason, which the fix message gives: that lift multiplies the steps of a call already
    pipelined, and the user may change what stops the strip."""
    ctx, loop, env = analysis.ctx, region.loop, region.env
    if getattr(analysis.config, "lift_for_memory", False) or site.backend is not Backend.TPU or pipelined is None:
        return None
    # (A full-extent read of a strip-mined dim stays right: `pl.num_programs(axis) * x_ref.shape[d]`
    # is (n / w) * (w * size), or a keyword carries the size: rewrite.extents.extent_reads.)
    if not blocks:
        return None
    if site.forwarded:
        return "the sizes are passed in by a helper's call, where the windows per step are not counted"
    if env.static_int(loop.lower) != 0 or (loop.step is not None and env.static_int(loop.step) != 1):
        return "the loop does not run from 0 in steps of 1"
    if any(l.counter is not None or not l.bound_in_body for l in carry.leaves):
        return "the carry holds a step counter, or a value the body does not bind"
    unpack = unpack_to_drop(region, carry)
    if unpack is not None and len(unpacked_names(carry, unpack)) != len(carry.leaves):
        return "a carry leaf is unpacked as `_`: nothing would carry it from window to window"
    directions = {_plain_window(b, slots, trip) for b in blocks}
    if len(directions) != 1 or None in directions:
        return ("not every window is an input's block at the loop index (or at the trip count - 1 - the index): "
                "an output, an offset, a squeezed or scalar dim moves with it")
    backward = directions == {-1}
    if backward and guard is not None:
        return "a reversed walk under a bound that depends on pl.program_id"  # its skipped blocks are not the last ones
    size = _kernel_size(ctx, blocks[0])
    kernel = site.kernel
    params = {p.name.value for p in kernel.params.params + kernel.params.kwonly_params}
    rebound = set(bindings(kernel.body, nested=True))
    if size is None or not variable_names(size) <= params - rebound:  # it must mean the same where the count is taken
        return ("a window is not `pl.ds(start, size)` with one size per ref, a number or a parameter of the kernel "
                "(pass a module constant in with functools.partial)")
    index = loop.index_name
    inside = {id(n) for n in walk(region.body)}
    outside = [n for n in walk(kernel.body) if isinstance(n, cst.Name) and n.value == index and id(n) not in inside]
    if outside:  # the `for` binds the index name at kernel level
        return f"the kernel uses the name `{index}` outside the loop"
    taken = names_in(ctx.module)
    existing = _helper_in(ctx.module)
    helper, name = existing or underscored("_windows_per_step", taken), underscored("windows_per_step", taken)
    windows = Windows(name, helper, added=existing is None)
    count = f"{blocks[0].param}.shape[{blocks[0].dim}] // {paren_text(code(size))}"
    if guard is None and not backward and not region.index_needed(lifted_ids):
        return Strip(windows, count)
    # the index feeds a position, a mask or a causal bound's test too: that use gets the loop's iteration number
    if any(id(sub) not in inside for b in blocks for sub, _ in b.subscripts):  # it would not see the window number
        return "a window is taken in a helper outside the loop body, and the body reads the index beyond its windows"
    local = underscored("window", taken)
    return Strip(windows, count, local, f"{pl}.program_id({axis}) * ({count}) + {local}", backward)


def _helper_in(module: cst.Module) -> Optional[str]:
    """The name of a module-level def that is this helper word for word (under any name the
    rewrite picks, with the file's spelling of jax.numpy): one an earlier strip added."""
    return next(iter(_helpers(module)), None)


def _helpers(module: cst.Module) -> dict[str, str]:
    """The module-level defs that are this helper word for word, by name, with their text."""
    found = {}
    for stmt in module.body:
        if isinstance(stmt, cst.FunctionDef) and stmt.name.value.startswith("_windows_per_step"):
            text = cst.Module([]).code_for_node(stmt.with_changes(leading_lines=[]))
            spelled = re.search(r"size = (\S+)\.dtype\(dtype\)\.itemsize", text)
            if spelled and text == helper_source(stmt.name.value, spelled.group(1)):
                found[stmt.name.value] = text
    return found


ONE_WINDOW = "    return 1  # pallas-fix verification: one window per grid step\n"


def one_window_per_step(original: str, rewritten: str) -> Optional[str]:
    """`rewritten` with every strip helper it adds (one `original` does not define) walking one
    window per grid step; None where it adds none. Verification runs this too: an example whose
    trip count the helper takes whole in one step (at most 8 windows) never crosses a step of the
    new axis, so neither the carry from step to step nor a causal clamp past the first block would
    be run."""
    if "def _windows_per_step" not in rewritten:  # most rewrites: no strip, nothing to parse
        return None
    try:
        had = _helpers(cst.parse_module(original))
        added = {n: t for n, t in _helpers(cst.parse_module(rewritten)).items() if n not in had}
    except cst.ParserSyntaxError:
        return None
    for text in added.values():
        last = text.rindex("    return max(fits, default=1)\n")
        rewritten = rewritten.replace(text, text[:last] + ONE_WINDOW, 1)
    return rewritten if added else None


def window_edits(ctx, strip: Strip, blocks: list[RefBlock]) -> dict:
    """The windows' edits: with the index bound to its global value (`Strip.local`), each window
    `pl.ds(k * bk, bk)` becomes `pl.ds(window * bk, bk)`, the same window inside the step's block;
    otherwise the windows stay, a `pl.multiple_of` hint on their starts dropped (static_start_edits)."""
    if strip.local is None:
        return static_start_edits(ctx, blocks)
    edits = {}
    for b in blocks:
        for sub, dims in b.subscripts:
            window = _element(sub, next(iter(dims)))
            assert isinstance(window, cst.Call)  # strip_plan read its size (_kernel_size)
            size = code(window.args[1].value)
            local = f"({strip.count} - 1 - {strip.local})" if strip.reversed else strip.local
            text = f"{code(window.func)}({local} * {paren_text(size)}, {size})"
            edits[window] = lambda _node, text=text: cst.parse_expression(text)
    return edits


def static_start_edits(ctx, blocks: list[RefBlock]) -> dict:
    """`pl.multiple_of(k * bk, bk)` as a window's start becomes `k * bk`: over a static window
    number the start is a Python int, which the hint would turn into a traced value (a dynamic
    start again), and Mosaic needs no hint for a static one."""
    edits = {}
    for b in blocks:
        for sub, dims in b.subscripts:
            window = _element(sub, next(iter(dims)))
            start = window.args[0].value if isinstance(window, cst.Call) and window.args else None
            if isinstance(start, cst.Call) and ctx.imports.is_(start.func, N.MULTIPLE_OF) and start.args:
                edits[start] = lambda updated: updated.args[0].value
    return edits


def _plain_window(b: RefBlock, slots: dict, trip: str) -> Optional[int]:
    """1 for an input read in windows at block `index` (no offset, no other axis, no squeezed
    dim), -1 for one read at block `trip - 1 - index` with `trip` the loop's trip count as the
    call writes it (the same text: the last window first); None otherwise."""
    slot = slots.get(b.param)
    index = b.index
    if slot is None or slot.kind != "in" or index.folds or b.squeeze or b.squeezed or b.to_vmem:
        return None
    if index.axes == {"new": 1} and index.offset == 0 and not index.symbolic:
        return 1
    if index.axes == {"new": -1} and index.offset == -1 and len(index.symbolic) == 1:
        mult, expr = index.symbolic[0]
        return -1 if mult == 1 and code(expr) == trip else None
    return None


def reversed_index(index: BlockIndexExpr, windows: str) -> BlockIndexExpr:
    """`n - 1 - k` (strip_plan's reversed window) over blocks of `windows` windows: `n // windows
    - 1 - k`, exact since `windows` divides `n` (the helper's count)."""
    (_, expr), = index.symbolic
    blocks = cst.parse_expression(f"({code(expr)}) // {windows}")
    return BlockIndexExpr(dict(index.axes), index.offset, ((1, blocks),), index.folds)


def _kernel_size(ctx, b: RefBlock) -> Optional[cst.BaseExpression]:
    """The window size as the kernel writes it (`bk` of `pl.ds(k * bk, bk)`), the same in every
    window of the ref; None for another spelling."""
    sizes = set()
    found = None
    for sub, dims in b.subscripts:
        if len(dims) != 1:
            return None
        element = _element(sub, next(iter(dims)))
        if not (isinstance(element, cst.Call) and ctx.imports.is_(element.func, N.DS | N.SLICE) and len(element.args) == 2
                and all(a.keyword is None for a in element.args)):
            return None
        found = element.args[1].value
        sizes.add(code(found))
    return found if len(sizes) == 1 else None


def _element(sub: cst.Subscript, dim: int) -> Optional[cst.BaseExpression]:
    if len(sub.slice) == 1 and isinstance(sub.slice[0].slice, cst.Index):
        value = sub.slice[0].slice.value
        if isinstance(value, cst.Tuple):
            return value.elements[dim].value if dim < len(value.elements) else None
        return value if dim == 0 else None
    if dim < len(sub.slice) and isinstance(sub.slice[dim].slice, cst.Index):
        return sub.slice[dim].slice.value
    return None
