"""Feature extraction's backbone (BatchNorm folded, channels-last): the same features as the
model's own forward up to float rounding, and the model left as it was."""

from __future__ import annotations

import torch
from torch import nn

from solo_hyper.evaluation.features import embed, evaluation_loaders
from solo_hyper.evaluation.inference import folded, inference_backbone
from solo_hyper.pretrained import backbone_of
from solo_hyper.run.train import prepare

HCL = "configs/pretrain/fashionmnist/hcl.yaml"


def untrained(width: int = 8):
    """An HCL model on the small CNN whose BatchNorms hold non-trivial running statistics."""
    import solo_hyper.methods  # noqa: F401  (registers the methods)
    from solo_hyper.solo import adapter

    prep = prepare(HCL, [f"backbone.kwargs.width={width}", "data.val_subset=300"])
    torch.manual_seed(0)
    model = adapter.build_method(prep.cfg, 10, prep.small_images, prep.num_crops)
    g = torch.Generator().manual_seed(1)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=g))
            m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            m.weight.data.copy_(torch.randn(m.num_features, generator=g))
            m.bias.data.copy_(torch.randn(m.num_features, generator=g))
    return model.train(), prep.cfg


def plain_embed(model, cfg, loader):
    """The reference: the model's own forward (BatchNorm unfolded, contiguous layout)."""
    from solo_hyper.evaluation.features import evaluation_view

    view = evaluation_view(model, cfg)
    model.eval()
    feats, zs = [], []
    with torch.inference_mode():
        for images, _ in loader:
            out = model(view.evaluation_view(images))
            feats.append(out["feats"])
            zs.append(out["z"])
    return torch.cat(feats), torch.cat(zs)


def test_embed_gives_the_models_own_features_up_to_float_rounding():
    model, cfg = untrained()
    backbone = backbone_of(model)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    _, loader, _ = evaluation_loaders(cfg, {"val_subset": 300})
    got = embed(model, cfg, loader)
    assert model.training  # the mode it had
    assert backbone_of(model) is backbone  # its own backbone back, BatchNorms and all
    assert any(isinstance(m, nn.BatchNorm2d) for m in backbone.modules())
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())
    feats, z = plain_embed(model, cfg, loader)
    assert got.feats.shape == feats.shape == (300, backbone.num_features)
    scale = feats.abs().max()
    assert (got.feats - feats).abs().max() <= 1e-5 * scale
    assert (got.z - z).abs().max() <= 1e-5 * z.abs().max()
    # the folding did something: the features are not bit-identical to the unfolded ones
    assert not torch.equal(got.feats, feats)


def test_folding_removes_the_batchnorms_and_keeps_the_function():
    model, _ = untrained()
    backbone = backbone_of(model).eval()
    fast = folded(backbone)
    assert not any(isinstance(m, nn.BatchNorm2d) for m in fast.modules())
    x = torch.randn(16, 3, 28, 28)
    with torch.no_grad():
        assert torch.allclose(fast(x), backbone(x), rtol=1e-4, atol=1e-5)


class Untraceable(nn.Module):
    """A backbone fx cannot trace (control flow on a tensor's value)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv, self.bn = nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.bn(self.conv(x))
        return y.flatten(1) if y.sum() > -1e30 else y.flatten(1) * 0


class Holder(nn.Module):
    def __init__(self, backbone: nn.Module) -> None:
        super().__init__()
        self.backbone = backbone

    def forward(self, x: torch.Tensor) -> dict:
        return {"feats": self.backbone(x)}


def test_an_untraceable_backbone_runs_as_it_is():
    holder = Holder(Untraceable()).eval()
    x = torch.randn(4, 3, 8, 8)
    with torch.no_grad():
        expected = holder(x)["feats"]
        with inference_backbone(holder, torch.device("cpu")) as last:
            assert last  # a 2-D convolution on the CPU: channels-last
            assert holder.backbone is not None and isinstance(holder.backbone.bn, nn.BatchNorm2d)
            got = holder(x.contiguous(memory_format=torch.channels_last))["feats"]
    assert torch.allclose(got, expected, atol=1e-6)
    assert isinstance(holder.backbone, Untraceable)


def test_a_model_without_a_backbone_attribute_is_left_alone():
    model = nn.Linear(3, 2)
    with inference_backbone(model, torch.device("cpu")) as last:
        assert last is False
    assert isinstance(model, nn.Linear) and not hasattr(model, "backbone")
