"""DTensor vocab-parallel embedding: the vocab_parallel_embedding model parallelized with
``parallelize_module`` and torchtitan's plan for ``tok_embeddings``
(``RowwiseParallel(input_layouts=Replicate(), output_layouts=Replicate())``).

RowwiseParallel on an ``nn.Embedding`` shards the table by rows (vocabulary). DTensor looks
the replicated ids up through its MaskPartial placement: ids outside the rank's row range are
masked to 0, looked up locally, the looked-up rows are zeroed, and the partial results are
summed across ranks with all_reduce when redistributed to Replicate.

The single-device ``Embedding`` is a plain module calling ``F.embedding``. RowwiseParallel
accepts only ``nn.Linear``/``nn.Embedding``, and its input hook reads positional arguments
(shardproof calls the top-level program with keyword inputs), so the distributed program is
torchtitan's shape: a model whose ``tok_embeddings`` is an ``nn.Embedding`` holding the same
table, called positionally. Same computation: ``F.embedding(ids, weight)``.

    shardproof verify src/shardproof/zoo/dtensor_vocab_parallel_embedding.py --world-size 4
"""
import torch
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate
from torch.distributed.tensor.parallel import RowwiseParallel, parallelize_module

from shardproof import Case
from vocab_parallel_embedding import VOCAB, Embedding

WORLD_SIZES = (2, 3, 4, 6, 8)

PLAN = {"tok_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=Replicate())}


class TokEmbeddings(nn.Module):
    def __init__(self, full: Embedding):
        super().__init__()
        self.tok_embeddings = nn.Embedding.from_pretrained(full.weight.detach().clone(), freeze=False)

    def forward(self, ids):
        return self.tok_embeddings(ids)


def parallelize(full: Embedding, rank: int, world: int) -> TokEmbeddings:
    mesh = init_device_mesh("cpu", (world,))
    return parallelize_module(TokEmbeddings(full), mesh, PLAN)


def case(world_size: int = 2) -> Case:
    torch.manual_seed(0)
    full = Embedding()
    ids = torch.randint(0, VOCAB, (4, 6))
    return Case(single=full, distributed=lambda rank, world: parallelize(full, rank, world),
                inputs={"ids": ids}, world_size=world_size, name="dtensor_vocab_parallel_embedding",
                meta={"source": "DTensor RowwiseParallel"},
                description="vocab_parallel_embedding parallelized with DTensor (torchtitan's tok_embeddings "
                            "plan: RowwiseParallel(input_layouts=Replicate(), output_layouts=Replicate()))",
                expect={"out": "Replicate()"})
