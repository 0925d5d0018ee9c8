"""BUG: a wrong tp_plan entry, ``"model.layers.*.mlp": "all_reduce"`` added to Llama's own plan.

The MLP's ``down_proj`` is already ``rowwise``, whose output transformers all-reduces; the
extra entry all-reduces the (already replicated) MLP output again, so every layer's MLP
contributes ``world_size`` times. shardproof finds it at that second all_reduce, node
``all_reduce_3`` of layer 0 (transformers' ``AllReduceParallel``), as *reduced twice*.

    shardproof verify examples/huggingface/bugs/hf_llama_tp_mlp_all_reduce.py
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from hf_llama_tp import make_case  # noqa: E402

WRONG_ENTRY = {"model.layers.*.mlp": "all_reduce"}


def case(world_size: int = 2):
    return make_case(world_size, plan=WRONG_ENTRY, name="hf_llama_tp_mlp_all_reduce")
