"""Every method of this plugin under solo-learn's own method test utilities
(``tests/methods/utils.py`` of the vendored sources of the installed solo-learn): its base
kwargs (1.0.2) or cfg (main) with only the method's defaults added, ``gen_batch``,
``prepare_dummy_dataloaders`` (solo's CPU pipeline: normalised crops) and a fast_dev_run fit.

The vendored "1.0.2" tarball (dated 2021-09, setup.py version 0.0.9) predates the PyPI 1.0.2
that the 1.0.2 adapter runs on: its harness uses three names that PyPI 1.0.2 renamed
(``num_crops`` -> ``num_large_crops``, ``disable_knn_eval`` -> ``knn_eval``, a ``multicrop``
flag) and an older ``prepare_transform`` / ``prepare_n_crop_transform`` signature. ``_RENAMED``
maps them, and nothing else is changed.
"""

from __future__ import annotations

import argparse
import sys

import pytest
import torch
from vendored import load_module, unpack

import solo_hyper.methods  # noqa: F401  (registers the methods)
from solo_hyper.methods import DECLARED
from solo_hyper.solo import adapter

MAIN = adapter.API.startswith("solo-learn main")
VERSION = "main" if MAIN else "1.0.2"


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    """solo's tests/methods/utils.py of the installed solo-learn version."""
    root = unpack(VERSION, tmp_path_factory.mktemp("solo-src"))
    path = root / "tests" / "methods" / "utils.py"
    if MAIN:
        return load_module(path, "solo_method_test_utils")
    return _load_102_harness(path)


def _load_102_harness(path):
    import solo.utils.pretrain_dataloader as data

    installed = (data.prepare_transform, data.prepare_n_crop_transform)

    def prepare_transform(dataset, multicrop=False, **kwargs):
        assert not multicrop, "the harness is used without multicrop here"
        return installed[0](dataset, **kwargs)

    def prepare_n_crop_transform(transform, num_crops):
        return installed[1]([transform], [num_crops])

    def prepare_multicrop_transform(*args, **kwargs):
        raise NotImplementedError("multicrop: not used")

    renamed = {
        "prepare_transform": prepare_transform,
        "prepare_n_crop_transform": prepare_n_crop_transform,
        "prepare_multicrop_transform": prepare_multicrop_transform,
    }
    saved = {name: getattr(data, name, None) for name in renamed}
    for name, fn in renamed.items():
        setattr(data, name, fn)
    try:  # the harness binds these names at import; the installed module gets its own back
        return load_module(path, "solo_method_test_utils_102")
    finally:
        for name, fn in saved.items():
            if fn is None:
                delattr(data, name)
            else:
                setattr(data, name, fn)


def _renamed(kwargs: dict) -> dict:
    """The 0.0.9-era harness kwargs in PyPI 1.0.2's names (see the module docstring)."""
    out = dict(kwargs)
    out["num_large_crops"] = out.pop("num_crops")
    out.pop("multicrop")
    out["knn_eval"] = not out.pop("disable_knn_eval", True)
    return out


BUFFER = 16  # EBCLR's replay buffer here


class GradientProbe(adapter.LIGHTNING.Callback):
    """Whether a step's loss reached the backbone (the harness's warmup may start at lr 0)."""

    reached = False

    def on_after_backward(self, trainer, pl_module) -> None:
        backbone = pl_module.backbone if MAIN else pl_module.encoder
        grads = [p.grad for p in backbone.parameters() if p.grad is not None]
        self.reached = bool(grads) and any(bool(g.abs().sum() > 0) for g in grads)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(DECLARED))
def test_method_passes_solos_own_harness(name, harness, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # Lightning's default root
    cls = adapter.registered_methods()[name]
    defaults = dict(adapter.method_info(name).defaults)
    if name == "ebclr":  # its buffer is filled before the first step: 50,000 solo crops by default
        defaults["buffer_size"] = BUFFER
    if MAIN:
        cfg = harness.gen_base_cfg(name, batch_size=2, num_classes=10)
        cfg.method_kwargs = dict(defaults)
        model = cls(cfg)
        model.add_and_assert_specific_cfg(cfg)
        batch, _ = harness.gen_batch(2, 10, "cifar10")
        probe = GradientProbe()
        trainer = harness.gen_trainer(cfg, callbacks=probe)
        crops = cfg.data.num_large_crops
    else:
        base = harness.gen_base_kwargs(cifar=True, batch_size=2)
        kwargs = _renamed({**base, **harness.DATA_KWARGS, **defaults, "disable_knn_eval": True})
        model = cls(method=name, **kwargs)  # solo 1.0.2's launcher passes its args, method too
        assert model.add_model_specific_args(argparse.ArgumentParser()) is not None
        batch, _ = harness.gen_batch(2, base["num_classes"], "cifar10")
        pl = adapter.LIGHTNING
        probe = GradientProbe()
        trainer = pl.Trainer.from_argparse_args(
            argparse.Namespace(**kwargs), fast_dev_run=True, callbacks=[probe]
        )
        crops = base["num_crops"]
    assert model.learnable_params is not None
    out = model(batch[1][0])
    assert out["logits"].shape == (2, 10) and out["feats"].shape == (2, model.features_dim)
    assert out["z"].shape == (2, defaults["proj_output_dim"])

    train_dl, val_dl = harness.prepare_dummy_dataloaders(
        "cifar10", crops, num_classes=10, batch_size=2
    ) if MAIN else harness.prepare_dummy_dataloaders(
        "cifar10", num_crops=crops, num_classes=10, multicrop=False, batch_size=2
    )  # fmt: skip
    trainer.fit(model, train_dl, val_dl)
    assert trainer.global_step == 1 and probe.reached
    losses = {k: v for k, v in trainer.callback_metrics.items() if k.startswith("train_")}
    assert losses and all(torch.isfinite(v) for v in losses.values()), losses
    assert model.device_augmentation is None  # solo's pipeline made the crops
    if name == "ebclr":  # configure_callbacks attached the buffer, filled from solo's dataset
        (buffer,) = [c for c in trainer.callbacks if type(c).__name__ == "MSGLDReplayBuffer"]
        counts = buffer.buffer.counts
        assert buffer.buffer.samples.shape[0] == BUFFER and counts.shape == (BUFFER,)
        # one step of 2 chains: the others keep the initial count
        assert int((counts == defaults["buffer_init_count"]).sum()) >= BUFFER - 2
    sys.modules.pop("solo_method_test_utils", None)
