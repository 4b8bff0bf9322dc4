"""The codemods' shared machinery, in rooms by concern. Below `common.py` (what every recipe
shares: refusals, anchoring findings to plans) the rooms are, roughly in import order:
`text/` (syntax, edits, statements, scopes, imports, line width), `callsite/` (read and edit what a
pallas_call says), `blocks/` (block plans and the BlockSpecs, grid and kernel edits they become),
`guards/` (checks a lift writes into the wrapper), `proofs/` (bounds and ragged blocks), `extents/` (full-extent and squeezed shape reads of a lifted
ref), `inblock/` (windows and DMAs re-based onto a program's block), `kernel/` (how the kernel touches its refs, block-relative accesses, views, dead stores and
parameters), `loops/` (R1's loop regions and
checks), `reduction/` (R2's carries and scratch), `prefetch/` (R6).

May import core, analysis and rules; never codemods, engine, verify, output or frontends."""
