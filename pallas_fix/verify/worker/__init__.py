"""Everything that runs in the verification subprocess and imports jax
(`python -m pallas_fix.verify.worker.main`): loading the user's modules, forcing each interpreter,
running example calls and candidates, surveying traced pallas_calls (blocks, backends, races),
ragged variants and index ranges.

May import core, rules, verify.examples and verify.judge."""
