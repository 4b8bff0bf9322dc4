"""The PF3xx family: on-chip limits (PF301, the footprint per grid step, found at verification).

May import core and rules.rule."""
