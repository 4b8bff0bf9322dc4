"""The PF2xx family: what GPU interpret mode gets silently wrong or rejects (PF201 to PF206), the
hazards table per jax version, and the kernel-level checks that produce these findings.

May import core, analysis and rules.rule."""
