"""An output left in HBM that the kernel writes by DMA into its program's block (issue 28).

`out_specs=pl.BlockSpec(memory_space=pltpu.HBM)` (or `pl.ANY`) hands the kernel the whole output;
a TPU kernel then builds its rows in VMEM scratch and copies them out itself:
`c = pltpu.make_async_copy(src_ref=scratch, dst_ref=o_ref.at[pl.ds(i * bm, bm)], sem=sem)`,
`c.start()`, `c.wait()`, with `i = pl.program_id(0)` (the embedding lookups of the real corpus).
Once every such window lies in program i's block, a Pallas expert gives the output a VMEM
BlockSpec of that block and lets the pipeline write it back after the step. pallas-fix keeps each
DMA and re-bases it onto the block (`dst_ref=o_ref`, or `o_ref.at[pl.ds(c * 8, 8)]` for a window
at an offset inside it): a VMEM-to-VMEM copy, which Mosaic and TPU interpret mode both run.

That is the same program only when each copy has landed before the step ends, since the block is
written back then; so every DMA into the output must be named and waited in the step that starts
it: `c.start()` then `c.wait()` in the same block of statements, or `copies.append(c)` there and a
later kernel-level `for c in copies: c.wait()`, all at the kernel's top level or in static Python
`for` loops (unrolled when traced). Refused: another backend, an aliased output (the bytes no DMA
writes would be written back from uninitialised VMEM), any other access of the output (a read back,
a plain store), a DMA started without a name or under a `pl.when` / loop body, and windows that may
overlap (one DMA per block, or one per static-loop pass at an offset `c * size`).
"""

from __future__ import annotations

from typing import Optional

import libcst as cst

from pallas_fix.analysis.context import walk
from pallas_fix.analysis.discovery.dma_calls import MAKE_COPY, copy_argument
from pallas_fix.core.model import Backend
from pallas_fix.core.plans import Refuse
from pallas_fix.rewrite.callsite.spelling.operands import CallSiteError
from pallas_fix.rewrite.inblock.dma_semaphores import check_semaphore
from pallas_fix.rewrite.text.syntax import code


def dma_written(ctx, cs, ref: str, subscripts: list[cst.Subscript], offsets: dict) -> bool:
    """Is `ref` an output left in HBM whose every window is a DMA destination waited in its step?
    False for any ref not in HBM (the usual lift, or Spec.carried_placement's refusal for an input),
    once the DMAs into an output already in VMEM pass the same checks (its block is written back
    after the step too); raises Refuse, saying what to change, for an output in any other form."""
    slot = cs.slots.get(ref)
    if slot is None or slot.kind != "out":
        return False
    try:
        spec = cs.spec_of(slot)
    except CallSiteError:
        return False  # the lift reads the spec again and says why it cannot
    if not spec.unblocked():
        dmas = [s for s in subscripts if _copy_destination(ctx, s) is not None]
        if dmas:
            _check_dmas(ctx, cs, dmas, offsets, f"`{ref}` is written by DMA")
        return False
    where = f"`{ref}` is left in HBM (`{spec.placement}`)"
    if cs.backend() is not Backend.TPU:
        raise Refuse(f"{where}: pallas-fix moves an output written by DMA into a VMEM block only for TPU (Mosaic) kernels")
    if cs.aliased:
        raise Refuse(f"{where} and the call sets input_output_aliases: in a VMEM block the bytes no DMA writes would be "
                     "written back from uninitialised memory instead of keeping the aliased input's values")
    for sub in subscripts:
        if _copy_destination(ctx, sub) is None:
            raise Refuse(f"{where} and accessed other than as the `dst_ref` of a `pltpu.make_async_copy` (line "
                         f"{ctx.span(sub).line}); pallas-fix moves such an output into a VMEM block only where the kernel "
                         "writes it by DMA alone")
    _check_dmas(ctx, cs, subscripts, offsets, where)
    return True


def _check_dmas(ctx, cs, subscripts: list[cst.Subscript], offsets: dict, where: str) -> None:
    """One DMA into the output, at the kernel's level or in static loops, its windows disjoint,
    waited in the step."""
    if len(subscripts) != 1:
        lines = ", ".join(str(ctx.span(s).line) for s in subscripts)
        raise Refuse(f"{where} and written by DMA at {len(subscripts)} places (lines {lines}); pallas-fix moves one DMA "
                     "per output into its block, whose windows it can prove do not overlap: copy the rows into one scratch first")
    sub = subscripts[0]
    call = _copy_destination(ctx, sub)
    loops = _static_loops(ctx, cs, call, where)
    _check_disjoint(ctx, sub, offsets.get(id(sub)), loops, where)
    _check_waited(ctx, cs.site.kernel, call, where)
    check_semaphore(ctx, cs.site.kernel, call, where, lambda other: _proved_waited(ctx, cs.site.kernel, other))


def _copy_destination(ctx, sub: cst.Subscript) -> Optional[cst.Call]:
    """The DMA that takes `ref.at[...]` as its destination (`dst_ref`, by keyword or position)."""
    if not (isinstance(sub.value, cst.Attribute) and sub.value.attr.value == "at"):
        return None
    return copy_argument(ctx, sub, "dst_ref", MAKE_COPY)  # `async_copy` starts unnamed


def _static_loops(ctx, cs, call: cst.Call, where: str) -> list[cst.For]:
    """The static Python `for` loops around the copy, which must sit in the kernel's own body:
    under a `pl.when`, a traced `if` or a loop body it may run in some steps only, or be waited
    elsewhere."""
    kernel, env = cs.site.kernel, cs.env
    loops = []
    for anc in ctx.ancestors(call):
        if anc is kernel:
            return loops
        if isinstance(anc, cst.For):
            iterable = anc.iter
            if (not (isinstance(iterable, cst.Call) and isinstance(iterable.func, cst.Name) and iterable.func.value == "range")
                    or (env is not None and env.value(iterable).dynamic)):
                break
            loops.append(anc)
        elif isinstance(anc, (cst.FunctionDef, cst.If, cst.While, cst.With, cst.Try, cst.Lambda)):
            break
    raise Refuse(f"{where} and the DMA into it (line {ctx.span(call).line}) is not at the kernel's top level or in a "
                 "static Python `for` loop there: under a `pl.when`, an `if` or a loop body it may be started or waited "
                 "in another step; start and wait it in the kernel's own body")


def _check_disjoint(ctx, sub: cst.Subscript, offset, loops: list[cst.For], where: str) -> None:
    """One DMA per step, or one per static-loop pass at an offset `c * size` of its own loop
    index: the windows of one step never overlap (in VMEM as in HBM, overlapping copies race)."""
    if not loops:
        return  # one DMA in the step, one window (`pl.ds(0, 8)` of a block of `bm >= 8` rows too): nothing to overlap
    if offset is None:
        raise Refuse(f"{where} and its DMA (line {ctx.span(sub).line}) copies into the same rows of the block in every pass "
                     "of a loop: pallas-fix proves the passes' copies disjoint only by an offset `c * size` of the loop's "
                     "index in the rows the program id picks (a window moving along another dim it does not compare; copies "
                     "in flight together into the same bytes race); copy the block once, or walk the chunks along those rows")
    size = offset.ds.args[1].value if len(offset.ds.args) > 1 else None
    rest = offset.rest
    targets = {lp.target.value for lp in loops if isinstance(lp.target, cst.Name)}
    if (size is not None and isinstance(rest, cst.BinaryOperation) and isinstance(rest.operator, cst.Multiply)):
        for index, scale in ((rest.left, rest.right), (rest.right, rest.left)):
            if isinstance(index, cst.Name) and index.value in targets and code(scale) == code(size):
                return
    window = f"pl.ds({code(rest)}, {code(size)})" if size is not None else code(offset.ds)
    raise Refuse(f"{where} and pallas-fix cannot prove its DMA windows `{window}` inside the block (line "
                 f"{ctx.span(sub).line}) do not overlap: it proves a start `c * size`, `c` a static loop's index, "
                 "one window per pass")


def _check_waited(ctx, kernel: cst.FunctionDef, call: cst.Call, where: str) -> None:
    """`c = make_async_copy(...)`, then in the same block `c.start()` and either `c.wait()` or
    `copies.append(c)` with `copies` waited by a later kernel-level `for x in copies: x.wait()`."""
    stmt = ctx.statement_of(call)
    line = ctx.span(call).line
    name = _bound_name(stmt, call)
    if name is None:
        raise Refuse(f"{where} and its DMA (line {line}) is not bound to a name; pallas-fix needs "
                     "`c = pltpu.make_async_copy(...)`, `c.start()`, `c.wait()` in the step to prove it lands before "
                     "the block is written back")
    block = ctx.parent(stmt)
    body = list(block.body) if isinstance(block, (cst.IndentedBlock, cst.Module)) else []
    at = next(k for k, s in enumerate(body) if s is stmt)
    if any(_reads(s, name) for s in body[:at]):
        raise Refuse(f"{where} and `{name}` is read before its DMA is made (line {line}): that may wait or start "
                     "another pass's copy")
    started = waited = False
    for s in body[at + 1:]:
        if _binds(s, name) or _exits(s):
            break  # an exit between start and wait (`if c == last: break`) may skip the wait (red team 14)
        method = _method_call(s, name)
        if method == "start" and not started:
            started = True
        elif method == "wait" and started:
            waited = True
            break
        elif started and (copies := _appended(s, name)) is not None and _waited_later(ctx, kernel, copies, stmt):
            waited = True
            break
        elif _reads(s, name):
            break
    if started and waited:
        _check_not_restarted(ctx, kernel, s, name, line, where)
    if not (started and waited):
        raise Refuse(f"{where} and its DMA `{name}` (line {line}) is not started and then waited in the same step "
                     f"(`{name}.start()` then `{name}.wait()` in the same block, or `copies.append({name})` to a list bound once, "
                     "`copies = []`, and a later `for c in copies: c.wait()` in the kernel's body): the pipeline writes the block back when the "
                     "step ends, and a copy still running would be lost")


def _proved_waited(ctx, kernel: cst.FunctionDef, call: cst.Call) -> bool:
    """Does another DMA pass the output's own proof (named, started and waited in its block)?"""
    try:
        _check_waited(ctx, kernel, call, "")
    except Refuse:
        return False
    return True


def _check_not_restarted(ctx, kernel: cst.FunctionDef, done, name: str, line: int, where: str) -> None:
    """After `done` (its wait, or its append to the waited list) the descriptor `name` is not read
    again until rebound, nor the last one the wait loop names (`for cp in copies: cp.wait()`, then
    `cp.start()`): `c.start()` once more after `c.wait()` would leave a copy running when the
    pipeline writes the block back (red team 14: proposed as safe, the verifier's examples caught it)."""
    copies = _appended(done, name)
    names, node = {name}, done
    while node is not kernel and names:
        block = ctx.parent(node)
        body = list(block.body) if isinstance(block, (cst.IndentedBlock, cst.Module)) else []
        for s in body[body.index(node) + 1:] if node in body else []:
            if copies is not None and _waits_all(s, copies):
                names.add(s.target.value)  # the loop's name holds the descriptors after it too
                continue
            names -= {n for n in names if _rebinds(s, n)}
            used = next((n for n in names if _reads(s, n) and not _fresh_in_loop(s, n)), None)
            if used is not None:
                raise Refuse(f"{where} and its DMA `{name}` (line {line}) is used again after it is waited (line "
                             f"{ctx.span(s).line}): pallas-fix proves a copy lands before the pipeline writes the block back "
                             "only for one `start()` then one `wait()` of a descriptor; build a new one for another copy")
        node = ctx.parent(block)


def _exits(stmt) -> bool:
    """A `return`, `break`, `continue` or `raise` in `stmt`: the statements after it may not run."""
    return any(isinstance(n, (cst.Return, cst.Break, cst.Continue, cst.Raise)) for n in walk(stmt))


def _rebinds(stmt, name: str) -> bool:
    """`name = ...` not reading it, or `for name in ...` not iterating it: later reads are another value."""
    if isinstance(stmt, cst.For):
        return isinstance(stmt.target, cst.Name) and stmt.target.value == name and not _reads(stmt.iter, name)
    if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assign)):
        return False
    assign = stmt.body[0]
    return any(_reads(t.target, name) for t in assign.targets) and not _reads(assign.value, name)


def _fresh_in_loop(stmt, name: str) -> bool:
    """`for c in range(n): name = make_async_copy(...); name.start(); ...`: every pass binds `name`
    before it reads it, so the loop reads a new descriptor, not the waited one (the name may still
    hold it after a loop of no passes, so the statements after stay checked)."""
    if not isinstance(stmt, cst.For) or _reads(stmt.iter, name) or stmt.orelse is not None:
        return False
    body = list(stmt.body.body) if isinstance(stmt.body, cst.IndentedBlock) else []
    first = next((b for b in body if _reads(b, name)), None)
    return first is not None and _rebinds(first, name)


def _bound_name(stmt, call: cst.Call) -> Optional[str]:
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return None
    small = stmt.body[0]
    if isinstance(small, cst.Assign) and small.value is call and len(small.targets) == 1:
        target = small.targets[0].target
        return target.value if isinstance(target, cst.Name) else None
    return None


def _reads(node: cst.CSTNode, name: str) -> bool:
    return any(isinstance(n, cst.Name) and n.value == name for n in walk(node))


def _binds(stmt, name: str) -> bool:
    if not isinstance(stmt, cst.SimpleStatementLine):
        return _reads(stmt, name)  # a compound statement reading the name: stop looking
    return any(isinstance(s, cst.Assign) and any(_reads(t.target, name) for t in s.targets) for s in stmt.body)


def _method_call(stmt, name: str) -> Optional[str]:
    """`name.start()` / `name.wait()` as a statement of its own."""
    if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Expr)):
        return None
    call = stmt.body[0].value
    if (isinstance(call, cst.Call) and not call.args and isinstance(call.func, cst.Attribute)
            and isinstance(call.func.value, cst.Name) and call.func.value.value == name):
        return call.func.attr.value
    return None


def _appended(stmt, name: str) -> Optional[str]:
    """`copies.append(name)` as a statement: the list's name."""
    if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Expr)):
        return None
    call = stmt.body[0].value
    if (isinstance(call, cst.Call) and len(call.args) == 1 and isinstance(call.args[0].value, cst.Name)
            and call.args[0].value.value == name and isinstance(call.func, cst.Attribute)
            and call.func.attr.value == "append" and isinstance(call.func.value, cst.Name)):
        return call.func.value.value
    return None


def _waited_later(ctx, kernel: cst.FunctionDef, copies: str, stmt) -> bool:
    """`copies = []` at the kernel's top level, read only by `.append(...)` and a later
    kernel-level `for x in copies: x.wait()` after the top-level statement holding `stmt`."""
    body = list(kernel.body.body)
    holder = next((k for k, s in enumerate(body) if s is stmt or any(a is s for a in ctx.ancestors(stmt))), None)
    if holder is None:
        return False
    made = [k for k, s in enumerate(body[:holder]) if _is_empty_list(s, copies)]
    loops = [k for k, s in enumerate(body[holder + 1:], holder + 1) if _waits_all(s, copies)]
    if len(made) != 1 or not loops:
        return False
    if any(isinstance(n, (cst.Return, cst.Raise)) for s in body[holder:loops[0]] for n in walk(s)):
        return False  # a `return` before the wait loop (`if c == 1: return` after an append) skips it
    binding = body[made[0]]
    for node in walk(kernel.body):
        if isinstance(node, cst.Name) and node.value == copies:
            parent = ctx.parent(node)
            is_append = isinstance(parent, cst.Attribute) and parent.attr.value == "append"
            is_iter = isinstance(parent, cst.For) and parent.iter is node
            # the one `copies = []`: a second binding (`copies = []` again before the waits) leaves
            # the appended copies unwaited while the loop waits a fresh list (red team 14)
            is_made = _in_target(ctx, node) and any(a is binding for a in ctx.ancestors(node))
            if not (is_append or is_iter or is_made):
                return False
    return True


def _is_empty_list(stmt, name: str) -> bool:
    if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assign)):
        return False
    assign = stmt.body[0]
    target = assign.targets[0].target if len(assign.targets) == 1 else None
    return (isinstance(target, cst.Name) and target.value == name and isinstance(assign.value, cst.List)
            and not assign.value.elements)


def _waits_all(stmt, copies: str) -> bool:
    """`for x in copies: x.wait()`, nothing else in the body."""
    if not (isinstance(stmt, cst.For) and isinstance(stmt.iter, cst.Name) and stmt.iter.value == copies
            and isinstance(stmt.target, cst.Name) and stmt.orelse is None):
        return False
    body = list(stmt.body.body) if isinstance(stmt.body, cst.IndentedBlock) else []
    return len(body) == 1 and _method_call(body[0], stmt.target.value) == "wait"


def _in_target(ctx, node: cst.Name) -> bool:
    return any(isinstance(a, cst.AssignTarget) for a in ctx.ancestors(node))
