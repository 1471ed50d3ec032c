# tfx: every target that needs Python depends on `setup`, so each works on a fresh machine.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup lab book notebooks test unit bench lock clean

setup: $(STAMP)

# torch first and pinned: a plain `torch` would pull a multi-GB CUDA build where no CPU wheel is at hand.
$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt torch==2.13.0
	$(PY) -m pip install -q -c constraints.txt -e '.[dev]'
	$(PY) -m ipykernel install --sys-prefix --name tfx --display-name "Python (tfx)"
	touch $(STAMP)

lab: setup
	$(VENV)/bin/jupyter lab notebooks/

test: setup
	$(PY) -m pytest tests

bench: setup
	$(PY) bench/run.py

lock: setup
	{ echo "# Tested versions of everything make setup installs (pip freeze of a working .venv, Python 3.11)."; \
	  echo "# Regenerate with: make lock"; \
	  $(PY) -m pip freeze --exclude-editable | grep -v '^tfx' | sed 's/+cpu$$//'; } > constraints.txt.new
	mv constraints.txt.new constraints.txt

clean:
	rm -rf $(VENV) book/_build .pytest_cache
