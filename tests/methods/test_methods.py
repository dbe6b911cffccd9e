"""Every method in the solo-learn style: build from config, forward keys/shapes, a fast_dev_run fit."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from conftest import fake_loaders, tiny_config

import solo_hyper.methods  # noqa: F401  (registers the methods)
from solo_hyper.losses import contrastive_loss
from solo_hyper.run.train import prepare
from solo_hyper.solo import adapter

METHODS = ["hcl", "shcl", "simclr", "supcon"]


def build(method: str, **sections):
    prep = prepare(None, base=tiny_config(method, **sections))
    model = adapter.build_method(prep.cfg, 10, prep.small_images, prep.num_crops)
    return prep, model


@pytest.mark.parametrize("method", METHODS)
def test_forward_keys_and_shapes(method):
    _, model = build(method)
    x = torch.randn(4, 3, 28, 28)
    out = model(x)
    assert {"logits", "feats", "z"} <= set(out)
    assert out["logits"].shape == (4, 10)
    assert out["feats"].shape == (4, model.features_dim)
    assert out["z"].shape == (4, 8)


@pytest.mark.parametrize("method", ["hcl", "shcl"])
def test_hyperbolic_outputs_lie_on_the_ball_at_distance_two(method):
    """With normalisation, every embedding is at hyperbolic distance 2 from the origin."""
    _, model = build(
        method, method_kwargs={"proj_hidden_dim": 16, "proj_output_dim": 8, "curvature": 0.5}
    )
    z = model(torch.randn(6, 3, 28, 28))["z"].double()
    c = 0.5
    dist0 = 2 / c**0.5 * torch.atanh(c**0.5 * z.norm(dim=-1))
    assert torch.allclose(dist0, torch.full_like(dist0, 2.0), atol=1e-4)


class EncoderGradients(adapter.LIGHTNING.Callback):
    """The encoder's gradient norm after each backward (the contrastive loss is its only
    source: solo's online classifier reads detached features)."""

    def __init__(self) -> None:
        self.norms: list[float] = []

    def on_after_backward(self, trainer, pl_module) -> None:
        grads = [p.grad for p in pl_module.encoder.parameters() if p.grad is not None]
        self.norms.append(float(sum(g.pow(2).sum() for g in grads)) ** 0.5 if grads else 0.0)


@pytest.mark.parametrize("method", METHODS)
def test_fast_dev_run_fit_trains_the_encoder_on_a_finite_logged_loss(method):
    prep, model = build(method)
    probe = EncoderGradients()
    trainer = adapter.LIGHTNING.Trainer(
        fast_dev_run=True, accelerator="cpu", devices=1, logger=False, callbacks=[probe],
        enable_progress_bar=False, enable_model_summary=False,
    )  # fmt: skip
    before = [p.detach().clone() for p in model.encoder.parameters()]
    train, val = fake_loaders()
    trainer.fit(model, train, val)
    after = list(model.encoder.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(after, before)), "encoder did not train"
    assert probe.norms and all(math.isfinite(n) and n > 0 for n in probe.norms), probe.norms
    loss = trainer.callback_metrics["train_nce_loss"]
    assert torch.isfinite(loss) and float(loss) > 0


def test_learnable_curvature_is_optimised():
    _, model = build(
        "hcl",
        method_kwargs={"proj_hidden_dim": 16, "proj_output_dim": 8, "learnable_curvature": True},
    )
    params = [p for group in model.learnable_params for p in group["params"]]
    assert any(p is model.projector.raw_curvature for p in params)
    c0 = float(model.projector.curvature)
    trainer = adapter.LIGHTNING.Trainer(
        fast_dev_run=2, accelerator="cpu", logger=False, enable_progress_bar=False,
        enable_model_summary=False,
    )  # fmt: skip
    trainer.fit(model, *fake_loaders())
    assert float(model.projector.curvature) != c0


def test_resnet18_gets_the_cifar_stem_on_small_images():
    _, model = build("hcl", backbone={"name": "resnet18", "kwargs": {}})
    assert model.encoder.conv1.kernel_size == (3, 3) and model.encoder.conv1.stride == (1, 1)
    assert isinstance(model.encoder.maxpool, torch.nn.Identity)
    out = model(torch.randn(2, 3, 28, 28))
    assert out["feats"].shape == (2, 512)


def test_resnet18_keeps_imagenet_stem_on_large_crops():
    prep = prepare(None, base=tiny_config(
        "hcl", backbone={"name": "resnet18", "kwargs": {}},
        data={"dataset": "custom", "image_size": 96, "train_path": ".", "val_path": "."},
        augmentations=[{"crop_size": 96, "num_crops": 2}],
    ))  # fmt: skip
    model = adapter.build_method(prep.cfg, 10, prep.small_images, prep.num_crops)
    assert model.encoder.conv1.kernel_size == (7, 7)


def test_supcon_is_simclr_supervised_and_hcl_is_not():
    _, supcon = build("supcon")
    _, shcl = build("shcl")
    _, hcl = build("hcl")
    if adapter.API.startswith("solo-learn main"):  # its own class, always supervised
        assert isinstance(supcon, adapter.SupCon) and not hasattr(supcon, "supervised")
    else:  # 1.0.2: SimCLR with supervised=True
        assert supcon.supervised is True
    assert shcl.args.supervised is True and hcl.args.supervised is False


def test_plugin_baseline_uses_the_small_cnn():
    _, model = build("simclr")
    from solo_hyper.backbones import SmallCNN

    assert isinstance(model.encoder, SmallCNN)
    assert model.projector[0].in_features == model.encoder.num_features


def test_multicrop_hcl_loss_is_infonce_over_every_crop():
    """The step's loss is the InfoNCE of all four crops (two large, two small) plus solo's online
    cross-entropy on the large ones; dropping or changing the small crops changes it."""
    prep, model = build(
        "hcl", augmentations=[{"crop_size": 28, "num_crops": 2}, {"crop_size": 16, "num_crops": 2}]
    )
    assert prep.num_crops == (2, 2)
    model = model.double().eval()  # running BatchNorm statistics: each crop's z stands alone
    g = torch.Generator().manual_seed(0)
    indexes, targets = torch.arange(8), torch.randint(0, 10, (8,), generator=g)
    sizes = (28, 28, 16, 16)
    crops = [torch.rand(8, 3, s, s, generator=g, dtype=torch.float64) for s in sizes]
    with torch.no_grad():
        loss = model.training_step([indexes, crops, targets], 0)
        feats = [model.encoder(x) for x in crops]
        z = [model.projector(f) for f in feats]
        ce = sum(F.cross_entropy(model.classifier(f), targets) for f in feats[:2]) / 2
        tau, space = model.args.temperature, model.embedding_space
        every_crop = contrastive_loss(torch.cat(z), indexes.repeat(4), tau, space)
        large_only = contrastive_loss(torch.cat(z[:2]), indexes.repeat(2), tau, space)
        other_small = [torch.rand(8, 3, 16, 16, generator=g, dtype=torch.float64) for _ in "ab"]
        changed = model.training_step([indexes, crops[:2] + other_small, targets], 0)
    assert abs(float(every_crop - large_only)) > 1e-3
    torch.testing.assert_close(loss, every_crop + ce, rtol=1e-9, atol=1e-9)
    assert abs(float(changed - loss)) > 1e-6


def test_online_knn_starts_afresh_every_epoch():
    _, model = build("hcl")
    trainer = adapter.LIGHTNING.Trainer(
        max_epochs=2, accelerator="cpu", logger=False, enable_progress_bar=False,
        enable_model_summary=False, enable_checkpointing=False, num_sanity_val_steps=0,
    )  # fmt: skip
    trainer.fit(model, *fake_loaders())
    assert len(model.knn.train_features) == 0, "the metric is reset after each validation"
    top = 100.0 if adapter.KNN_PERCENT else 1.0  # as the installed solo-learn logs it
    assert 0.0 <= float(trainer.callback_metrics["val_knn_acc1"]) <= top
