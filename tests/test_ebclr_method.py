"""EBCLR as a solo-learn method and its MSGLD replay-buffer callback (solo-learn test style)."""

from __future__ import annotations

import io
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml
from conftest import fake_loaders, tiny_config

import solo_hyper.methods  # noqa: F401  (registers the methods)
from solo_hyper.augment import to_float_rgb
from solo_hyper.callbacks import MSGLDReplayBuffer
from solo_hyper.config import ConfigError
from solo_hyper.methods.ebclr import EBCLR
from solo_hyper.run.train import prepare, pretrain
from solo_hyper.solo import adapter

pl = adapter.LIGHTNING
SMALL = {"proj_hidden_dim": 16, "proj_output_dim": 8, "buffer_size": 64, "sgld_steps": 2}
EXACT = "donot_use_mm_for_euclid_dist"
PLAIN_CROP = {  # no randomness: a crop is the (resized) image itself
    "rrc": {"enabled": False},
    "color_jitter": {"prob": 0.0},
    "grayscale": {"prob": 0.0},
    "horizontal_flip": {"prob": 0.0},
    "crop_size": 28,
    "num_crops": 2,
}


def build(method_kwargs: dict | None = None, **sections) -> EBCLR:
    cfg = tiny_config("ebclr", method_kwargs={**SMALL, **(method_kwargs or {})}, **sections)
    prep = prepare(None, base=cfg)
    return adapter.build_method(prep.cfg, 10, prep.small_images, prep.num_crops)


def quiet_trainer(**kwargs) -> pl.Trainer:
    return pl.Trainer(
        accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
        enable_model_summary=False, **kwargs,
    )  # fmt: skip


def start(callback: MSGLDReplayBuffer, model: EBCLR, loader) -> None:
    """The callback's on_train_start outside a Trainer (rank 0, step 0)."""
    trainer = SimpleNamespace(global_rank=0, global_step=0, train_dataloader=loader)
    callback.on_train_start(trainer, model)


def step(callback: MSGLDReplayBuffer, batch_size: int, shift: float) -> None:
    """One training step as the callback sees it; the 'SGLD output' is the start plus shift."""
    chains = callback.draw(torch.zeros(batch_size, *callback.buffer.shape))
    chains.write_back(chains.x + shift)


class Probe(pl.Callback):
    """Records each step's chains as the buffer hands them to the method (draw) and as the
    method writes them back (write_back, with the slots they go to)."""

    def __init__(self) -> None:
        self.steps: list[dict] = []
        self.first_state: dict | None = None

    def buffer_callback(self, trainer) -> MSGLDReplayBuffer:
        return next(c for c in trainer.callbacks if isinstance(c, MSGLDReplayBuffer))

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx, *args) -> None:
        if self.first_state is None:  # restored (or filled) by on_train_start, not yet drawn from
            cb = self.buffer_callback(trainer)
            self.first_state = clone_state(cb.state_dict())
            self.watch(cb)

    def watch(self, cb: MSGLDReplayBuffer) -> None:
        draw = cb.draw

        def recording_draw(crops):
            chains = draw(crops)  # a growing buffer exists from the first draw on
            if not getattr(cb.buffer, "recorded", False):
                update = cb.buffer.update

                def recording_update(slots, x):
                    self.steps[-1].update(slots=slots.clone(), result=x.clone())
                    update(slots, x)

                cb.buffer.update, cb.buffer.recorded = recording_update, True
            self.steps.append({"x": chains.x.clone(), "counts": chains.counts.clone()})
            return chains

        cb.draw = recording_draw


def clone_state(state):
    """A deep copy through torch.save, as a checkpoint stores it."""
    f = io.BytesIO()
    torch.save(state, f)
    f.seek(0)
    return torch.load(f, weights_only=False)


def assert_same_state(a: dict, b: dict) -> None:
    a, b = a.get("ranks", [a])[0], b.get("ranks", [b])[0]
    assert torch.equal(a["buffer"]["samples"], b["buffer"]["samples"])
    assert torch.equal(a["buffer"]["counts"], b["buffer"]["counts"])
    assert torch.equal(a["buffer"]["generator_state"], b["buffer"]["generator_state"])
    assert torch.equal(a["proposal"]["index_generator"], b["proposal"]["index_generator"])
    assert torch.equal(a["proposal"]["rng"]["cpu"], b["proposal"]["rng"]["cpu"])
    assert torch.equal(a["noise_generator"]["state"], b["noise_generator"]["state"])


# ------------------------------------------------------------------ the method


def test_registered_and_forward_keys_with_the_reference_projector():
    from solo.methods import METHODS

    assert METHODS["ebclr"] is EBCLR
    model = build()
    out = model(torch.randn(4, 3, 28, 28))
    assert {"logits", "feats", "z"} <= set(out)
    assert out["logits"].shape == (4, 10) and out["z"].shape == (4, 8)
    layers = list(model.projector.mlp)
    assert isinstance(layers[1], torch.nn.LeakyReLU) and layers[1].negative_slope == 0.2
    assert not any(isinstance(m, torch.nn.BatchNorm1d) for m in model.projector.modules())
    relu = build({"projector_activation": "relu"})
    assert isinstance(list(relu.projector.mlp)[1], torch.nn.ReLU)


@pytest.mark.parametrize(
    "space_kwargs",
    [{"distance": "sq_euclidean"}, {"geometry": "poincare"}, {"geometry": "lorentz"},
     {"geometry": "poincare", "chunk_size": 3}],
)  # fmt: skip
def test_fast_dev_run_fit_writes_the_sgld_outputs_back(space_kwargs):
    model = build({**space_kwargs, "rho": 0.5})
    probe = Probe()
    buffer_cb, *_ = model.extra_callbacks()
    trainer = quiet_trainer(fast_dev_run=1, callbacks=[probe, buffer_cb])
    before = [p.detach().clone() for p in model.encoder.parameters()]
    trainer.fit(model, *fake_loaders())
    assert any(not torch.equal(a, b) for a, b in zip(model.encoder.parameters(), before))
    for key in ("train_ebclr_loss", "train_ebclr_disc", "train_ebclr_gen", "val_knn_acc1"):
        assert torch.isfinite(trainer.callback_metrics[key]), key

    (s,) = probe.steps
    initial = probe.first_state["ranks"][0]["buffer"]
    buf = buffer_cb.buffer
    assert not torch.equal(s["result"], s["x"])  # the chains moved
    assert set(s["counts"].tolist()) <= {0.0, 5.0}  # restarted (0) or initial buffer (5)
    # last write wins for a slot drawn twice
    last = {int(slot): i for i, slot in enumerate(s["slots"])}
    for slot, i in last.items():
        assert torch.equal(buf.samples[slot], s["result"][i])
        assert buf.counts[slot] == s["counts"][i] + 1
    untouched = torch.ones(buf.capacity, dtype=torch.bool)
    untouched[list(last)] = False
    assert torch.equal(buf.samples[untouched], initial["samples"][untouched])
    assert torch.all(buf.counts[untouched] == 5.0)
    assert not hasattr(model, "sgld_chains")  # no per-step state on the module


def test_a_trainer_built_without_the_callback_gets_it_from_the_method():
    """configure_callbacks attaches the replay buffer under any Trainer (solo's launchers)."""
    model = build()
    trainer = quiet_trainer(fast_dev_run=2)
    assert not any(isinstance(c, MSGLDReplayBuffer) for c in trainer.callbacks)
    trainer.fit(model, *fake_loaders())
    (cb,) = [c for c in trainer.callbacks if isinstance(c, MSGLDReplayBuffer)]
    assert cb.buffer.initialized and cb.buffer.counts.max() > 5.0  # drawn from twice
    assert torch.isfinite(trainer.callback_metrics["train_ebclr_loss"])


def test_the_method_says_how_to_get_a_buffer_outside_a_trainer():
    model = build()
    batch = [torch.arange(4), [torch.zeros(4, 3, 28, 28)] * 2, torch.zeros(4, dtype=torch.long)]
    with pytest.raises(RuntimeError, match="MSGLDReplayBuffer.*Trainer.fit"):
        model.prepare_step(batch)


def solo_crop_loaders(n: int = 32, batch_size: int = 8, size: int = 28):
    """Loaders as solo's CPU pipeline gives them: two normalised float crops per image."""
    from torch.utils.data import DataLoader, Dataset

    g = torch.Generator().manual_seed(1)
    crops = torch.randn(n, 2, 3, size, size, generator=g)

    class Crops(Dataset):
        def __len__(self):
            return n

        def __getitem__(self, i):
            return i, [crops[i, 0], crops[i, 1]], i % 10

    class Val(Dataset):
        def __len__(self):
            return n // 2

        def __getitem__(self, i):
            return crops[i, 0], i % 10

    return DataLoader(Crops(), batch_size=batch_size, drop_last=True), DataLoader(
        Val(), batch_size=batch_size
    ), crops


@pytest.mark.parametrize("proposal", ["data", "uniform"])
def test_crops_from_solos_pipeline_fill_a_growing_buffer(proposal):
    """Without the on-device augmentation the buffer starts empty and takes its chains from the
    crops the pipeline delivers (first crops) or from noise, step by step, up to its capacity."""
    cfg = tiny_config("ebclr", method_kwargs={**SMALL, "buffer_size": 12, "rho": 0.5,
                      "proposal": proposal}, data={"augment_on_device": False})  # fmt: skip
    prep = prepare(None, base=cfg)
    model = adapter.build_method(prep.cfg, 10, prep.small_images, prep.num_crops)
    assert model.device_augmentation is None
    probe = Probe()
    train, val, crops = solo_crop_loaders()
    cb = model.extra_callbacks()[0]
    trainer = quiet_trainer(
        max_steps=3, limit_val_batches=0, callbacks=[cb, probe], enable_checkpointing=False
    )
    trainer.fit(model, train, val)
    first = probe.steps[0]
    assert torch.all(first["counts"] == 0)  # an empty buffer: every chain is fresh
    if proposal == "data":  # the first chain starts are first crops of the first batch
        batch_crops = crops[:8, 0].flatten(1)
        dist = torch.cdist(first["x"].flatten(1), batch_crops, compute_mode=EXACT)
        assert torch.all(dist.min(dim=1).values < 1e-5)
    else:
        mean = torch.tensor(prep.cfg["data"]["mean"]).view(1, -1, 1, 1)
        std = torch.tensor(prep.cfg["data"]["std"]).view(1, -1, 1, 1)
        pixels = first["x"] * std + mean
        assert pixels.min() >= -1e-5 and pixels.max() <= 1 + 1e-5
    assert torch.equal(first["slots"], torch.arange(8))  # new slots, in order
    assert cb.buffer.size == 12 and cb.buffer.samples.shape[0] == 12  # full, no larger
    for s in probe.steps:  # every write-back lands in the buffer
        last = {int(slot): i for i, slot in enumerate(s["slots"])}
    assert all(torch.equal(cb.buffer.samples[k], probe.steps[-1]["result"][i]) for k, i in last.items())


def test_sampler_takes_no_parameter_gradient_and_keeps_batchnorm_statistics():
    model = build()  # small_cnn with BatchNorm
    model.train()
    g = torch.Generator().manual_seed(0)
    x0 = torch.randn(6, 3, 28, 28, generator=g)
    z_ref = model(torch.randn(6, 3, 28, 28, generator=g))["z"]  # attached to the graph
    stats = {k: v.clone() for k, v in model.state_dict().items() if "running" in k}
    assert stats
    out = model.sample_negatives(x0, torch.zeros(6), z_ref, g)
    assert all(p.grad is None for p in model.parameters())
    assert not out.requires_grad and torch.isfinite(out).all() and not torch.equal(out, x0)
    for k, v in stats.items():
        assert torch.equal(model.state_dict()[k], v), k
    assert model.training


def test_sgld_eval_mode_makes_a_chain_independent_of_its_batch():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 3, 28, 28, generator=g)
    no_noise = {"sigma_min": 0.0, "sigma_max": 0.0, "sgld_grad_clamp": 1e6, "sgld_step_size": 1.0}
    for eval_mode, independent in ((True, True), (False, False)):
        model = build({**no_noise, "sgld_eval_mode": eval_mode})
        torch.nn.init.normal_(model.encoder.features[1].running_mean)  # BatchNorm statistics
        z_ref = model(torch.randn(4, 3, 28, 28, generator=g))["z"].detach()
        together = model.sample_negatives(x, torch.zeros(4), z_ref)[:1]
        alone = model.sample_negatives(x[:1], torch.zeros(1), z_ref)
        assert torch.allclose(together, alone, atol=1e-5) is independent
        assert model.training


# ------------------------------------------------------------------ the callback


def test_buffer_is_filled_with_augmented_training_images_as_the_network_sees_them():
    model = build(augmentations=[PLAIN_CROP])
    loader, _ = fake_loaders(n=64)
    cb = MSGLDReplayBuffer(48, rho=0.5, seed=3)
    rng_before = torch.get_rng_state()
    start(cb, model, loader)
    assert torch.equal(torch.get_rng_state(), rng_before)  # a random stream of its own
    buf = cb.buffer
    assert buf.initialized and buf.samples.shape == (48, 3, 28, 28)
    assert torch.all(buf.counts == 5.0)
    images = model.device_augmentation.normalize(to_float_rgb(loader.dataset.images))
    dist = torch.cdist(buf.samples.flatten(1), images.flatten(1), compute_mode=EXACT)
    assert torch.all(dist.min(dim=1).values < 1e-4)  # every slot holds a normalised image

    augmented = build()  # random crops, flips, jitter: not the raw images any more
    cb2 = MSGLDReplayBuffer(48, rho=0.5, seed=3)
    start(cb2, augmented, loader)
    pixels = (
        cb2.buffer.samples * augmented.device_augmentation.std + augmented.device_augmentation.mean
    )
    assert pixels.min() >= -1e-5 and pixels.max() <= 1 + 1e-5
    dist = torch.cdist(cb2.buffer.samples.flatten(1), images.flatten(1), compute_mode=EXACT)
    assert dist.min(dim=1).values.median() > 1.0


def test_uniform_proposal_fills_the_buffer_with_noise():
    model = build({"proposal": "uniform"})
    cb = model.extra_callbacks()[0]
    start(cb, model, fake_loaders()[0])
    aug = model.device_augmentation
    pixels = cb.buffer.samples * aug.std + aug.mean
    assert pixels.min() >= 0 and pixels.max() <= 1
    assert abs(float(pixels.mean()) - 0.5) < 0.01 and abs(float(pixels.var()) - 1 / 12) < 0.005


def test_each_step_draws_restarts_and_counts():
    model = build(augmentations=[PLAIN_CROP])
    loader, _ = fake_loaders()
    cb = MSGLDReplayBuffer(32, rho=0.25, seed=1)
    start(cb, model, loader)
    restarted = []
    for _ in range(20):
        chains = cb.draw(torch.zeros(16, 3, 28, 28))
        assert chains.x.shape == (16, 3, 28, 28) and chains.counts.shape == (16,)
        restarted.append(float((chains.counts == 0).float().mean()))
        chains.write_back(chains.x + 0.1)
    assert 0.1 < sum(restarted) / len(restarted) < 0.4  # about rho = 0.25
    assert cb.buffer.counts.max() > 5.0  # used chains count up


def test_state_round_trip_continues_exactly():
    model = build({"rho": 0.5})
    loader, _ = fake_loaders()
    cb = MSGLDReplayBuffer(32, rho=0.5, seed=2)
    start(cb, model, loader)
    for i in range(3):
        step(cb, 16, shift=0.1 * (i + 1))
    saved = clone_state(cb.state_dict())

    resumed = MSGLDReplayBuffer(32, rho=0.5, seed=999)  # the checkpoint wins over the seed
    resumed.load_state_dict(saved)
    start(resumed, build({"rho": 0.5}), loader)
    assert_same_state(clone_state(resumed.state_dict()), saved)
    # the next draws (slots, restarts, fresh augmented images) are the original run's
    draws = []
    for callback in (cb, resumed):
        chains = callback.draw(torch.zeros(16, 3, 28, 28))
        draws.append((chains.x, chains.counts, callback.buffer.counts.clone()))
    for a, b in zip(*draws):
        assert torch.equal(a, b)


def test_another_rank_restores_the_chains_with_its_own_random_streams():
    model = build({"rho": 0.5})
    loader, _ = fake_loaders()
    cb = MSGLDReplayBuffer(32, rho=0.5, seed=2)
    start(cb, model, loader)
    saved = clone_state(cb.state_dict())
    rank1 = MSGLDReplayBuffer(32, rho=0.5, seed=2)
    rank1.load_state_dict(saved)
    rank1.on_train_start(
        SimpleNamespace(global_rank=1, global_step=5, train_dataloader=loader), model
    )
    assert torch.equal(rank1.buffer.samples, cb.buffer.samples)
    assert not torch.equal(rank1.buffer.generator.get_state(), cb.buffer.generator.get_state())


def image_folder(root: Path, per_class: int = 32) -> Path:
    """A tiny ImageFolder (2 classes of 28 px RGB images): loads in milliseconds."""
    from PIL import Image

    g = torch.Generator().manual_seed(0)
    for c in range(2):
        (root / f"class{c}").mkdir(parents=True)
        for i in range(per_class):
            pixels = torch.randint(0, 256, (28, 28, 3), dtype=torch.uint8, generator=g)
            Image.fromarray(pixels.numpy()).save(root / f"class{c}" / f"{i}.png")
    return root


def test_checkpoint_resume_through_pretrain_restores_the_buffer(tmp_path):
    images = str(image_folder(tmp_path / "images"))
    cfg = tiny_config(
        "ebclr", method_kwargs={**SMALL, "rho": 0.5},
        data={"dataset": "custom", "image_size": 28, "train_path": images, "val_path": images,
              "num_workers": 0},
        checkpoint={"enabled": True, "dir": str(tmp_path / "runs"), "frequency": 1},
        auto_resume={"enabled": True}, knn_eval={"enabled": False}, limit_val_batches=0,
    )  # fmt: skip
    first = pretrain(prepare(None, base=cfg), quiet=True)
    assert first["global_step"] == 4
    ckpt = torch.load(Path(first["run_dir"]) / "last.ckpt", weights_only=False)
    saved = ckpt["callbacks"]["MSGLDReplayBuffer"]
    assert saved["ranks"][0]["buffer"]["counts"].max() > 5.0  # the chains of a trained run

    probe = Probe()
    second = pretrain(prepare(None, base={**cfg, "max_epochs": 2}), quiet=True, callbacks=[probe])
    assert second["resumed_from"] and second["global_step"] == 8
    assert_same_state(probe.first_state, saved)


# ------------------------------------------------------------------ configuration

BAD = [
    ({"rho": 1.5}, "rho is a probability and must be in \\[0, 1\\], got 1.5"),
    ({"rho": -0.1}, "rho is a probability"),
    ({"sigma_min": 0.1, "sigma_max": 0.05}, "0 <= sigma_min <= sigma_max"),
    ({"sgld_steps": -1}, "sgld_steps must be an integer >= 0"),
    ({"temperature": 0.0}, "temperature must be > 0"),
    (
        {"buffer_size": 10**10},
        "buffer_size=10000000000 needs .* GiB.*lower method_kwargs.buffer_size",
    ),
    ({"buffer_device": "gpu"}, "buffer_device must be one of"),
    ({"proposal": "noise"}, "proposal must be one of"),
    ({"projector_activation": "tanh"}, "projector_activation must be one of"),
    ({"rhoo": 0.2}, "method_kwargs.rhoo.*did you mean 'rho'"),
]


@pytest.mark.parametrize("kwargs, message", BAD, ids=[str(b[0]) for b in BAD])
def test_bad_method_kwargs_are_rejected_by_prepare(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        prepare(None, base=tiny_config("ebclr", method_kwargs={**SMALL, **kwargs}))


def test_crops_from_a_cpu_pipeline_are_accepted():
    cfg = tiny_config("ebclr", method_kwargs=SMALL, data={"augment_on_device": False})
    prep = prepare(None, base=cfg)
    assert adapter.build_method(prep.cfg, 10, True, prep.num_crops).device_augmentation is None


EBCLR_CONFIGS = [
    "configs/pretrain/fashionmnist/ebclr.yaml",
    *sorted(map(str, Path("configs/ebclr").rglob("*.yaml"))),
]


@pytest.mark.parametrize("path", EBCLR_CONFIGS)
def test_shipped_ebclr_configs_build(path):
    prep = prepare(path)
    model = adapter.build_method(prep.cfg, 10, prep.small_images, prep.num_crops)
    assert model.solo_hyper_config["method"] == prep.cfg["method"]


@pytest.mark.parametrize("dataset, rho", [("fashionmnist", 0.6), ("cifar10", 0.2)])
def test_official_configs_carry_the_reference_settings(dataset, rho):
    cfg = yaml.safe_load(Path(f"configs/ebclr/{dataset}-official.yaml").read_text())
    kw = cfg["method_kwargs"]
    # the paper's tables train 100 epochs (the official configs 200)
    assert cfg["backbone"]["name"] == "resnet18_nobn" and cfg["max_epochs"] == 100
    assert cfg["optimizer"]["name"] == "adam" and cfg["optimizer"]["lr"] == 2e-4
    assert cfg["optimizer"]["batch_size"] == 128 and cfg["scheduler"]["name"] == "none"
    assert cfg["data"]["mean"] == [0.5] * 3 and cfg["data"]["std"] == [0.5] * 3
    assert cfg["augmentations"][0]["gaussian_noise"] == {"prob": 1.0, "std": 0.03}
    expected = {
        "temperature": 0.1, "lambda1": 1e-3, "lambda2": 0.1, "sgld_steps": 10,
        "sgld_step_size": 0.05, "sgld_grad_clamp": 1.0, "sigma_min": 0.01, "sigma_max": 0.05,
        "noise_decay_K": 3.0, "rho": rho, "buffer_size": 50000, "proj_output_dim": 128,
    }  # fmt: skip
    assert {k: kw[k] for k in expected} == expected


def test_batch_study_pairs_ebclr_and_simclr_at_16_64_128():
    folder = Path("configs/ebclr/batch-study")
    assert sorted(p.name for p in folder.glob("*.yaml")) == sorted(
        f"{m}-b{b}.yaml" for m in ("ebclr", "simclr") for b in (16, 64, 128)
    )
    ebclr_kwargs = []
    for b in (16, 64, 128):
        e = yaml.safe_load((folder / f"ebclr-b{b}.yaml").read_text())
        s = yaml.safe_load((folder / f"simclr-b{b}.yaml").read_text())
        assert (e["method"], s["method"]) == ("ebclr", "simclr")
        assert e["optimizer"]["batch_size"] == s["optimizer"]["batch_size"] == b
        assert e["max_epochs"] == s["max_epochs"] == 100  # paper Table 3
        assert s["optimizer"]["lr"] == pytest.approx(0.03 * b / 256)
        assert e["augmentations"][0]["rrc"] == s["augmentations"][0]["rrc"]
        ebclr_kwargs.append(e["method_kwargs"])
    assert ebclr_kwargs[0] == ebclr_kwargs[1] == ebclr_kwargs[2]
