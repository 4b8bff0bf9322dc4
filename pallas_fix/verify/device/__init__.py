"""Running original and rewrite compiled on the TPU the verification worker sees (issue 27):
interpret mode accepts blocks and windows Mosaic rejects and says nothing of speed, so where
JAX's default backend is a TPU each verdict also compiles both there, compares, and times them
(`chip`), timed as calls inside one jitted loop (`timing`, also what benchmarks/bench_tpu.py uses).

May import core and verify.judge; never verify.worker (which calls it, handing it the example's
bound functions and the compiled mode)."""
