"""Everything that runs in the verification subprocess and imports jax
(`python -m pallas_fix.verify.worker.main`): loading the user's modules, forcing each interpreter,
running example calls and candidates, surveying traced pallas_calls (blocks, backends, races),
ragged variants, index ranges, and the operands' shapes the examples trace (facts from the examples).
The server that imports all this once and forks a worker per job is verify/zygote_server.py.

May import core, rules, verify.examples, verify.judge and verify.device."""
