"""The Llama step (two src/shardproof/zoo/llama_block.py blocks: RMSNorm, GQA attention with
RoPE, SwiGLU) under ``torch.distributed.pipelining``'s schedules (zoo/train/pp_schedules.py):
one block per stage; the interleaved and zero-bubble schedules (two stages per rank at pp2)
cut four blocks. The loss is PyTorch's default form: each microbatch's mean, the schedule
scaling the accumulated gradients by 1/microbatches (``scale_grads=True``), so each
microbatch's backward carries microbatches x its share of the single-device gradient until
``.grad`` is divided at the end. That constant multiple flows through the RMSNorm, attention
and SwiGLU backward as the normal form of exact scalar factors (algebra/scaling.py: VJPs are
linear in the incoming gradient). ``model=SummedLoss``: each microbatch's loss normalised by
the whole batch, gradients not scaled (the other documented form)."""
from llama_block import LlamaBlock
from pp_schedules import SCHEDULES, ScheduledPipeline, SummedLoss, case as schedule_case, regression_batch  # noqa: F401

BATCH, SEQ, HIDDEN, HEADS, KV_HEADS, FFN = 4, 4, 16, 4, 2, 32


def case(world_size: int = 2, schedule: str = "1f1b", model=ScheduledPipeline):
    layers = world_size * SCHEDULES[schedule][1]
    return schedule_case(world_size, schedule, blocks=lambda: [LlamaBlock(HIDDEN, HEADS, KV_HEADS, FFN)
                                                               for _ in range(layers)],
                         batch=lambda: regression_batch(BATCH, SEQ, HIDDEN), model=model,
                         name=f"pipelining_llama_{schedule}" + ("" if model is ScheduledPipeline else "_summed"))
