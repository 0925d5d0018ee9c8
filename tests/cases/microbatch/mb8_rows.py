"""Helpers of the batch-non-uniform cases (issue 16: the induction over the microbatch loop
must not conclude a late microbatch from early ones where rows are treated differently):
row weights built from ``arange`` over the batch, on the single-device or the parallel side."""
from dataclasses import replace

import torch

from mb8_mlp_train import EIGHT_MICROBATCHES, CountedMicrobatches

LOCAL_ROWS, CUT = 8, 6  # each dp rank's 8 rows (one per microbatch); rows from 6 (microbatch 6) differ


def local_weights(rows: int) -> torch.Tensor:
    """1 before the local row CUT, 0 from it on (a constant row mask over the batch)."""
    return (torch.arange(rows) < CUT).float()


def global_weights(rows: int) -> torch.Tensor:
    """The same mask over the global batch (dp ranks' chunks of LOCAL_ROWS rows each)."""
    return (torch.arange(rows) % LOCAL_ROWS < CUT).float()


def weighted_loss(weights):
    """The token-mean loss with each row's error weighted by ``weights(rows)``."""
    def loss(outputs, batch):
        w = weights(outputs.shape[0])
        return (batch["mask"] * w[:, None] * (0.5 * (outputs - batch["target"]) ** 2).sum(-1)).sum() \
            / batch["mask"].sum()
    return loss


def cat_scaled_loss(outputs, batch):
    """The token-mean loss with the global batch's last two rows (rank 1's microbatches 6-7)
    counted twice: a cat of two differently processed parts of the batch."""
    per = batch["mask"] * (0.5 * (outputs - batch["target"]) ** 2).sum(-1)
    cut = per.shape[0] - (LOCAL_ROWS - CUT)
    return torch.cat([per[:cut], 2 * per[cut:]]).sum() / batch["mask"].sum()


def single_loss(loss):
    """Eight microbatches, the single-device step's loss replaced by `loss`."""
    return replace(EIGHT_MICROBATCHES, loss=loss)


class RowMaskedMicrobatches(CountedMicrobatches):
    """Builds the local row mask before the loop (an extra input split with the batch); each
    microbatch weights its rows' errors by its slice of it."""

    def accumulate_gradients(self, params, inputs, train):
        return super().accumulate_gradients(params, dict(inputs, w=local_weights(inputs["x"].shape[0])), train)

    def microbatch_loss(self, mb, total_tokens, train):
        out = self(x=mb["x"])
        return (mb["mask"] * mb["w"][:, None] * (0.5 * (out - mb["target"]) ** 2).sum(-1)).sum() / total_tokens



def row_weights(rows) -> torch.Tensor:
    """Distinct weights of the global batch's tokens, from their rows' ids: (rows, 3)."""
    return (1 + 3 * rows[:, None] + torch.arange(3)) / 48


def row_weighted_loss(outputs, batch):
    """The token-mean loss with the tokens' errors weighted by ``row_weights`` of their rows."""
    w = row_weights(torch.arange(outputs.shape[0]))
    return (batch["mask"] * w * (0.5 * (outputs - batch["target"]) ** 2).sum(-1)).sum() / batch["mask"].sum()


class RowIdMicrobatches(CountedMicrobatches):
    """Each row's global id (an ``arange`` before the loop, sliced there row by row: one
    slice per microbatch); each microbatch weights its tokens' errors by ``row_weights`` of
    its ids (:meth:`ids`)."""

    def accumulate_gradients(self, params, inputs, train):
        rows = inputs["x"].shape[0]
        ids = self.ids(torch.arange(rows) + rows * self.mesh.dp_rank)
        step = rows // train.microbatches
        self.row_ids = [ids[i:i + step] for i in range(0, rows, step)]
        return super().accumulate_gradients(params, inputs, train)

    def ids(self, ids):
        return ids

    def microbatch_loss(self, mb, total_tokens, train):
        out, w = self(x=mb["x"]), row_weights(self.row_ids[self.seen])
        self.seen += 1
        return (mb["mask"] * w * (0.5 * (out - mb["target"]) ** 2).sum(-1)).sum() / total_tokens


class ClampedRowIdMicrobatches(RowIdMicrobatches):
    """Bug: the row ids clamped at the rank's row CUT-1: rows from CUT on take that row's weight."""

    def ids(self, ids):
        return ids.clamp(max=LOCAL_ROWS * self.mesh.dp_rank + CUT - 1)


class SameRowIdMicrobatches(RowIdMicrobatches):
    """Every row's id replaced by 3: the slices built before the loop are equal by value."""

    def ids(self, ids):
        return torch.full_like(ids, 3)


def same_row_weighted_loss(outputs, batch):
    """The token-mean loss with every token weighted as a token of row 3."""
    w = row_weights(torch.full((outputs.shape[0],), 3))
    return (batch["mask"] * w * (0.5 * (outputs - batch["target"]) ** 2).sum(-1)).sum() / batch["mask"].sum()


class CatScaledMicrobatches(CountedMicrobatches):
    """Bug: before the loop the local batch's rows from CUT on are scaled by 2 (a cat of the
    first rows and the last ones scaled), then split into microbatches as usual."""

    def accumulate_gradients(self, params, inputs, train):
        x = inputs["x"]
        return super().accumulate_gradients(params, dict(inputs, x=torch.cat([x[:CUT], 2 * x[CUT:]])), train)
