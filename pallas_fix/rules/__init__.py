"""The rules, grouped by family as ruff groups them: `dynamic_index/` (PF1xx), `gpu_interpret/`
(PF2xx) and `on_chip/` (PF301), one rule per file. The root holds what a rule is (`rule.py`), the
rule table in precedence order (`registry.py`) and the reference written from the rules
(`reference.py`).

May import core and analysis."""
