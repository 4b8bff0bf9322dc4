"""The PF3xx family: what compiles on the chip. PF301, the footprint per grid step against the
backend's limit (found at verification); PF302, a window in a TPU kernel Mosaic cannot prove
aligned (found by the static check).

May import core, analysis and rules.rule."""
