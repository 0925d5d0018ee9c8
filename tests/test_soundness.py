"""Soundness: the proof rules never verify a wrong program. Each zoo model's captured
distributed graphs are mutated (:mod:`shardproof.engine.mutants`: collectives dropped,
duplicated, reordered, regrouped or reducing with another op; slices shifted, constants
changed, tensors scaled, inputs or ranks swapped); a mutant may be verified only if it is
genuinely equivalent, which the numeric evaluator must confirm on random inputs."""
import importlib
from collections import Counter

import pytest

pytest.importorskip("torch", reason="live capture needs the torch extra")

from shardproof.api import mutation_test  # noqa: E402
from shardproof.engine.mutants import OPERATORS  # noqa: E402

MODELS = ["tp_mlp", "tp_attention", "gpt2_block", "llama_block", "sp_mlp", "vocab_parallel_embedding",
          "vocab_parallel_cross_entropy", "dtensor_mlp", "gqa_attention", "dtensor_attention", "dtensor_gpt2_block",
          "dtensor_llama_block", "dtensor_sp_mlp", "dtensor_vocab_parallel_cross_entropy",
          "dtensor_vocab_parallel_embedding"]


@pytest.fixture(scope="module")
def outcomes():
    return {m: mutation_test(importlib.import_module(m).case(2), 2) for m in MODELS}


@pytest.mark.parametrize("model", MODELS)
def test_mutants_never_verify_wrongly(outcomes, model):
    survivors = [o.mutant.what for o in outcomes[model] if o.outcome == "survived"]
    assert not survivors, f"{model}: verified but numerically different (UNSOUND): {survivors}"
    assert any(o.outcome == "killed" for o in outcomes[model]), f"{model}: no mutant was caught"


def test_the_zoo_gives_hundreds_of_mutants_of_every_kind(outcomes):
    counts = Counter(o.outcome for outs in outcomes.values() for o in outs)
    assert sum(counts.values()) >= 200 and counts["killed"] >= 0.85 * sum(counts.values()), counts
    used = {o.mutant.operator for outs in outcomes.values() for o in outs}
    assert used == set(OPERATORS), set(OPERATORS) - used


def test_a_dropped_all_reduce_is_killed_where_the_partial_sum_is_used(outcomes):
    drop = next(o for o in outcomes["tp_mlp"] if o.mutant.operator == "drop-collective")
    assert drop.outcome == "killed" and drop.finding.startswith("partial-sum-never-reduced at add")

