# Every routine command of the project. `make demo` and `make test` work on a fresh machine.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check -q

.PHONY: demo test test-fast test-kernel-sets docs lint typecheck pytest bench cref bench-slurm clean

$(VENV)/.base: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip
	$(PIP) install -e .
	touch $@

# The sample plugin (samples/asian, its own distribution) is installed as a user would
# install it: its tests and aner's plugin tests use it (docs/contracts.md, section 15).
SAMPLE_PLUGIN := samples/asian
$(VENV)/.test: $(VENV)/.base $(SAMPLE_PLUGIN)/pyproject.toml $(wildcard $(SAMPLE_PLUGIN)/aner_asian/*.py)
	$(PIP) install -e '.[test]'
	$(PIP) install ./$(SAMPLE_PLUGIN)
	touch $@

demo: $(VENV)/.base
	$(PY) samples/local_pi.py

test: $(VENV)/.test
	bash .ci/ensure-sshd
	bash .ci/ensure-slurm
	$(MAKE) --no-print-directory lint typecheck docs pytest test-kernel-sets

lint: $(VENV)/.test
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: $(VENV)/.test
	$(VENV)/bin/mypy protocol aner_coord aner_worker

# Two test processes (pytest-xdist): most tests wait on worker processes, signals and files
# rather than compute, so two use a 2-core machine better than one (three were slower:
# tests/README.md); the tests that need the real Slurm, and those of a module that share a
# module-scoped fixture, run in one of them each (tests/conftest.py). PYTEST_WORKERS=0 runs
# the suite in this process alone.
PYTEST_WORKERS ?= 2
PYTEST_XDIST = $(if $(filter 0,$(PYTEST_WORKERS)),,-n $(PYTEST_WORKERS) --dist loadgroup)

# The slowest tests are listed at the end: where the ten minutes go, in every CI log.
pytest: $(VENV)/.test
	$(PY) -m pytest -q $(PYTEST_XDIST) --durations=25

# The documentation site, warnings as errors (mkdocs.yml; tests/integration/test_docs.py runs
# every block of its pages).
docs: $(VENV)/.test
	$(VENV)/bin/mkdocs build --strict --quiet

# The numerical tests again under every other BLAS kernel set this machine's OpenBLAS runs
# (OPENBLAS_CORETYPE unset, Haswell, SkylakeX, Sandybridge, Nehalem, deduplicated by what each
# gives): users' machines differ, and each set rounds matrix products differently in the last
# bits (tests/kernel_sets.py). Each run is a child process with its own environment.
test-kernel-sets: $(VENV)/.test
	$(PY) tests/kernel_sets.py

# The edit loop: the pure layers (unit, protocol) and the transport contract without SSH,
# in a minute or two; `make test` still runs everything.
test-fast: $(VENV)/.test
	$(PY) -m pytest -q $(PYTEST_XDIST) -m "not slow and not ssh and not slurm" \
		tests/unit tests/protocol tests/contract

# The figures go to bench-results.json, and from it to the performance page of the docs.
bench: $(VENV)/.base cref
	$(PY) -m bench --json bench-results.json
	$(PY) -m bench.report bench-results.json docs/performance.md

# The native C reference of the Monte Carlo stream (bench/c/pi_ref.c), built with the system
# compiler; without one, the benchmarks that compare with it say so and skip it. No fused
# multiply-add: the hit test must round exactly as docs/contracts.md, section 1 says.
CC     ?= cc
CREF   ?= bench/c/pi_ref
CFLAGS_CREF := -O3 -march=native -pthread -ffp-contract=off -std=gnu11 -Wall -Wextra

cref:
	@if command -v $(CC) >/dev/null 2>&1; then \
		$(MAKE) --no-print-directory $(CREF); \
	else \
		echo "make: no C compiler ($(CC)): the C reference ($(CREF)) is not built; the benchmarks skip it"; \
	fi

$(CREF): bench/c/pi_ref.c
	$(CC) $(CFLAGS_CREF) -o $@ $<

# Slurm job steps against local pipes, on a single-node Slurm it starts itself (needs root).
bench-slurm: $(VENV)/.base
	bash .ci/ensure-slurm
	$(PY) bench/slurm_bench.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache .hypothesis $(CREF)
