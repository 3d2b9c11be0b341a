# Every routine command of the project. `make demo` and `make test` work on a fresh machine.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check -q

.PHONY: demo test lint typecheck pytest bench bench-slurm clean

$(VENV)/.base: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip
	$(PIP) install -e .
	touch $@

$(VENV)/.test: $(VENV)/.base
	$(PIP) install -e '.[test]'
	touch $@

demo: $(VENV)/.base
	$(PY) samples/local_pi.py

test: $(VENV)/.test
	bash .ci/ensure-sshd
	bash .ci/ensure-slurm
	$(MAKE) --no-print-directory lint typecheck pytest

lint: $(VENV)/.test
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: $(VENV)/.test
	$(VENV)/bin/mypy protocol aner_coord aner_worker

pytest: $(VENV)/.test
	$(PY) -m pytest -q

bench: $(VENV)/.base
	$(PY) -m bench --json bench-results.json

# Slurm job steps against local pipes, on a single-node Slurm it starts itself (needs root).
bench-slurm: $(VENV)/.base
	bash .ci/ensure-slurm
	$(PY) bench/slurm_bench.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache .hypothesis
