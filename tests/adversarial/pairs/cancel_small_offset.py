"""ok: cancel_big_input's programs with a small offset c: each rank's partial sum offset by c
before the all-reduce and the offset removed after -- float32 keeps the sums' digits."""
import os

import torch

from adv import fn_case
from gloo_run import load

LABEL, CLASS = "ok", "casts"

_BIG = load(os.path.join(os.path.dirname(os.path.abspath(__file__)), "cancel_big_input.py"))
single, distributed = _BIG.single, _BIG.distributed


def case(world_size=2):
    return fn_case(single, distributed, {"x": torch.randn(4, 8), "w": torch.randn(8, 3), "c": torch.full((3,), 0.5)},
                   shard={"x": 1, "w": 0})
