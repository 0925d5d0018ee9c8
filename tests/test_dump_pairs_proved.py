"""Issue 15's two real dump pairs, in make test (their execution confirmations are sweep
tests, minutes long: tests/test_gpt_confirm.py, tests/test_aws_llama.py):
- the Megatron GPT pair with --auto-relations alone stops only where the dump does not print
  its constants, and the unknown names them as the next step (the constants: file that
  supplies them proves it: tests/test_dump_autopair.py);
- the transformers-neuronx Llama at TP 6 (heads and ffn zero-padded, KV heads repeated) is
  proved against TP 1 with examples/dumps/aws_llama_tp6.yaml."""
import os

import pytest

from conftest import assert_proved_not_confirmed
from shardproof.api import NO_CONFIRM, verify_dumps

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.environ.get("SHARDPROOF_SHARED", os.path.join(ROOT, "..", "shared"))
GPT = os.path.join(SHARED, "graphs", "entangle", "gpt")
AWS = os.path.join(SHARED, "graphs", "entangle", "aws_llama")
UNPRINTED = ["_tensor_constant0", "_tensor_constant1", "_tensor_constant2", "_tensor_constant3"]


@pytest.mark.skipif(not os.path.isdir(GPT), reason=f"shared graphs absent: {os.path.normpath(GPT)}")
def test_gpt_auto_relations_alone_stops_only_at_the_unprinted_constants():
    report = verify_dumps(os.path.join(GPT, "paral1_layer1"), os.path.join(GPT, "paral2_layer1"),
                          auto_relations=True, confirm_draws=NO_CONFIRM)
    assert report.status == "unknown", (report.status, report.reason)
    step = report.reason[report.reason.index("next step:"):]
    assert step.startswith("next step: the values of the constants the dump does not print ("
                           + ", ".join(UNPRINTED) + ": constants: in the relations file)"), step
    assert report.relations["primals_4"]["relation"] == "Shard(0)"  # the inputs were inferred all the same
    assert report.pairing[0]["single_device"] == "div_2"  # the loss paired first


@pytest.mark.skipif(not os.path.isdir(AWS), reason=f"shared graphs absent: {os.path.normpath(AWS)}")
def test_aws_llama_tp6_is_proved_through_padding_and_repeated_kv_heads():
    report = verify_dumps(os.path.join(AWS, "tp1_layer1"), os.path.join(AWS, "tp6_layer1"),
                          os.path.join(ROOT, "examples", "dumps", "aws_llama_tp6.yaml"), confirm_draws=NO_CONFIRM)
    assert_proved_not_confirmed(report, "--no-confirm")  # confirmed: test_aws_llama (sweep, 5-7 min)
    kv = "Padded(Shard(2), 2, [[8, 36, 4]])"
    assert {o.name: o.holds for o in report.outputs} == {"out0": "Shard(0)", "out1": kv, "out2": kv}
