"""Everything that runs in the verification subprocess and imports jax
(`python -m pallas_fix.verify.worker.main`): loading the user's modules, forcing each interpreter,
running example calls and candidates, surveying traced pallas_calls (blocks, backends, races),
ragged variants, index ranges, and the operands' shapes the examples trace (facts from the examples);
`zygote.py`, the server that imports all that once and forks a worker per job.

May import core, rules, verify.examples, verify.judge and verify.device."""
