"""matmul/bmm pair a batch (head) dim along which the operands hold different positions when the
positions follow a rule (grouped-query k heads repeated to the query heads): the HF eager
attention's ``matmul(q, repeat_kv(k).transpose(2, 3))`` with heads sharded and a rank's k heads
repeated within the rank. A rank that repeats the wrong k head must not verify. Labels: each
rank's output against the single device's head block, computed by torch (no communication)."""
import pytest
import torch

from shardproof import Case, api

B, HQ, HKV, S, D, WORLD = 2, 4, 2, 5, 3, 2


def repeat_kv(x, n):
    b, h, s, d = x.shape
    return x[:, :, None].expand(b, h, n, s, d).reshape(b, h * n, s, d)


def single(q, k):
    return torch.matmul(q, repeat_kv(k, HQ // HKV).transpose(2, 3))


def rank_program(shift: int):
    """Rank r's scores for its query heads, with the k head ``(r + shift) % HKV`` (0: right)."""
    def make(rank, world):
        def run(q, k):
            kv = (rank + shift) % HKV
            return torch.matmul(q, repeat_kv(k[:, kv:kv + 1], HQ // world).transpose(2, 3))
        return run
    return make


def case(shift: int) -> Case:
    torch.manual_seed(0)
    inputs = {"q": torch.randn(B, HQ, S, D), "k": torch.randn(B, HKV, S, D)}
    return Case(single=single, distributed=rank_program(shift), inputs=inputs, world_size=WORLD,
                dist_inputs=lambda r, w, x: {"q": x["q"].chunk(w, 1)[r], "k": x["k"]},
                expect={"out": "Shard(1)"}, name=f"gqa_scores_shift{shift}")


def agrees_with_torch(c: Case) -> bool:
    whole = single(**c.inputs)
    return all(torch.allclose(c.distributed(r, WORLD)(**c.dist_inputs(r, WORLD, c.inputs)), whole.chunk(WORLD, 1)[r])
               for r in range(WORLD))


@pytest.mark.parametrize("shift", [0, 1])
def test_grouped_heads_pairing(shift):
    c = case(shift)
    label = agrees_with_torch(c)
    assert label == (shift == 0)  # the fact about PyTorch the verdict must match
    report = api.verify_case(c)
    assert report.status == ("verified" if label else "violation"), (report.status, report.findings[:1])
    if not label:  # found at the product that pairs the wrong k head, on the rank's matmul line
        f = report.findings[0]
        line = next(i for i, text in enumerate(open(__file__), 1) if "return torch.matmul(q, repeat_kv(k[:, kv" in text)
        assert f.op == "aten.bmm" and f"test_matmul_pairing.py:{line} in run" in f.source, f
