"""shardproof: prove a parallelized model computes what its single-device version computes."""
from .case import Case
from .relations import Ignore, Interleaved, Mesh, Partial, Replicate, Shard, Slices

__all__ = ["Case", "Ignore", "Interleaved", "Mesh", "Partial", "Replicate", "Shard", "Slices", "verify"]


def verify(case, **options):
    """Capture and verify a :class:`Case`; returns a :class:`~shardproof.engine.result.Report`."""
    from .api import verify_case
    return verify_case(case, **options)
