# The two commands of the README: `make demo` (install, then check the sample project) and
# `make test` (install, then lint and run the whole test suite: Python (ruff, mypy, pytest), the
# VS Code extension's (eslint, mocha unit tests), its end-to-end test in code-server). Python goes
# into .venv; Node packages into vscode-extension/node_modules and tests/vscode/node_modules.
VENV ?= .venv
PY := $(VENV)/bin/python
# torch is pinned here (and only here): a CPU wheel of 2.13.0 lies on these machines' disk,
# while the package itself asks for torch>=2.1.
TORCH ?= torch==2.13.0

EXT := vscode-extension

.PHONY: install demo test test-py lint bench ext-test e2e

install: $(VENV)/.installed

# setup.py builds the engine's optional C fast path (tensor_dap/agent/_fastpath.c) in place
$(VENV)/.installed: pyproject.toml setup.py tensor_dap/agent/_fastpath.c
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TORCH)" -e ".[dev]"
	touch $@

# each sample once, its findings once (the end summary: the script's own output and traceback
# are left out); the samples are CUDA code, run on the CPU's simulated CUDA device (--simulate
# cuda); the DDP sample runs under torchrun, as the README shows
DEMO_SUMMARY := sed -n '/^tensor-dap: \(no findings\|[0-9]* finding\)/,$$p'
DEMO_CHECK := $(VENV)/bin/tensor-dap check --simulate cuda --rules all
demo: install
	@for script in sample_project/*.py; do \
		case $$script in *memory_limit*) limit="--memory-limit 8MiB " ;; *) limit="" ;; esac; \
		echo "== tensor-dap check --simulate cuda $$limit$$script"; \
		case $$script in \
		*ddp_*) $(DEMO_CHECK) -- $(PY) -m torch.distributed.run \
			--standalone --nproc_per_node 2 $$script 2>&1 >/dev/null | $(DEMO_SUMMARY) ;; \
		*) $(DEMO_CHECK) $$limit$$script 2>&1 >/dev/null | $(DEMO_SUMMARY) ;; \
		esac; \
	done

# ruff; mypy, strict on tensor_dap/ ([tool.mypy] in pyproject.toml)
lint: install
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

test: test-py ext-test e2e

# tests/editors drives the adapter from Emacs dap-mode: Debian's emacs-nox and elpa-dap-mode,
# installed when missing (apt-get, as root)
test-py: lint
	tests/editors/install-emacs.sh
	$(PY) -m pytest -q

# npm ci only when the lockfile changed (npm's hidden lockfile, touched, is the stamp;
# tests/vscode/run-e2e.sh uses the same rule)
$(EXT)/node_modules/.package-lock.json: $(EXT)/package-lock.json
	cd $(EXT) && npm ci --no-audit --no-fund
	touch $@

# the extension's lint (eslint with typescript-eslint: eslint.config.mjs) and unit tests (mocha)
ext-test: $(EXT)/node_modules/.package-lock.json
	cd $(EXT) && npm run lint
	cd $(EXT) && npm test

# the extension's end-to-end test in code-server + headless Chromium (tests/vscode/run-e2e.sh:
# apt-get installs chromium and libkrb5-dev when missing, npm ci in tests/vscode, builds the .vsix
# when its sources changed); screenshots and logs in tests/vscode/artifacts/
e2e: install
	tests/vscode/run-e2e.sh

bench: install
	$(PY) -m pip install --quiet "$(TORCH)" -e ".[bench]"
	$(PY) benchmarks/overhead.py
