"""The torchtitan-style recipe with the whole sequence handed to every rank (the plan says Shard(1))."""
from llama_tp import case as _case


def case(world_size: int = 2):
    return _case(world_size, bug="input_not_sharded")
