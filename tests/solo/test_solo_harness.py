"""Every method of this plugin under solo-learn's own method tests, run as solo runs them: the
``tests/methods/utils.py`` of the installed solo-learn's sources (1.0.2: the PyPI release's,
``solo-learn-1.0.2-pypi.tar.gz``; main: the vendored main), ``METHODS[name]`` built from solo's
base kwargs (1.0.2, with ``disable_knn_eval=True`` as solo's tests pass it) or base cfg (main) and
the method's own defaults, solo's ``gen_batch``, its 224-px ImageNet-100 ``prepare_dummy_dataloaders``
(solo's CPU pipeline: normalised crops) and a fast_dev_run fit. Nothing of solo's is renamed,
added or lowered: EBCLR's replay buffer takes its default size for 224-px crops.
"""

from __future__ import annotations

import argparse

import pytest
import torch
from solo.methods import METHODS
from vendored import load_module, unpack

import solo_hyper.methods  # noqa: F401  (registers the methods)
from solo_hyper.methods import CLASSES
from solo_hyper.sgld import default_capacity
from solo_hyper.solo import adapter

MAIN = adapter.API.startswith("solo-learn main")
VERSION = "main" if MAIN else "1.0.2"
pl = adapter.LIGHTNING


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    """solo's tests/methods/utils.py of the installed solo-learn version, as it is."""
    root = unpack(VERSION, tmp_path_factory.mktemp("solo-src"))
    return load_module(root / "tests" / "methods" / "utils.py", f"solo_method_test_utils_{VERSION}")


class GradientProbe(pl.Callback):
    """Whether a step's loss reached the backbone (the harness's warmup may start at lr 0)."""

    reached = False

    def on_after_backward(self, trainer, pl_module) -> None:
        backbone = pl_module.backbone if MAIN else pl_module.encoder
        grads = [p.grad for p in backbone.parameters() if p.grad is not None]
        self.reached = bool(grads) and any(bool(g.abs().sum() > 0) for g in grads)


def build_as_solo(name: str, method_kwargs: dict, harness):
    """The model, its trainer and solo's loaders, each made as solo's own method tests make them."""
    probe = GradientProbe()
    if MAIN:
        cfg = harness.gen_base_cfg(name, batch_size=2, num_classes=100)
        cfg.method_kwargs = dict(method_kwargs)
        model = METHODS[name](cfg)
        model.add_and_assert_specific_cfg(cfg)
        trainer = harness.gen_trainer(cfg, callbacks=probe)
        loaders = harness.prepare_dummy_dataloaders(
            "imagenet100", num_large_crops=cfg.data.num_large_crops, num_small_crops=0,
            num_classes=cfg.data.num_classes, batch_size=cfg.optimizer.batch_size,
        )  # fmt: skip
        return model, trainer, loaders, probe
    base = harness.gen_base_kwargs(cifar=False, batch_size=2)
    kwargs = {**base, **harness.DATA_KWARGS, **method_kwargs}
    model = METHODS[name](**kwargs, disable_knn_eval=True)
    parser = pl.Trainer.add_argparse_args(argparse.ArgumentParser())
    assert model.add_model_specific_args(parser) is not None
    trainer = pl.Trainer.from_argparse_args(
        argparse.Namespace(**kwargs), fast_dev_run=True, callbacks=[probe]
    )
    loaders = harness.prepare_dummy_dataloaders(
        "imagenet100", num_large_crops=base["num_large_crops"], num_small_crops=0,
        num_classes=base["num_classes"], multicrop=False, batch_size=base["batch_size"],
    )  # fmt: skip
    return model, trainer, loaders, probe


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CLASSES))
def test_method_passes_solos_own_harness(name, harness, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # Lightning's default root
    method_kwargs = CLASSES[name].OBJECTIVE.Args.defaults()
    if name == "supervised":  # its classifier has the data's classes (solo's dummy data: 100)
        method_kwargs["classes"] = 100
    model, trainer, (train_dl, val_dl), probe = build_as_solo(name, method_kwargs, harness)
    assert type(model) is METHODS[name] and model.method == name
    assert model.learnable_params is not None
    batch, _ = harness.gen_batch(2, 100, "imagenet100")
    out = model(batch[1][0])
    assert out["logits"].shape == (2, 100) and out["feats"].shape == (2, model.features_dim)
    assert out["z"].shape == (2, method_kwargs.get("proj_output_dim", method_kwargs.get("classes")))
    if MAIN:
        assert model.multicrop_forward(batch[1][0])["z"].shape == out["z"].shape

    trainer.fit(model, train_dl, val_dl)
    assert trainer.global_step == 1 and probe.reached
    losses = {k: v for k, v in trainer.callback_metrics.items() if k.startswith("train_")}
    assert losses and all(torch.isfinite(v) for v in losses.values()), losses
    assert model.device_augmentation is None  # solo's pipeline made the crops
    if name == "ebclr":  # configure_callbacks attached the buffer, filled from solo's dataset
        (buffer,) = [c for c in trainer.callbacks if type(c).__name__ == "MSGLDReplayBuffer"]
        size = default_capacity((3, 224, 224))  # the official buffer's memory at 224 px
        assert buffer.buffer.samples.shape == (size, 3, 224, 224) and size < 50_000
        counts = buffer.buffer.counts
        # one step of 2 chains: the others keep the initial count
        assert int((counts == method_kwargs["buffer_init_count"]).sum()) >= size - 2


def test_a_launchers_method_must_agree_with_the_class():
    """solo's launchers pass ``method`` (1.0.2) or ``cfg.method`` (main); another method's class
    is refused, naming both."""
    cls = METHODS["hcl"]
    assert cls.method_name("hcl") == "hcl" and cls.method_name(None) == "hcl"
    with pytest.raises(ValueError, match="builds method 'hcl', got method='shcl'"):
        cls.method_name("shcl")
    with pytest.raises(TypeError, match="base of this plugin's methods"):
        adapter.ObjectiveMethod.method_name("hcl")
