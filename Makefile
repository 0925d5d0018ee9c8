# The two contracts: `make demo` and `make test` work on a fresh clone.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-all test-fast harness bench mutants setup browser clean corpus confirm-gpt

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[torch,jax,test,corpus,ray]'
	$(BIN)/pip install -q --no-deps megatron-core==0.16.1 torchtitan==0.3.0 triton==3.9.0 spmd_types==0.2.3
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/shardproof verify src/shardproof/zoo/tp_mlp.py
	$(BIN)/shardproof verify src/shardproof/zoo/llama_block.py --world-size 4
	-$(BIN)/shardproof verify src/shardproof/zoo/bugs/missing_allreduce.py --json out.json; \
	  echo "(exit code $$? = violation, as expected; JSON in out.json)"

# Debian chromium for the HTML report's browser test (tests/test_html_report.py); a no-op when
# installed; the test skips with a message where it cannot be installed (not root, no apt).
browser:
	@test -x /usr/bin/chromium || { command -v apt-get >/dev/null && \
	  { DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null 2>&1 || \
	    { apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null 2>&1; }; }; } || \
	  echo "chromium could not be installed: the headless browser test will skip"

# everything but the sweeps (each repeats a fast representative test over every zoo case); < 20 min on 2 cores
# (one pytest worker per core, at most 4: PYTEST_WORKERS=0 runs in one process; worksteal: an idle worker
# takes half of the other's queue, so no long test waits at the end of a busy worker's queue)
PYTEST_WORKERS ?= auto
XDIST = $(if $(filter 0,$(PYTEST_WORKERS)),,-n $(PYTEST_WORKERS) --maxprocesses=4 --dist worksteal)
test: $(STAMP) browser
	$(BIN)/python -m pytest -q $(XDIST) --durations=15 -m 'not sweep'

# everything, the sweeps too (about 40 min on 2 cores)
test-all: $(STAMP) browser
	$(BIN)/python -m pytest -q $(XDIST) --durations=15

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m 'not slow'

# the property harness (every op's numerics and rule against torch's kernels), deeper than in `make test`
harness: $(STAMP)
	SHARDPROOF_HARNESS_EXAMPLES=100 $(BIN)/python -m pytest -q tests/harness

# the real-client corpus as readable FX dump pairs (build/corpus/, gitignored; CPU only; libraries of the `corpus` extra)
corpus: $(STAMP)
	$(BIN)/python examples/huggingface/make_corpus.py build/corpus/hf
	$(BIN)/python examples/corpus/dump_libraries.py build/corpus/libraries

# the Megatron GPT dump pair (dropout p = 0.1) proved and confirmed by execution with corresponding
# dropout draws, its attention scores and logits computed a chunk at a time (frontends/torch_chunks.py):
# peak RSS 5.6 GiB, 233 s CPU (whole, before: 16.2 GiB, 142 s); the sweep test does the same
# (tests/test_gpt_confirm.py, `make test-all`)
GPT := ../shared/graphs/entangle/gpt
confirm-gpt: $(STAMP)
	$(BIN)/python -m shardproof.cli verify --seq $(GPT)/paral1_layer1 --dist $(GPT)/paral2_layer1 \
		--relations examples/dumps/megatron_gpt_constants.yaml --auto-relations --max-memory 7G

# tables, never gating: the zoo, the scaling sweep of issue 16, capture at Llama-3-8B shapes (bench/README.md)
bench: $(STAMP)
	$(BIN)/python bench/zoo.py
	$(BIN)/python bench/scale.py
	$(BIN)/python bench/scale.py --blocks
	$(BIN)/python bench/llama_fake.py
	$(BIN)/python bench/llama405b.py
	$(BIN)/python bench/pipeline.py
	$(BIN)/python bench/executors.py --repeat 1

# mutation testing over the correct zoo cases: exit 1 if a mutant survives (unsound rules)
mutants: $(STAMP)
	$(BIN)/shardproof mutants $(shell grep -lE '^def case.world_size' src/shardproof/zoo/*.py) src/shardproof/zoo/train/tp_mlp_train.py --json mutants.json

clean:
	rm -rf $(VENV) out.json mutants.json
