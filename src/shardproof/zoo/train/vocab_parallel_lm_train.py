"""Training step of a small GPT-like language model with Megatron's vocabulary parallelism
on a dp x tp mesh: the vocab-parallel embedding (src/shardproof/zoo/vocab_parallel_embedding.py),
a tensor-parallel pre-LayerNorm MLP block, an output layer TIED to the embedding (each tp
rank multiplies by its vocabulary rows, Megatron's ``parallel_lm_logits``: the f operator
on its input, so the input gradient is all-reduced over tp) and Megatron's vocab-parallel
cross-entropy (``_VocabParallelCrossEntropy``: max, target logit and softmax denominator
all-reduced over tp; its backward is softmax minus one at the target the rank owns).
2 microbatches, the loss normalised by the global token count, dp gradient all_reduce,
global-norm clipping, AdamW. The single-device step is ordinary cross-entropy over the
whole vocabulary (``F.cross_entropy``), masked and divided by the batch's token count.

    shardproof verify src/shardproof/zoo/train/vocab_parallel_lm_train.py --world-size 4
"""
import torch
import torch.nn.functional as F
from torch import nn

from mini_megatron import MegatronTraining, dp_shard
from shardproof import AdamW, Case, Train
from tensor_parallel import TensorParallel
from vocab_parallel_cross_entropy import vocab_parallel_cross_entropy
from vocab_parallel_embedding import DIM, VOCAB, Embedding, VocabParallelEmbedding

BATCH, SEQ, FFN = 4, 3, 16
MESHES = ((2, 2), (1, 4))  # (dp, tp)


class TiedLM(nn.Module):
    """Embedding -> x + MLP(LayerNorm(x)) -> logits by the embedding table (tied)."""

    def __init__(self):
        super().__init__()
        self.embedding = Embedding(VOCAB, DIM)
        self.ln = nn.LayerNorm(DIM)
        self.fc1 = nn.Linear(DIM, FFN)
        self.fc2 = nn.Linear(FFN, DIM)

    def forward(self, ids):
        h = self.embedding(ids)
        h = h + self.fc2(F.gelu(self.fc1(self.ln(h))))
        return F.linear(h, self.embedding.weight)


class ParallelTiedLM(TensorParallel):
    """Rank r: vocabulary rows r of the (tied) embedding, rows r of fc1, columns r of fc2."""

    def __init__(self, full: TiedLM, rank: int, world: int):
        super().__init__()
        self.embedding = VocabParallelEmbedding(full.embedding, rank, world)
        self.ln = nn.LayerNorm(DIM)
        self.fc1 = nn.Linear(DIM, FFN // world)
        self.fc2 = nn.Linear(FFN // world, DIM)
        with torch.no_grad():
            self.ln.load_state_dict(full.ln.state_dict())
            self.fc1.weight.copy_(full.fc1.weight.chunk(world, 0)[rank])
            self.fc1.bias.copy_(full.fc1.bias.chunk(world, 0)[rank])
            self.fc2.weight.copy_(full.fc2.weight.chunk(world, 1)[rank])
            self.fc2.bias.copy_(full.fc2.bias)

    def output_layer_input(self, h):
        """The tied output layer's input (Megatron's parallel_lm_logits: the f operator)."""
        return self.enter_tp(h)

    def forward(self, ids):
        h = self.reduce_tp(self.embedding.local_lookup(ids))
        y = self.reduce_tp(F.linear(F.gelu(self.fc1(self.enter_tp(self.ln(h)))), self.fc2.weight))
        h = h + (y + self.fc2.bias)  # the row-parallel layer adds its bias after the all_reduce
        return F.linear(self.output_layer_input(h), self.embedding.weight)  # this rank's vocabulary columns


class VocabParallelCrossEntropy(torch.autograd.Function):
    """Megatron's ``_VocabParallelCrossEntropy``: per-token loss of vocab-sharded logits."""

    @staticmethod
    def forward(ctx, vocab_parallel_logits, target, group, rank):
        loss, exp_logits, sum_exp_logits, target_mask, masked_target_1d = vocab_parallel_cross_entropy(
            vocab_parallel_logits, target, rank, group)
        softmax = exp_logits / sum_exp_logits.unsqueeze(dim=-1)
        ctx.save_for_backward(softmax, target_mask, masked_target_1d)
        return loss

    @staticmethod
    def backward(ctx, grad_output):
        softmax, target_mask, masked_target_1d = ctx.saved_tensors
        partition_vocab_size = softmax.size(-1)
        grad_2d = softmax.reshape(-1, partition_vocab_size).clone()
        arange_1d = torch.arange(start=0, end=grad_2d.size()[0], device=grad_2d.device)
        softmax_update = 1.0 - target_mask.view(-1).float()
        grad_2d[arange_1d, masked_target_1d] -= softmax_update
        grad_input = grad_2d.view_as(softmax) * grad_output.unsqueeze(dim=-1)
        return grad_input, None, None, None


def token_mean_cross_entropy(logits, batch):
    """The reference loss: cross-entropy over the whole vocabulary, masked, divided by the
    batch's token count."""
    ce = F.cross_entropy(logits.flatten(0, 1), batch["target"].flatten(), reduction="none")
    return (ce * batch["mask"].flatten()).sum() / batch["mask"].sum()


class TrainParallelTiedLM(MegatronTraining, ParallelTiedLM):
    replicated = frozenset({"ln.weight", "ln.bias", "fc2.bias"})

    def microbatch_loss(self, mb, total_tokens, train):
        logits = self(ids=mb["ids"]).flatten(0, 1)  # tokens x this rank's vocabulary
        per_token = VocabParallelCrossEntropy.apply(logits, mb["target"].flatten(), self.mesh.tp_group,
                                                    self.mesh.tp_rank)
        return (per_token * mb["mask"].flatten()).sum() / total_tokens


TRAIN = Train(loss=token_mean_cross_entropy, optimizer=AdamW(lr=1e-2), microbatches=2, grad_clip=0.5)


def case(world_size: int = 4, dp: int = 2, model=TrainParallelTiedLM, train=TRAIN, name="vocab_parallel_lm_train",
         meta=None) -> Case:
    torch.manual_seed(0)
    full, tp = TiedLM(), world_size // dp
    inputs = {"ids": torch.randint(0, VOCAB, (BATCH, SEQ)), "target": torch.randint(0, VOCAB, (BATCH, SEQ)),
              "mask": (torch.rand(BATCH, SEQ) > 0.3).long()}
    return Case(single=full, distributed=lambda rank, world: model(full, rank, world, tp), inputs=inputs,
                dist_inputs=dp_shard(tp), world_size=world_size, train=train, name=name,
                meta=meta or {"source": "Megatron vocab-parallel embedding, tied output layer, vocab-parallel CE"})
