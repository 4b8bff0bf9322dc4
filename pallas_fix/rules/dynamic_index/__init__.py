"""The PF1xx family: one rule per dynamic-index kind (PF101 to PF109), each file holding its
documentation, check and VALID / INVALID examples.

May import core, analysis and rules.rule."""
