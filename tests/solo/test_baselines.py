"""solo-learn's bundled methods as baselines: every one the installed solo-learn ships trains with
this plugin's backbones and pipeline, its defaults are solo's published values, and the fixes
of solo_hyper.solo.compat do what they say."""

from __future__ import annotations

import argparse
import inspect
import re
import tarfile
from pathlib import Path

import pytest
import torch
import yaml
from conftest import fake_loaders, tiny_config
from vendored import tarball

import solo_hyper.methods  # noqa: F401  (registers the methods)
from solo_hyper.backbones import SmallCNN
from solo_hyper.config import ConfigError
from solo_hyper.run.train import prepare
from solo_hyper.solo import adapter, detect_api
from solo_hyper.solo.baselines import (
    BASELINES,
    NOT_METHODS,
    VERSION,
    baseline_defaults,
    unknown_method_message,
)
from solo_hyper.solo.compat import CholeskyWhitening

ROOT = Path(__file__).resolve().parents[2]
FMNIST = ROOT / "configs" / "pretrain" / "fashionmnist"
API = detect_api(__import__("solo.methods.base", fromlist=["BaseMethod"]).BaseMethod)
INSTALLED = sorted(name for name, b in BASELINES.items() if API in b.apis)
# mae (solo main) reconstructs ViT patches: not with the small CNN (its config check is tested)
TRAINABLE = [name for name in INSTALLED if name != "mae"]
ELSEWHERE = sorted(name for name, b in BASELINES.items() if API not in b.apis)
# baselines with a Fashion-MNIST config (mae needs a ViT; main-only ones need solo main)
SHIPPED = sorted(name for name, b in BASELINES.items() if "v1" in b.apis)

# tiny heads for fast CPU runs; queue sizes stay multiples of the batch (16)
TINY_KWARGS = {
    "proj_hidden_dim": 16, "proj_output_dim": 8, "pred_hidden_dim": 16, "queue_size": 64,
    "num_prototypes": 10, "decoder_embed_dim": 16, "decoder_depth": 1, "decoder_num_heads": 2,
}  # fmt: skip
SPECIAL_KWARGS = {
    "deepclusterv2": {"num_prototypes": [10, 10]},
    "dino": {"warmup_teacher_temperature_epochs": 0},
    "wmse": {"proj_output_dim": 4, "whitening_size": 8},
}


def tiny_baseline(name: str, **sections) -> dict:
    defaults = baseline_defaults(name, API)
    kwargs = {k: v for k, v in TINY_KWARGS.items() if k in defaults}
    kwargs.update(SPECIAL_KWARGS.get(name, {}))
    return tiny_config(name, method_kwargs=kwargs, **sections)


def build(name: str, **sections):
    prep = prepare(None, base=tiny_baseline(name, **sections))
    return prep, adapter.build_method(prep.cfg, 10, prep.small_images, prep.num_crops)


def quiet_trainer(**kwargs):
    return adapter.LIGHTNING.Trainer(
        accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
        enable_model_summary=False, enable_checkpointing=False, **kwargs,
    )  # fmt: skip


# ------------------------------------------------------------------------------ training
@pytest.mark.parametrize("name", TRAINABLE)
def test_every_installed_baseline_fits_with_our_backbone(name):
    # DeepCluster V2 has no cluster assignments (no loss) in its first epoch: it trains two,
    # at a constant rate (a cosine schedule would end the second one at lr 0)
    deepcluster = name == "deepclusterv2"
    _, model = build(name, **({"scheduler": {"name": "none"}} if deepcluster else {}))
    assert isinstance(model.encoder, SmallCNN)
    before = [p.detach().clone() for p in model.encoder.parameters()]
    trainer = (
        quiet_trainer(max_epochs=2, limit_train_batches=2, limit_val_batches=1)
        if deepcluster
        else quiet_trainer(fast_dev_run=True)
    )
    trainer.fit(model, *fake_loaders())
    metrics = {k: v for k, v in trainer.callback_metrics.items() if v.numel() == 1}
    assert "train_class_loss" in metrics and "val_acc1" in metrics
    assert all(torch.isfinite(v) for v in metrics.values()), metrics
    after = list(model.encoder.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(after, before)), "backbone did not train"


@pytest.mark.parametrize("name", [n for n in ("byol", "dino", "mocov2plus") if n in INSTALLED])
def test_momentum_backbone_is_an_ema_copy_of_ours(name):
    _, model = build(name)
    online, momentum = model.encoder, model.momentum_encoder
    assert type(momentum) is type(online) and momentum is not online
    for p, m in zip(online.parameters(), momentum.parameters()):
        assert torch.equal(p, m) and not m.requires_grad
    start = [m.detach().clone() for m in momentum.parameters()]
    quiet_trainer(max_steps=2, limit_val_batches=0).fit(model, fake_loaders()[0])
    moved = [not torch.equal(a, b) for a, b in zip(momentum.parameters(), start)]
    assert any(moved), "the momentum backbone was not updated (on_train_batch_end)"
    # an EMA with tau < 1 sits strictly between its start and the online weights
    assert any(not torch.equal(p, m) for p, m in zip(online.parameters(), momentum.parameters()))


@pytest.mark.parametrize("name", TRAINABLE)
def test_every_baseline_returns_its_projection_as_z(name):
    _, model = build(name)
    model.eval()
    out = model(torch.randn(4, 3, 28, 28))
    assert out["z"].shape[0] == 4 and out["z"].dim() == 2


def test_deepcluster_first_epoch_loss_is_zero_not_nan():
    _, model = build("deepclusterv2")
    trainer = quiet_trainer(max_epochs=1, limit_train_batches=2, limit_val_batches=0)
    trainer.fit(model, fake_loaders()[0])
    assert float(trainer.callback_metrics["train_deepcluster_loss"]) == 0.0


@pytest.mark.parametrize("name", ["swav", "deepclusterv2"])
def test_checkpoint_with_train_start_buffers_loads_for_evaluation(name, tmp_path):
    from solo_hyper.run.checkpoints import load_pretrained

    _, model = build(name)
    trainer = quiet_trainer(max_steps=1, limit_val_batches=0)
    trainer.fit(model, fake_loaders()[0])
    trainer.save_checkpoint(tmp_path / "run.ckpt")
    loaded, _, _ = load_pretrained(tmp_path / "run.ckpt", expect_method=name)
    for key, value in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], value), key


def test_cholesky_whitening_equals_solos_whitening2d(monkeypatch):
    from solo.utils.whitening import Whitening2d

    g = torch.Generator().manual_seed(0)
    mixing = torch.eye(6) + 0.3 * torch.randn(6, 6, generator=g)  # well conditioned
    x = torch.randn(64, 6, generator=g) @ mixing + 3.0
    ours = CholeskyWhitening(6, eps=0.1)(x)
    # solo's own module, given back the function torch 2 removed
    monkeypatch.setattr(torch, "cholesky", torch.linalg.cholesky, raising=False)
    theirs = Whitening2d(6, eps=0.1)(x)
    assert torch.allclose(ours, theirs, atol=1e-5)
    plain = CholeskyWhitening(6)(x)
    cov = plain.T @ plain / (x.shape[0] - 1)
    assert torch.allclose(cov, torch.eye(6), atol=1e-4)


# ------------------------------------------------------------------------------ SimCLR loss
@pytest.mark.parametrize("name", ["simclr", "supcon"])
def test_simclr_and_supcon_loss_is_solos_on_one_process(name):
    from solo.losses.simclr import simclr_loss_func

    _, model = build(name)
    g = torch.Generator().manual_seed(1)
    feats = [torch.randn(12, model.features_dim, generator=g) for _ in range(2)]
    indexes, targets = torch.arange(12), torch.randint(0, 3, (12,), generator=g)
    ours = model.gathered_nce_loss(feats, indexes, targets)
    z1, z2 = (model.projector(f) for f in feats)
    if name == "supcon":
        labels = targets.repeat(2)
        extra = (labels[:, None] == labels[None, :]).fill_diagonal_(False)
        theirs = simclr_loss_func(z1, z2, temperature=model.temperature, extra_pos_mask=extra)
    else:
        theirs = simclr_loss_func(z1, z2, temperature=model.temperature)
    assert torch.allclose(ours, theirs, atol=1e-5)


# ------------------------------------------------------------------------------ the table
def _constructor_keys_v1(cls: type) -> set[str]:
    from solo.methods.base import BaseMethod

    def dests(klass):
        parser = argparse.ArgumentParser(add_help=False)
        klass.add_model_specific_args(parser)
        return {a.dest for a in parser._actions}

    return dests(cls) - dests(BaseMethod)


def _method_kwargs_read_by(source: str) -> set[str]:
    return set(re.findall(r"method_kwargs\.(\w+)", source))


@pytest.mark.parametrize("name", INSTALLED)
def test_table_keys_are_the_installed_methods_arguments(name):
    from solo.methods import METHODS

    cls = METHODS[name] if name in METHODS else adapter.registered_methods()[name]
    if API == "v1":
        expected = _constructor_keys_v1(cls)
    else:
        expected = set()
        for klass in cls.__mro__:
            if klass.__module__.startswith("solo.methods") and klass.__name__ != "BaseMethod":
                expected |= _method_kwargs_read_by(inspect.getsource(klass))
    if API == "v2" and BASELINES[name].momentum is not None:
        expected |= {"base_tau_momentum", "final_tau_momentum"}  # moved into cfg.momentum
    assert set(baseline_defaults(name, API)) == expected
    assert set(adapter.method_info(name).defaults) == expected


def test_registered_methods_are_exactly_ours_and_the_installed_baselines():
    from solo_hyper.methods import CLASSES

    methods = set(adapter.registered_methods())
    assert not methods & set(NOT_METHODS)
    assert methods == set(CLASSES) | set(INSTALLED)


def _published(version: str) -> dict[str, str]:
    """{path inside the archive: text} of solo-learn <version>'s method sources and scripts."""
    out = {}
    with tarfile.open(tarball(version)) as tar:
        for member in tar.getmembers():
            wanted = ("/bash_files/pretrain/cifar/", "/scripts/pretrain/cifar/", "/solo/methods/")
            if member.isfile() and any(w in member.name for w in wanted):
                out[member.name.split("/", 1)[1]] = tar.extractfile(member).read().decode()
    return out


def _bash_flags(script: str) -> dict[str, object]:
    """``--key value [value ...]`` / ``--flag`` of one of 1.0.2's launch scripts."""
    flags: dict[str, object] = {}
    for key, raw in re.findall(r"--(\w+)((?:\s+[^-\s\\][^\s\\]*)*)", script):
        values = [yaml.safe_load(v) for v in raw.split()]
        flags[key] = True if not values else values[0] if len(values) == 1 else values
    return flags


def test_table_holds_solo_1_0_2_published_values():
    files = _published("1.0.2")
    scripts = {}
    for path, text in files.items():
        if path.startswith("bash_files/pretrain/cifar/"):
            flags = _bash_flags(text)
            scripts[flags["method"]] = flags
    for name, entry in BASELINES.items():
        # 1.0.2 has no SupCon of its own: solo_hyper registers SimCLR with supervised=True
        assert ("v1" in entry.apis and name != "supcon") == (name in scripts), name
        if name not in scripts:
            continue
        assert f"solo/methods/{name}.py" in files
        defaults = baseline_defaults(name, "v1")
        published = {k: v for k, v in scripts[name].items() if k in defaults}
        assert published and all(defaults[k] == v for k, v in published.items()), name


def test_table_holds_solo_main_published_values():
    files = _published("main")
    for name, entry in BASELINES.items():
        yaml_path = f"scripts/pretrain/cifar/{'barlow' if name == 'barlow_twins' else name}.yaml"
        assert ("v2" in entry.apis) == (yaml_path in files), name
        if "v2" not in entry.apis:
            continue
        published = yaml.safe_load(files[yaml_path])
        assert published["method"] == name
        defaults = baseline_defaults(name, "v2")
        source = files[f"solo/methods/{name}.py"]
        schedule = {"base_tau_momentum", "final_tau_momentum"} if entry.momentum else set()
        assert set(defaults) == _method_kwargs_read_by(source) | schedule, name
        for key, value in published["method_kwargs"].items():
            if key in defaults:
                assert defaults[key] == value, (name, key)
        if entry.momentum is not None:
            momentum = published["momentum"]
            assert entry.momentum == (momentum["base_tau"], momentum["final_tau"]), name


# ------------------------------------------------------------------------------ configs
@pytest.mark.parametrize("name", SHIPPED)
def test_fashionmnist_config_shares_simclrs_budget(name):
    path = FMNIST / f"{name}.yaml"
    cfg = yaml.safe_load(path.read_text())
    reference = yaml.safe_load((FMNIST / "simclr.yaml").read_text())
    differs = {k for k in set(cfg) | set(reference) if cfg.get(k) != reference.get(k)}
    # each method's own recipe and views: tests/solo/test_baseline_recipes.py
    assert differs <= {"name", "method", "method_kwargs", "optimizer", "scheduler", "augmentations"}
    assert cfg["optimizer"]["batch_size"] == reference["optimizer"]["batch_size"]
    assert cfg["scheduler"]["name"] == reference["scheduler"]["name"]
    assert cfg["method"] == name
    assert set(cfg["method_kwargs"]) <= set(baseline_defaults(name, "v1"))
    if name in INSTALLED:
        prep = prepare(str(path))
        assert prep.cfg["method_kwargs"]["proj_hidden_dim"] <= 512


# ------------------------------------------------------------------------------ bad input
def test_base_and_linear_are_not_methods():
    for name in NOT_METHODS:
        with pytest.raises(ConfigError, match="not a pretraining method"):
            prepare(None, base=tiny_config(name))


@pytest.mark.parametrize("name", ELSEWHERE)
def test_a_baseline_of_another_solo_version_says_which(name):
    other = VERSION[BASELINES[name].apis[0]]
    with pytest.raises(ConfigError, match=rf"{name} is a solo-learn {other} method[^;]*; this "
                       rf"installation has solo-learn {VERSION[API]}"):  # fmt: skip
        prepare(None, base=tiny_config(name))


def test_unknown_names_keep_the_closest_name_hint():
    message = unknown_method_message("bayol", adapter.registered_methods())
    assert "unknown method 'bayol'" in message and "did you mean 'byol'" in message
    assert "'base'" not in message and "'linear'" not in message
