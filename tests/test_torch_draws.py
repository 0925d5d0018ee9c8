"""The draws that make a live case's weights and inputs distinguishable."""
import pytest

torch = pytest.importorskip("torch")

from shardproof.frontends.torch_draws import draw_inputs, redraw, restore, snapshot  # noqa: E402


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 6)
        torch.nn.init.zeros_(self.lin.bias)
        self.register_buffer("var", torch.ones(6))
        self.register_buffer("steps", torch.zeros(3, dtype=torch.long))


def test_redraw_gives_distinct_seeded_values_and_restore_puts_back():
    net = Net()
    snap = snapshot(net)
    redraw(net, seed=3)
    w, b = net.lin.weight, net.lin.bias
    assert w.unique().numel() == w.numel() and b.unique().numel() == b.numel()
    assert bool((net.var > 0).all()) and net.var.unique().numel() == 6  # positive stays positive
    assert net.steps.tolist() == [0, 0, 0]  # integer buffers untouched
    again = Net()
    redraw(again, seed=3)
    assert torch.equal(again.lin.weight, w) and torch.equal(again.var, net.var)
    redraw(again, seed=4)
    assert not torch.equal(again.lin.weight, w)
    restore(net, snap)
    assert torch.equal(net.lin.bias, torch.zeros(6)) and torch.equal(net.lin.weight, snap["lin.weight"])
    redraw(net, seed=3, buffers=False)
    assert torch.equal(net.var, torch.ones(6))
    redraw(lambda x: x, seed=1)  # a plain function: no-op


def test_draw_inputs_keeps_shapes_dtypes_and_integer_values():
    targets = torch.tensor([3, -100, 1, 0, 2, -100])
    x = torch.zeros(4, 5, dtype=torch.float32)
    mask = torch.tensor([True, False])
    out = draw_inputs({"x": x, "t": targets, "m": mask, "k": 7}, seed=0)
    assert out["x"].shape == x.shape and out["x"].dtype == x.dtype and out["x"].abs().sum() > 0
    assert out["t"].shape == targets.shape and out["t"].dtype == targets.dtype
    assert set(out["t"].tolist()) <= set(targets.tolist())
    assert out["m"] is mask and out["k"] == 7
    assert torch.equal(draw_inputs({"x": x}, seed=0)["x"], out["x"])
