"""Accesses re-based onto the block a program owns (issue 28): windows at an offset inside a
program's block (`pl.ds(i * bm + c * 8, 8)` -> a block of `bm` at `i` and `pl.ds(c * 8, 8)` inside
it: `offset_windows`, with `for_ranges` for the static loop a read sits in and `window_messages`
for what a refusal advises), and outputs left in HBM that DMAs write into the program's block
(`dma_outputs`: a VMEM block, each DMA re-based onto it; `dma_semaphores`: the other copies on
its semaphore land in their own step).

May import core, analysis and the rewrite rooms text, callsite and proofs."""
