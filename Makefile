# The two contracts: `make demo` and `make test` work on a fresh clone.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast bench setup clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[torch,jax,test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/shardproof verify examples/tp_mlp.py
	$(BIN)/shardproof verify examples/llama_block.py --world-size 4
	-$(BIN)/shardproof verify examples/bugs/missing_allreduce.py --json out.json; \
	  echo "(exit code $$? = violation, as expected; JSON in out.json)"

test: $(STAMP)
	$(BIN)/python -m pytest -q

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m 'not slow'

bench: $(STAMP)
	$(BIN)/python bench/zoo.py

clean:
	rm -rf $(VENV) out.json
