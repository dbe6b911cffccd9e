"""Every method in the solo-learn style: build from config, forward keys/shapes, a fast_dev_run fit."""

from __future__ import annotations

import pytest
import torch
from conftest import fake_loaders, tiny_config

import solo_hyper.methods  # noqa: F401  (registers the methods)
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


@pytest.mark.parametrize("method", METHODS)
def test_fast_dev_run_fit(method):
    prep, model = build(method)
    trainer = adapter.LIGHTNING.Trainer(
        fast_dev_run=True, accelerator="cpu", devices=1, logger=False,
        enable_progress_bar=False, enable_model_summary=False,
    )  # fmt: skip
    before = [p.detach().clone() for p in model.encoder.parameters()]
    train, val = fake_loaders()
    trainer.fit(model, train, val)
    after = list(model.encoder.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(after, before)), "encoder did not train"
    assert (
        torch.isfinite(trainer.callback_metrics["train_nce_loss"])
        if method in ("hcl", "shcl")
        else True
    )


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


def test_multicrop_hcl_uses_every_crop():
    prep, model = build(
        "hcl", augmentations=[{"crop_size": 28, "num_crops": 2}, {"crop_size": 16, "num_crops": 2}]
    )
    assert prep.num_crops == (2, 2)
    trainer = adapter.LIGHTNING.Trainer(
        fast_dev_run=True, accelerator="cpu", logger=False, enable_progress_bar=False,
        enable_model_summary=False,
    )  # fmt: skip
    trainer.fit(model, *fake_loaders())
    assert torch.isfinite(trainer.callback_metrics["train_nce_loss"])


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
