"""R2, a reduction loop on a sequential grid axis: its carry (leaves, tree, counters, names,
shapes), moving the carry between scratch refs and names, the kernel side (init, step,
finalize), grid queries moved into pl.when bodies, the hygiene of moved code, and on TPU the
lane-dense layout of an online softmax's (rows, 1) statistics (lanes, lane_values), and where
the call is already pipelined on TPU, several windows per step walked with static starts (strip);
which loops R2 takes (takes).

May import core, analysis and the rewrite rooms text, callsite, blocks, kernel, loops."""
