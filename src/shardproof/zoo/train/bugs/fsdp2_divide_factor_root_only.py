"""Bug: the FSDP2 gradient divide factor set on the root module only. The loss is already
normalised by the global token count, so FSDP must sum the gradients; but
``set_gradient_divide_factor`` applies to the FSDP module it is called on, not its
children, and here the parameters all live in the per-layer units: FSDP still averages
their gradients (reduce-scatter with AVG), dividing them by the world size a second time
(torchtitan disables the division on every FSDP module for this reason). Expected: the
first finding at the first gradient reduce-scatter (AVG where the partial sums need SUM),
on every rank. (One microbatch: with two, the first microbatch's reduced share relates to
nothing on its own, and is reported first.)"""
from dataclasses import replace

from fsdp2_mlp_train import TRAIN, FSDPMLP, case as fsdp_case

WORLD_SIZES = (2,)


class DivideFactorOnRootOnly(FSDPMLP):
    def sum_gradients(self):
        self.set_gradient_divide_factor(1.0)  # BUG: not recursive; the layers' units still average


def case(world_size: int = 2):
    return fsdp_case(world_size, model=DivideFactorOnRootOnly, train=replace(TRAIN, microbatches=1),
                     name="fsdp2_divide_factor_root_only",
                     meta={"source": "torchtitan: FSDP2 gradient division with global-token loss normalisation",
                           "bug_op": "_c10d_functional.reduce_scatter_tensor", "bug_ranks": "all",
                           "bug": "wrong-reduce-op",
                           "hint": r"'sum', not 'avg'", "bug_line": "mb_loss.backward()",
                           "bug_node": "reduce_scatter_tensor",
                           "bug_source": "mini_fsdp.py:44"})
