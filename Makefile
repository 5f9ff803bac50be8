# The two commands of the README: `make demo` (install, then check the sample project) and
# `make test` (install, then lint and run the whole test suite). Everything goes into .venv.
VENV ?= .venv
PY := $(VENV)/bin/python
# torch is pinned here (and only here): a CPU wheel of 2.13.0 lies on these machines' disk,
# while the package itself asks for torch>=2.1.
TORCH ?= torch==2.13.0

.PHONY: install demo test lint bench

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TORCH)" -e ".[dev]"
	touch $@

demo: install
	@for script in sample_project/*.py; do \
		echo "== tensor-dap check $$script"; \
		$(VENV)/bin/tensor-dap check --rules all $$script > /dev/null || true; \
	done

lint: install
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

test: lint
	$(PY) -m pytest -q

bench: install
	$(PY) -m pip install --quiet "$(TORCH)" -e ".[bench]"
	$(PY) benchmarks/overhead.py
