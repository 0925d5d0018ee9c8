"""The Llama step (two src/shardproof/zoo/llama_block.py blocks: RMSNorm, GQA attention with
RoPE, SwiGLU) under ``torch.distributed.pipelining``'s schedules (zoo/train/pp_schedules.py):
one block per stage; the interleaved and zero-bubble schedules (two stages per rank at pp2)
cut four blocks. Each microbatch's loss is its squared error over the whole batch's element
count, gradients not scaled by the schedule (``scale_grads=False``). With the schedule's
scaling (``scale_grads=True``: each microbatch's backward carries microbatches x the
single-device gradient until ``.grad`` is divided at the end) the attention and norm weights'
gradients come back unknown (relations stop at the gradient recv: a constant multiple of the
single-device gradient does not flow through the RMSNorm/attention backward; the MLP stack's
does) -- a missing lemma, not a wrong verdict; a mean per microbatch divided by the
microbatch count inside the loss, unscaled, verifies."""
from llama_block import LlamaBlock
from pp_schedules import SCHEDULES, SummedLoss, case as schedule_case, regression_batch

BATCH, SEQ, HIDDEN, HEADS, KV_HEADS, FFN = 4, 4, 16, 4, 2, 32


def case(world_size: int = 2, schedule: str = "1f1b"):
    layers = world_size * SCHEDULES[schedule][1]
    return schedule_case(world_size, schedule, blocks=lambda: [LlamaBlock(HIDDEN, HEADS, KV_HEADS, FFN)
                                                               for _ in range(layers)],
                         batch=lambda: regression_batch(BATCH, SEQ, HIDDEN), name=f"pipelining_llama_{schedule}",
                         model=SummedLoss)
