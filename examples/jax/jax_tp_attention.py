"""tp_attention in JAX (shard_map over 4 host devices): verified."""
from jax_models import tp_attention_case

WORLD_SIZES = (2, 4)


def case(world_size=4):
    return tp_attention_case(world_size)
