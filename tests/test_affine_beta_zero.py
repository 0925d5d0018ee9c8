"""addmm / baddbmm with beta 0 ignore their input, as torch does: an uninitialized buffer's
nan and inf do not reach the result (megatron-core's attention passes one to baddbmm)."""
import numpy as np
import torch

from shardproof.ops.registry import lookup


def test_baddbmm_beta_zero_ignores_nan_input():
    a, b = torch.randn(2, 3, 4, dtype=torch.float64), torch.randn(2, 4, 5, dtype=torch.float64)
    buf = torch.full((2, 3, 5), float("nan"), dtype=torch.float64)
    want = torch.baddbmm(buf, a, b, beta=0.0, alpha=0.5).numpy()
    got = lookup("aten.baddbmm").numerics(buf.numpy(), a.numpy(), b.numpy(), beta=0.0, alpha=0.5)
    assert not np.isnan(want).any() and np.allclose(got, want)
    c = torch.randn(3, 5, dtype=torch.float64)
    m = torch.randn(3, 4, dtype=torch.float64)
    got = lookup("aten.addmm").numerics(c.numpy(), m.numpy(), b[0].numpy(), beta=2, alpha=1)
    assert np.allclose(got, torch.addmm(c, m, b[0], beta=2).numpy())  # beta != 0: c counts
