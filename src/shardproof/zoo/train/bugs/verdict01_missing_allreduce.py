"""Bug (VERDICT repro 1, "missing all_reduce, dataflow intact"): the row-parallel outputs go
through Megatron's f operator where its g belongs (VERDICT's mutation swaps nnScaler's
AllReduceIdentityPrim for IdentityAllreducePrim): the forward all_reduce is gone, every rank
continues with its partial sum, and the backward gains an all_reduce. The dataflow is intact,
so the shapes and the graph look right. Expected: the first finding at the residual add that
consumes the attention's unreduced output, on every rank."""
from llama_block_train import TrainParallelLlamaBlock, case as llama_case
from mini_megatron import CopyToTensorParallel

WORLD_SIZES = (4,)


class MissingForwardAllReduce(TrainParallelLlamaBlock):
    def reduce_tp(self, y):
        return CopyToTensorParallel.apply(y, self.mesh.tp_group)  # BUG: f (identity forward) where g belongs


def case(world_size: int = 4):
    return llama_case(world_size, dp=2, model=MissingForwardAllReduce, name="verdict01_missing_allreduce",
                      meta={"source": "VERDICT repro 1: missing forward all_reduce, dataflow intact",
                            "bug_op": "aten.add", "bug_ranks": "all", "bug": "partial-sum-never-reduced",
                            "hint": r"all_reduce", "bug_line": "self.attention(self.attention_norm(x))",
                            "bug_node": "add_3", "bug_source": "llama_block.py"})
