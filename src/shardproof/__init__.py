"""shardproof: prove a parallelized model computes what its single-device version computes."""
from .case import SGD, AdamW, Case, Train
from .relations import Ignore, Interleaved, Mesh, Partial, Replicate, Shard, Slices

try:
    from importlib.metadata import PackageNotFoundError, version as _version
    __version__ = _version("shardproof")
except (ImportError, PackageNotFoundError):  # run from a source tree that is not installed
    __version__ = "0.1.0+unknown"

__all__ = ["AdamW", "Case", "Ignore", "Interleaved", "Mesh", "Partial", "Replicate", "SGD", "Shard", "Slices", "Train",
           "verify", "__version__"]


def verify(case, **options):
    """Capture and verify a :class:`Case`; returns a :class:`~shardproof.engine.result.Report`."""
    from .api import verify_case
    return verify_case(case, **options)
