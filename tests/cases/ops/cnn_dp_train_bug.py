"""cnn_dp_train.py's buggy twin: the gradient of ``c1.weight`` is left un-reduced."""
from cnn_dp_train import case as _case


def case(world_size: int = 2):
    return _case(world_size, buggy=True)
