"""The step's layers screened with each rank's model built once (issue 16: sub-linear in the
layers; shardproof.blocks.screen_layers) and the value matching's necessary condition
(relations/by_value.may_be_pieces) that lets it skip single-device inputs no rank piece can
come from. Neither may merge layers or relate inputs that the per-layer screening and the full
matching would not: a layer sharded from the layer below's weights (``wrong-layer``) is never
verified, and is located at that layer. Label: the step run on a real gloo group (4 processes)
against the single-device step (tests/gloo.py training_step_agrees)."""
import os
import sys

import numpy as np
import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "src", "shardproof", "zoo", "train"))

import llama_step  # noqa: E402
from shardproof.api import NO_CONFIRM  # noqa: E402
from shardproof.blocks import REPLICATED, screen_block, screen_layers  # noqa: E402
from shardproof.frontends.torch_blocks import screening  # noqa: E402
from shardproof.relations.by_value import candidate_relations, may_be_pieces  # noqa: E402
from shardproof.relations.spec import RelationError  # noqa: E402

WRONG_LAYER = os.path.join(HERE, "cases", "step_llama_wrong_layer1.py")


def test_may_be_pieces_is_necessary():
    """Wherever value matching finds a layout, the cheap test passes; a tensor none of whose
    rank pieces starts with a value of the whole is refused."""
    rng = np.random.default_rng(0)
    whole = rng.permutation(48).reshape(6, 8).astype(np.float32)
    cases = [[whole, whole], [whole[:3], whole[3:]], [whole[:, :4], whole[:, 4:]], [whole[::2], whole[1::2]],
             [whole[:3], whole[:3]], [whole + 100, whole + 100], [whole[:3] + 0.5, whole[3:]], [whole[3:], whole[:3]]]
    for locals_ in cases:
        rels, _ = candidate_relations(whole, locals_)
        assert may_be_pieces(whole, locals_) or not rels
    assert not may_be_pieces(whole, [whole + 100, whole + 100])
    assert not may_be_pieces(whole, [whole[:3], whole[3:] + 0.5])  # one rank's piece is foreign
    assert may_be_pieces(whole, [whole[:0], whole[3:]])  # an empty piece says nothing
    assert not may_be_pieces(np.array([np.nan]), [np.array([np.nan])])  # NaN equals nothing, as in matching


def test_screen_layers_gives_screen_block_keys():
    """Each rank's model built once for all layers gives every layer the key the per-layer
    screening gives it (the keys hold ops and relations, never values)."""
    case = llama_step.step_case(3, buggy_layer=2)  # layer 2: its input gradient unreduced over tp
    layers = list(case.single.layers)
    x, g = torch.randn(2, 4, 32), torch.randn(2, 4, 32)
    with screening():
        once = screen_layers(layers, lambda r, w: list(case.distributed(r, w).layers), x, g, 4, "s", dict(REPLICATED))
        each = [screen_block(layer, (lambda i: lambda r, w: case.distributed(r, w).layers[i])(i), x, g, 4, f"l{i}",
                             dict(REPLICATED)) for i, layer in enumerate(layers)]
    assert once == each
    assert once[0] == once[1] != once[2]


def test_screen_layers_relates_no_other_layers_weights():
    """Every layer is redrawn with its own values before the rank models are built: a rank layer
    cut from the layer below's weights relates to none of its block's inputs."""
    case = llama_step.step_case(2, buggy_layer=1, bug="wrong-layer")
    x, g = torch.randn(2, 4, 32), torch.randn(2, 4, 32)
    with screening(), pytest.raises(RelationError, match="block.wq.weight"):
        screen_layers(list(case.single.layers), lambda r, w: list(case.distributed(r, w).layers), x, g, 4, "s",
                      dict(REPLICATED))


@pytest.mark.sweep  # a full-trace fallback (~15 CPU s, ~60 s wall under load): make test-all
def test_wrong_layer_weights_located():
    from shardproof.step_blocks import verify_step
    report = verify_step(llama_step.step_case(2, buggy_layer=1, bug="wrong-layer"), confirm_draws=NO_CONFIRM)
    assert report.status == "violation"
    assert report.blocks["fallback"].startswith("a layer's inputs could not be related")
    failing = {o.name for o in report.outputs if not o.holds}
    assert {f"grad:layers.1.{n}.weight" for n in llama_step.PARAMS} <= failing
    assert {f"updated:layers.1.{n}.weight" for n in llama_step.PARAMS} <= failing
    assert "layers.1.attention_norm.weight: held of layers.0.attention_norm.weight" in report.findings[0].message


@pytest.mark.sweep  # 2 gloo groups of 4 processes (one spawn runs both): make test-all
def test_wrong_layer_label_on_gloo():
    from gloo import training_steps_agree
    assert training_steps_agree([os.path.join(HERE, "cases", "step_llama2.py"), WRONG_LAYER], 4, 2) == [True, False]
