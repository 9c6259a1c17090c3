# The README's quick start is `make demo` and `make test`; each creates and reuses .venv.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# Real data for tests, demo and benchmarks; outside this workspace hopgym downloads it itself.
HOPGYM_DATA ?= $(if $(wildcard ../shared/data),$(abspath ../shared/data),)
export HOPGYM_DATA
# mypy's incremental cache lives outside the clone: it checks each file's hash against the cache, so a fresh
# clone rechecks only what changed (3 s instead of 43 s of CPU beside the tests).
MYPY := $(VENV)/bin/mypy --cache-dir $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/hopgym/mypy

.PHONY: demo local-model system-deps test typecheck bench lint format clean

# openenv-core (the serve extra's old name, before openenv 0.10.0) ships the same `openenv` package: a venv made
# before the move would hold both, one overwriting the other's files, so it goes first.
$(VENV)/.installed: pyproject.toml environments/hopgym_env/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip uninstall -qq --yes openenv-core
	$(PY) -m pip install --quiet -e '.[dev,agents,docker,report,retrieval,tracking,ray,serve,verifiers,train,inspect]'
	$(PY) -m pip install --quiet -e environments/hopgym_env
	touch $@

# The embedded local model: llama-cpp-python (its wheel is built once and cached in ~/.cache/hopgym/wheels)
# and SmolLM2-135M-Instruct. `hopgym demo` (a scripted policy, no model) stays available as a command.
local-model: $(VENV)/.installed
	.ci/build-llama-wheel.sh $(PY)

# Three ToolHop episodes on the embedded model, one at a time. The fc agent asks for a tool call until the
# first tool result (tool_choice=required, whatever the env's protocol sends) and the server's grammar
# keeps each call to an offered tool with schema-valid arguments, so every episode's calls run in the
# sandbox and are scored. The three tasks (5, 7 and 3 hops) are ones where the 135M model's calls return
# a value; on toolhop-001, say, it sends a date the tool rejects (`--limit 15` shows the mix). Chosen with
# the F16 weights the server loads (agents/model/local_weights.py). Fails when every episode errored.
DEMO_TASKS := --task toolhop-002 --task toolhop-003 --task toolhop-005
demo: local-model
	rm -rf runs/demo
	$(VENV)/bin/hopgym eval --model local --agent fc --agent-arg tool_choice=required $(DEMO_TASKS) \
		--env-arg max_turns=2 --max-tokens 128 --out runs/demo
	$(PY) .ci/check_demo.py runs/demo

# The system packages some tests use: bubblewrap (the sandbox's bwrap isolation) and Chromium with its driver
# (the run viewer's browser tests). `make test` does not need them: outside CI their tests skip, naming the
# package. CI (.ci/run) installs them with this target; as root with apt-get it installs what is missing,
# elsewhere it names the packages to install.
SYSTEM_DEPS := bubblewrap:bwrap chromium:chromium chromium-driver:chromedriver
system-deps:
	@missing=""; for dep in $(SYSTEM_DEPS); do command -v $${dep#*:} >/dev/null || missing="$$missing $${dep%%:*}"; done; \
	if [ -z "$$missing" ]; then echo "system packages: all present"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing:$$missing"; apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	else echo "make system-deps: install these Debian packages as root:$$missing" >&2; exit 1; fi

# The tests write bytecode caches even where the shell says not to (PYTHONDONTWRITEBYTECODE): the suite starts
# hundreds of Python processes, and each would compile hopgym's modules again (0.2 s of CPU per CLI start).
# The type check runs beside the tests (the suite's workers often wait on servers and subprocesses, so
# three workers on two cores: 12 min against 14 with two, 2026-11-26); its report follows theirs, and either
# failing fails the target.
test: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	@log=$$(mktemp); $(MYPY) -p hopgym > $$log 2>&1 & typecheck=$$!; \
	trap 'kill $$typecheck 2>/dev/null; rm -f $$log; exit 130' INT TERM; \
	env -u PYTHONDONTWRITEBYTECODE $(PY) -m pytest -q -n 3 --dist loadgroup; tests=$$?; \
	wait $$typecheck; types=$$?; echo "mypy -p hopgym:"; cat $$log; rm -f $$log; \
	exit $$(( tests || types ))

# mypy follows openai's own types (pyproject.toml), as a check of hopgym installed by pip does; the other
# large libraries stay skipped.
typecheck: $(VENV)/.installed
	$(MYPY) -p hopgym

bench: $(VENV)/.installed
	$(PY) benchmarks/run.py

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .

format: $(VENV)/.installed
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

clean:
	rm -rf $(VENV) build *.egg-info
