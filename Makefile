# pallas-fix developer entry points. `make demo` and `make test` work from a fresh clone: both
# create .venv on first use.
#
#   make demo       findings and the proposed diff for examples/tiled_kernels.py
#   make test       the whole test suite (what CI runs through .ci/run)
#   make test-fast  without interpreter runs, slow tests and the Neovim test, on two workers
#   make bench      the benchmarks in benchmarks/
#
# PYTHON=/path/to/python3.12 picks the interpreter the venv is built from.

SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c
.DEFAULT_GOAL := help

VENV := .venv
VPY := $(VENV)/bin/python
# Rebuilt only when the dependencies change: pip's resolver takes seconds even when there is
# nothing to do.
STAMP := $(VENV)/.pallas-fix-installed
EXAMPLE := examples/tiled_kernels.py
PYTEST_ARGS ?=

# The newest jax needs Python >= 3.12. PATH entries can be pyenv shims that exist but refuse to
# run (`pyenv: python3.12: command not found`), so every candidate is run, not just looked up.
# Under pyenv, 3.12 comes before 3.13: it is what the project's own measurements were taken on.
define FIND_PYTHON
ok() { "$$1" -c 'import sys, venv; sys.exit(sys.version_info < (3, 12))' >/dev/null 2>&1; }; \
for c in python3.13 python3.12 python3; do \
  p=$$(command -v $$c 2>/dev/null) && ok "$$p" && { echo "$$p"; exit 0; }; \
done; \
if command -v pyenv >/dev/null 2>&1; then \
  root=$$(pyenv root 2>/dev/null); \
  for p in $$(ls -d "$$root"/versions/3.1[2-9]* 2>/dev/null | sort -V); do \
    ok "$$p/bin/python3" && { echo "$$p/bin/python3"; exit 0; }; \
  done; \
  for v in $$(pyenv versions --bare 2>/dev/null | grep -E '^3\.1[2-9]' | sort -V); do \
    p=$$(PYENV_VERSION=$$v pyenv which python3 2>/dev/null) && ok "$$p" && { echo "$$p"; exit 0; }; \
  done; \
fi; \
echo python3
endef

.PHONY: help demo test test-fast bench venv neovim clean

help:
	@sed -n '1,/^$$/p' Makefile | sed 's/^# \{0,1\}//'

venv: $(STAMP)

$(VPY):
	@py="$${PYTHON:-$$( $(FIND_PYTHON) )}"; \
	ver=$$("$$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null) \
	  || { echo "error: no usable Python interpreter ($$py); set PYTHON=/path/to/python3" >&2; exit 1; }; \
	case "$$ver" in 3.1[2-9]) ;; \
	  3.11) echo "note: using Python $$ver from $$py; the newest jax needs >= 3.12, so jax 0.10.2 will be installed" >&2 ;; \
	  *) echo "error: Python $$ver at $$py is too old; pallas-fix needs >= 3.11" >&2; exit 1 ;; \
	esac; \
	echo "creating $(VENV) with Python $$ver ($$py)"; \
	"$$py" -m venv $(VENV)

$(STAMP): pyproject.toml | $(VPY)
	$(VPY) -m pip install --quiet --upgrade pip
	$(VPY) -m pip install --quiet -e '.[dev]'
	@touch $@

# pallas-fix exits 1 when it reports findings; here findings are the point of the demo, so only
# exit codes other than 0 and 1 (usage or input errors) fail it.
demo: $(STAMP)
	@$(VENV)/bin/pallas-fix $(EXAMPLE); rc=$$?; \
	if [ $$rc -gt 1 ]; then echo "error: pallas-fix exited $$rc" >&2; exit $$rc; fi; \
	echo; echo "(pallas-fix exits 1 when findings remain: that is expected here; see README.md)"

# pytest exits 5 when it collected no test; that always means a broken selection or a broken
# checkout here, never success.
define RUN_PYTEST
$(VPY) -m pytest $(1) $(PYTEST_ARGS); rc=$$?; \
if [ $$rc -eq 5 ]; then echo "error: pytest collected no tests (exit 5); the suite is not meant to be empty" >&2; exit 1; fi; \
exit $$rc
endef

# Two workers here too: the whole suite took 12m20s on two workers against 21m39s in one process
# (2026-12-01, the 2-core development machine, both with other sessions running).
test: $(STAMP) neovim
	@$(call RUN_PYTEST,-n 2)

# Two workers (pytest-xdist): the fast lane is many small tests, most of them waiting on a parse
# or a subprocess; measured 2m13s against 3m44s in one process on an idle 2-core machine.
test-fast: $(STAMP)
	@$(call RUN_PYTEST,-n 2 -m "not interp and not nvim and not slow")

# The editor end-to-end test drives a real headless Neovim. Installing it is best effort: when it
# cannot be installed, that test skips and says why, and nothing else depends on it.
neovim:
	@if command -v nvim >/dev/null 2>&1; then exit 0; fi; \
	if ! command -v apt-get >/dev/null 2>&1; then echo "note: nvim not found and no apt-get; the Neovim test will skip" >&2; exit 0; fi; \
	if [ "$$(id -u)" -eq 0 ]; then sudo=; elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then sudo="sudo -n"; \
	else echo "note: nvim not found and apt-get needs root; the Neovim test will skip" >&2; exit 0; fi; \
	echo "installing neovim with apt-get (for the editor end-to-end test)"; \
	export DEBIAN_FRONTEND=noninteractive; \
	( timeout 300 $$sudo apt-get update -qq && timeout 600 $$sudo apt-get install -y -qq --no-install-recommends neovim ) >/dev/null 2>&1 \
	  || echo "note: could not install neovim; the Neovim test will skip" >&2

bench: $(STAMP)
	$(VPY) benchmarks/bench_check.py
	@for b in benchmarks/bench_*.py; do [ "$$b" = benchmarks/bench_check.py ] && continue; \
	  echo; echo "== $$b"; $(VPY) "$$b" || exit $$?; done

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build *.egg-info
