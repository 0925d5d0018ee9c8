"""The Megatron GPT dump pair (TP 2 + sequence parallelism, dropout p = 0.1): its four dropouts
correspond to single-device draws by pure layouts (sequence-parallel rows, attention heads),
so it can be confirmed with corresponding randomness. Whole, the run needs about 14 GiB by
estimate (f32 held as declared): the single device's attention scores [192, 1536, 1536] and
logits [12288, 98304]. Computed a chunk at a time (frontends/torch_chunks.py: torch's kernels
on each chunk, only the regions' small results held whole) it needs about 1.2 GiB by estimate,
within make test's memory bound; at ~4 min CPU it is a sweep test (``make test-all``, and
``make confirm-gpt``) to keep make test under 20 minutes; it skips when ../shared/graphs is absent or memory is short.

Measured (2026-11-27, the 2-core machine shared by 8 workers, load ~20, torch 2.13 CPU), the
whole of ``verify_dumps`` (proof, inputs, both programs, the judge):
before (whole, f32 held as declared): verified and confirmed; peak RSS 16.2 GiB, 142 s of CPU
(86 s user, 56 s system), 12 min wall under load.
after (chunked, f32 held as declared, ranks interleaved): verified and confirmed; peak RSS
5.6 GiB (of which ~2.4 GiB the drawn float64 inputs the judge keeps), 233 s of CPU (185 s
user, 47 s system: the logits' matmul runs twice, once for the row max before its
all-reduce and once for the gather and row sum), 16 min wall under load; a second run: 5.6 GiB,
234 s of CPU, 14 min wall."""
import os

import pytest

pytest.importorskip("torch")

import shardproof.api as api  # noqa: E402
import shardproof.api_confirm as api_confirm  # noqa: E402
from shardproof.engine.rng import plan_randomness  # noqa: E402
from shardproof.frontends.torch_chunks import plan_chunks  # noqa: E402
from shardproof.frontends.torch_stream import fitting, held_as_declared  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GPT = os.path.join(os.environ.get("SHARDPROOF_SHARED", os.path.join(ROOT, "..", "shared")), "graphs", "entangle", "gpt")
SEQ, DIST = os.path.join(GPT, "paral1_layer1"), os.path.join(GPT, "paral2_layer1")
CONSTANTS = os.path.join(ROOT, "examples", "dumps", "megatron_gpt_constants.yaml")
GIB = 2 ** 30
NEEDS, PEAK = 7 * GIB, "5.6 GiB"  # free memory the executed run asks for; its measured peak RSS

pytestmark = pytest.mark.skipif(not os.path.isdir(GPT), reason=f"../shared/graphs absent: {os.path.normpath(GPT)}")


@pytest.fixture(scope="module")
def prepared():
    return api.prepare_dumps(SEQ, DIST, CONSTANTS, auto_relations=True)


def test_gpt_dropouts_correspond_by_layout(prepared):
    p = prepared
    plan = plan_randomness(p.seq, p.dist, p.bindings)
    assert plan.blocked is None and sorted(plan.seq) == ["native_dropout", "native_dropout_1", "native_dropout_2",
                                                         "native_dropout_3"]
    for r in range(2):
        for name in ("native_dropout", "native_dropout_2", "native_dropout_3"):  # sequence parallel: rows of dim 0
            d = plan.ranks[r][name]
            assert d.seq_node == name and d.shape == (1536, 8, 768)
            assert d.positions[0].tolist() == list(range(768 * r, 768 * r + 768)) and d.positions[1:] == (None, None)
        d = plan.ranks[r]["native_dropout_1"]  # attention probabilities: the rank's heads
        assert d.shape == (8, 24, 1536, 1536) and d.positions[1].tolist() == list(range(12 * r, 12 * r + 12))


def test_gpt_fits_with_floats_held_as_declared_or_in_chunks(prepared):
    need, name, size, how = fitting(prepared.seq, prepared.dist, 16 * GIB)
    assert how == {"precision": "declared"} and 13 * GIB < need < 14 * GIB and name in ("mm_4", "view_30")
    need, _, _, how = fitting(prepared.seq, prepared.dist, api_confirm.EXEC_BYTES)  # make test's bound
    assert how == {"precision": "declared", "chunks": True} and need < 1.5 * GIB


def test_gpt_attention_and_logits_run_in_chunks(prepared):
    """No [b * heads, s, s] score and no [tokens, vocab] logit tensor is ever whole: they are
    lazy, and only the sinks' results (bmm with V, the row max, the gather, the row sum) are."""
    with held_as_declared():
        for g in [prepared.seq] + prepared.dist.graphs:
            plan = plan_chunks(g)
            names = {n.name for n in plan.lazy}
            assert {"baddbmm", "_softmax", "native_dropout_1", "mm_4", "exp"} <= names and not plan.whole
            assert {s.node.name for s in plan.sinks.values()} == {"bmm", "max_1", "index_1", "sum_1"}
            assert all(s.piece_bytes < 400 * 2 ** 20 for s in plan.sinks.values())


def _available() -> int:
    with open("/proc/meminfo") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable"))


@pytest.mark.slow
@pytest.mark.sweep  # ~4 min CPU at 5.6 GiB: outside make test's 20-minute budget (make confirm-gpt runs it)
def test_gpt_pair_is_verified_and_confirmed_with_corresponding_dropout():
    if _available() < NEEDS:
        pytest.skip(f"executing the GPT pair needs about {NEEDS / GIB:.0f} GiB of free memory "
                    f"(peak RSS {PEAK})")
    report = api.verify_dumps(SEQ, DIST, CONSTANTS, auto_relations=True)
    c = report.confirmation
    assert report.status == "verified" and (c.by, c.outcome, c.draws) == ("torch", "confirmed", 1), (report, c)
    assert [(o.name, o.holds) for o in report.outputs] == [("div_2", "Replicate()")]
    assert "a chunk at a time" in c.detail  # the attention scores and logits were never held whole
