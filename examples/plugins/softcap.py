"""A shardproof plug-in: declares the ops of your own framework, so that graph dumps using
them verify without editing shardproof. Each op gets reference numerics (numpy, float64)
and a relation rule (how the op transforms ``term[layout]`` values; see ops/aten.py).

    shardproof verify --seq examples/plugins/dumps/tp1 --dist examples/plugins/dumps/tp2 \\
        --auto-relations --plugin examples/plugins/softcap.py
"""
import numpy as np
import torch

from shardproof.ops.common import elementwise_op
from shardproof.ops.registry import declare

# mylib.softcap(x, cap) = cap * tanh(x / cap) is elementwise: exact on any shard of x.
# torch_impl: the op on torch tensors, which the execution confirmation of a dump runs (torch has
# no kernel for a framework's own op); without it a proof is "unknown: not confirmed by execution".
elementwise_op("mylib.softcap", lambda x, cap: cap * np.tanh(np.asarray(x, dtype=np.float64) / cap),
               doc="logit soft-capping", torch_impl=lambda x, cap: cap * torch.tanh(x / cap))

# mylib.tag(x, label) returns x unchanged (a logging op): numerics and rule are the identity.
declare("mylib.tag", numerics=lambda x, label: x, rule=lambda ctx, x, label: x, doc="tags a tensor, returns it",
        torch_impl=lambda x, label: x)
