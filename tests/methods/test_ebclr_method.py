"""EBCLR as a solo-learn method and its MSGLD replay-buffer callback (solo-learn test style)."""

from __future__ import annotations

import io
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml
from conftest import SoloCrops, assert_model_follows_config, fake_loaders, tiny_config

import solo_hyper.callbacks as callbacks_module
import solo_hyper.methods  # noqa: F401  (registers the methods)
from solo_hyper.augment import to_float_rgb
from solo_hyper.callbacks import MSGLDReplayBuffer
from solo_hyper.config import ConfigError
from solo_hyper.losses.ebclr import ebclr_log_density
from solo_hyper.run.train import prepare, pretrain
from solo_hyper.sgld import ReplayBuffer, default_capacity
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


def build(method_kwargs: dict | None = None, **sections) -> adapter.ObjectiveMethod:
    cfg = tiny_config("ebclr", method_kwargs={**SMALL, **(method_kwargs or {})}, **sections)
    prep = prepare(None, base=cfg)
    return adapter.build_method(prep.cfg, 10, prep.small_images, prep.num_crops)


def quiet_trainer(**kwargs) -> pl.Trainer:
    return pl.Trainer(
        accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
        enable_model_summary=False, **kwargs,
    )  # fmt: skip


def start(callback: MSGLDReplayBuffer, model: adapter.ObjectiveMethod, loader) -> None:
    """The callback's on_train_start outside a Trainer (rank 0, step 0)."""
    trainer = SimpleNamespace(global_rank=0, global_step=0, num_devices=1, train_dataloader=loader)
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
            chains = draw(crops)
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

    assert issubclass(METHODS["ebclr"], adapter.ObjectiveMethod) and METHODS["ebclr"].METHOD == "ebclr"
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
    [{"geometry": "sphere"}, {"geometry": "poincare"}, {"geometry": "lorentz"},
     {"geometry": "poincare", "chunk_size": 3}],
)  # fmt: skip
def test_fast_dev_run_fit_writes_the_sgld_outputs_back(space_kwargs):
    model = build({**space_kwargs, "rho": 0.5})
    probe = Probe()
    buffer_cb, *_ = model.method_callbacks()
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
        model.training_step(batch, 0)


def solo_pipeline_model(method_kwargs: dict | None = None, **sections) -> adapter.ObjectiveMethod:
    """EBCLR on crops from a CPU pipeline (data.augment_on_device=false)."""
    data = {"augment_on_device": False, **sections.pop("data", {})}
    model = build(method_kwargs, data=data, **sections)
    assert model.device_augmentation is None
    return model


def solo_loaders(model: adapter.ObjectiveMethod, n: int = 32, batch_size: int = 8, flip: bool = True):
    """Training and validation loaders of solo-style crops (normalised with the model's crop
    statistics, which are those solo's pipeline used) and the [0, 1] pixels behind them."""
    from torch.utils.data import DataLoader

    pixels = torch.rand(n, 3, 28, 28, generator=torch.Generator().manual_seed(1))
    train = SoloCrops(pixels, model.crop_mean, model.crop_std, flip=flip)
    val = [(train.crop(i), i % 10) for i in range(n // 2)]
    return DataLoader(train, batch_size=batch_size, drop_last=True), DataLoader(val, 8), pixels


def nearest(chains: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
    """Distance from each chain to the nearest candidate (flattened)."""
    d = torch.cdist(chains.flatten(1), candidates.flatten(1), compute_mode=EXACT)
    return d.min(dim=1).values


@pytest.mark.parametrize("proposal", ["data", "uniform"])
def test_on_solos_pipeline_the_buffer_is_full_at_the_first_step(proposal):
    """EBCLR on solo's CPU pipeline: at the first training step the buffer holds buffer_size
    augmented training images (or U[-1, 1] noise) in [-1, 1] at the configured count, as the
    official code, before any crop of the step was seen."""
    model = solo_pipeline_model(
        {"buffer_size": 12, "rho": 0.5, "proposal": proposal, "buffer_init_count": 3.0}
    )
    probe = Probe()
    train, val, pixels = solo_loaders(model)
    cb = model.method_callbacks()[0]
    trainer = quiet_trainer(
        max_steps=2, limit_val_batches=0, callbacks=[cb, probe], enable_checkpointing=False
    )
    trainer.fit(model, train, val)
    (state,) = probe.first_state["ranks"]  # at the first training step, before its draw
    buffer = state["buffer"]
    assert buffer["initialized"] and buffer["samples"].shape == (12, 3, 28, 28)
    assert torch.all(buffer["counts"] == 3.0)
    chains = buffer["samples"]
    if proposal == "data":  # a training image's crop (flipped or not) as [-1, 1] pixels
        images = torch.cat([pixels, pixels.flip(-1)]) * 2 - 1
        assert torch.all(nearest(chains, images) < 1e-4)
        assert nearest(chains, pixels).min() > 1.0  # not the normalised crops themselves
    else:
        assert chains.min() >= -1 and chains.max() <= 1 and chains.mean().abs() < 0.05
    first = probe.steps[0]
    assert set(first["counts"].tolist()) <= {0.0, 3.0}


def test_solos_pipeline_fill_keeps_the_runs_randomness():
    """Filling reads solo's augmenting dataset inside a random stream of its own."""
    model = solo_pipeline_model({"buffer_size": 40})
    train, _, _ = solo_loaders(model)
    cb = MSGLDReplayBuffer(40, rho=0.5, seed=3)
    torch.manual_seed(0)
    before = torch.get_rng_state()
    start(cb, model, train)
    assert torch.equal(torch.get_rng_state(), before)
    flipped = cb.buffer.samples.flip(-1)
    assert not torch.allclose(cb.buffer.samples, flipped)  # the dataset's flips were drawn


def draw_twice_with_other_crops(model: adapter.ObjectiveMethod, loader, rho: float):
    """Two identical buffers, each drawn from once: with the batch's crops and with others."""
    out = []
    for crops in (torch.zeros(8, 3, 28, 28), torch.randn(8, 3, 28, 28) * 3):
        cb = MSGLDReplayBuffer(16, rho=rho, seed=4)
        start(cb, model, loader)
        chains = cb.draw(crops)
        out.append((chains.x, chains.counts, crops))
    return out


@pytest.mark.parametrize("pipeline", ["solo", "device"])
def test_restarted_chains_do_not_depend_on_the_batch(pipeline):
    """Proposals are fresh augmented training images: the same for any batch (fixed seed), and
    never the step's own crops."""
    if pipeline == "solo":
        model = solo_pipeline_model()
        loader = solo_loaders(model)[0]
    else:
        model = build()
        loader = fake_loaders()[0]
    (x_a, counts_a, crops_a), (x_b, counts_b, crops_b) = draw_twice_with_other_crops(
        model, loader, 1.0
    )
    assert (counts_a == 0).any()  # rho = 1: 8 positions of 8 drawn with replacement restart
    assert torch.equal(x_a, x_b) and torch.equal(counts_a, counts_b)
    for crops in (crops_a, crops_b):
        assert nearest(x_a, crops).min() > 1.0
        assert nearest(x_a, model.objective.chain_to_input(crops)).min() > 1.0


@pytest.mark.parametrize("pipeline", ["solo", "device"])
def test_initial_buffer_takes_the_configured_count_and_restarts_count_zero(pipeline):
    """buffer_init_count is the count of the initial buffer (official: 5, sigma_min at once);
    restarted chains start at 0 (the largest noise), as the official code's Buffer.sample."""
    kwargs = {"buffer_init_count": 2.0}
    if pipeline == "solo":
        model = solo_pipeline_model(kwargs)
        loader = solo_loaders(model)[0]
    else:
        model = build(kwargs)
        loader = fake_loaders()[0]
    cb = model.method_callbacks()[0]
    start(cb, model, loader)
    assert torch.all(cb.buffer.counts == 2.0)
    seen = set()
    for _ in range(4):
        chains = cb.draw(torch.zeros(16, 3, 28, 28))
        seen |= set(chains.counts.tolist())
        chains.write_back(chains.x)
    assert {0.0, 2.0} <= seen <= {0.0, 1.0, 2.0, 3.0, 4.0, 5.0}


class CountingCrops(SoloCrops):
    """SoloCrops that count how many items were read."""

    reads = 0

    def __getitem__(self, i: int):
        self.reads += 1
        return super().__getitem__(i)


def test_on_solos_pipeline_a_resumed_buffer_is_restored_not_refilled():
    model = solo_pipeline_model({"rho": 0.5})
    train, _, pixels = solo_loaders(model)
    cb = MSGLDReplayBuffer(16, rho=0.5, seed=2)
    start(cb, model, train)
    for i in range(3):
        step(cb, 8, shift=0.1 * (i + 1))
    saved = clone_state(cb.state_dict())
    counting = CountingCrops(pixels, model.crop_mean, model.crop_std, flip=True)
    loader = torch.utils.data.DataLoader(counting, batch_size=8)
    resumed = MSGLDReplayBuffer(16, rho=0.5, seed=999)
    resumed.load_state_dict(saved)
    start(resumed, solo_pipeline_model({"rho": 0.5}), loader)
    assert counting.reads == 0  # nothing refilled (nor read for the shape)
    assert_same_state(clone_state(resumed.state_dict()), saved)
    a, b = cb.draw(torch.zeros(8, 3, 28, 28)), resumed.draw(torch.zeros(8, 3, 28, 28))
    assert torch.equal(a.x, b.x) and torch.equal(a.counts, b.counts)  # the same restarts too


def test_on_solos_pipeline_each_rank_fills_its_own_buffer():
    model = solo_pipeline_model()
    train, _, _ = solo_loaders(model)
    buffers = []
    for rank in (0, 1):
        cb = MSGLDReplayBuffer(16, rho=0.5, seed=2)
        trainer = SimpleNamespace(global_rank=rank, global_step=0, num_devices=1, train_dataloader=train)
        cb.on_train_start(trainer, model)
        buffers.append(cb.buffer)
    assert all(b.initialized and torch.all(b.counts == 5.0) for b in buffers)
    assert not torch.equal(buffers[0].samples, buffers[1].samples)


SOLO_STATS = adapter.shim.SOLO_DATASET_STATS["cifar10"]  # solo's own table, as its pipeline uses it


def test_the_sampler_sees_minus_one_to_one_pixels_from_either_crop_source():
    """The same images as on-device crops (normalised with mean = std = 0.5, the official
    configs') and as solo's crops (normalised with solo's CIFAR-10 statistics) give the same
    chains, in [-1, 1] pixels; the encoder gets them back in its crops' normalisation."""
    images = torch.randint(0, 256, (32, 3, 28, 28), dtype=torch.uint8,
                           generator=torch.Generator().manual_seed(2))  # fmt: skip
    pixels = to_float_rgb(images)
    half = {"mean": [0.5] * 3, "std": [0.5] * 3}
    device = build(augmentations=[PLAIN_CROP], data=half)
    solo = solo_pipeline_model(data={"mean": list(SOLO_STATS[0]), "std": list(SOLO_STATS[1])})
    assert (solo.crop_mean, solo.crop_std) == SOLO_STATS
    from solo_hyper.data import InMemoryImages, _batch_is_ready

    raw = torch.utils.data.DataLoader(
        InMemoryImages(images, torch.zeros(32), with_index=True), batch_size=8,
        collate_fn=_batch_is_ready,
    )  # fmt: skip
    crops = SoloCrops(pixels, *SOLO_STATS)
    buffers = []
    for model, loader in ((device, raw), (solo, torch.utils.data.DataLoader(crops, 8))):
        cb = MSGLDReplayBuffer(24, rho=0.5, seed=5)
        start(cb, model, loader)
        buffers.append(cb.buffer.samples)
    assert torch.allclose(buffers[0], buffers[1], atol=1e-5)
    assert torch.all(nearest(buffers[1], pixels * 2 - 1) < 1e-4)
    # the encoder sees a chain as a crop of its pipeline: solo's normalisation
    chain = pixels[:4] * 2 - 1
    solo_crops = torch.stack([crops.crop(i) for i in range(4)])
    assert torch.allclose(solo.objective.chain_to_input(chain), solo_crops, atol=1e-5)
    assert torch.equal(device.objective.chain_to_input(chain), chain)  # 0.5 / 0.5: the identity, exactly


def test_the_energy_encodes_as_solos_forward_does():
    """SGLD samples go through the method's forward, as the views do (solo main feeds the
    backbone channels-last input: the same numbers only through the same path)."""
    model = build()
    x = torch.rand(4, 3, 28, 28) * 2 - 1
    z_ref = model(torch.rand(6, 3, 28, 28))["z"].detach()
    expected = ebclr_log_density(
        model(model.objective.chain_to_input(x))["z"], z_ref, model.args.temperature,
        model.embedding_space,
    )  # fmt: skip
    assert torch.equal(model.objective.log_density(model, model.objective.chain_to_input(x), z_ref), expected)


def encoder_inputs(model: adapter.ObjectiveMethod, x: torch.Tensor, z_ref: torch.Tensor, seed: int) -> list:
    """What the encoder sees at each SGLD step from chains x, in [-1, 1] pixels (its input,
    de-normalised with the crops' statistics)."""
    seen = []
    hook = model.encoder.register_forward_pre_hook(lambda m, a: seen.append(a[0].detach()))
    model.objective.sample_negatives(model, x, torch.zeros(len(x)), z_ref, torch.Generator().manual_seed(seed))
    hook.remove()
    mean = torch.tensor(model.crop_mean, dtype=x.dtype).view(1, -1, 1, 1)
    std = torch.tensor(model.crop_std, dtype=x.dtype).view(1, -1, 1, 1)
    return [(v * std + mean) * 2 - 1 for v in seen]


@pytest.mark.parametrize("stats", ["solo", "half"])
def test_step_clamp_and_noise_act_on_minus_one_to_one_pixels(stats):
    """alpha * delta bounds a step and sigma is the noise's std in [-1, 1] pixels of what the
    encoder sees, whatever the crops' normalisation (solo's std of about 0.25 would otherwise
    halve both in pixels)."""
    mean, std = SOLO_STATS if stats == "solo" else ((0.5,) * 3, (0.5,) * 3)
    data = {"mean": list(mean), "std": list(std)}
    alpha, delta = 0.05, 1e-4  # delta far below the gradients: every step is alpha * delta
    g = torch.Generator().manual_seed(0)
    x = torch.rand(6, 3, 28, 28, generator=g, dtype=torch.float64) * 2 - 1
    clamped = solo_pipeline_model(
        {"sgld_steps": 2, "sgld_step_size": alpha, "sgld_grad_clamp": delta,
         "sigma_min": 0.0, "sigma_max": 0.0}, data=data,
    ).double()  # fmt: skip
    z_ref = clamped(torch.randn(6, 3, 28, 28, generator=g, dtype=torch.float64))["z"].detach()
    first, second = encoder_inputs(clamped, x, z_ref, 0)
    assert torch.allclose(first, x, atol=1e-12)  # the chains, as the encoder's input
    moved = (second - first).abs()
    assert moved.max() <= alpha * delta * (1 + 1e-6)
    assert (moved > alpha * delta * (1 - 1e-6)).float().mean() > 0.9
    noisy = solo_pipeline_model(
        {"sgld_steps": 2, "sgld_step_size": 0.0, "sigma_min": 0.05, "sigma_max": 0.05}, data=data
    ).double()
    first, second = encoder_inputs(noisy, x, z_ref, 1)
    assert abs(float((second - first).std()) - 0.05) < 0.002


def test_gaussian_noise_is_applied_to_solos_crops_and_to_the_fill():
    """solo's pipeline does not know gaussian_noise: the device adds it (std in [0, 1] pixels,
    as on the device), to the step's crops and to the images that fill the buffer."""
    noise = {**PLAIN_CROP, "gaussian_noise": {"prob": 1.0, "std": 0.03}}
    model = solo_pipeline_model(augmentations=[noise])
    plain = solo_pipeline_model(augmentations=[PLAIN_CROP])
    train, _, pixels = solo_loaders(model, flip=False)
    batch = next(iter(train))
    model.trainer = plain.trainer = pl.Trainer(accelerator="cpu", logger=False)
    model.trainer.training = True
    _, out, _ = model.on_after_batch_transfer(batch, 0)
    _, same, _ = plain.on_after_batch_transfer(batch, 0)
    assert all(torch.equal(a, b) for a, b in zip(same, batch[1]))  # no noise: as they came
    for crop, given in zip(out, batch[1]):
        added = (crop - given) * torch.tensor(model.crop_std).view(1, -1, 1, 1)  # in pixels
        assert abs(float(added.std()) - 0.03) < 0.003 and abs(float(added.mean())) < 0.003
    cb = MSGLDReplayBuffer(32, rho=0.5, seed=6)
    start(cb, model, train)
    clean = pixels * 2 - 1
    d = cb.buffer.samples[:, None] - clean[None]
    closest = d.flatten(2).norm(dim=2).argmin(dim=1)
    residual = cb.buffer.samples - clean[closest]
    assert abs(float(residual.std()) - 0.06) < 0.006  # 0.03 in [0, 1] pixels is 0.06 in [-1, 1]


def test_sampler_takes_no_parameter_gradient_and_keeps_batchnorm_statistics():
    model = build()  # small_cnn with BatchNorm
    model.train()
    g = torch.Generator().manual_seed(0)
    x0 = torch.randn(6, 3, 28, 28, generator=g)
    z_ref = model(torch.randn(6, 3, 28, 28, generator=g))["z"]  # attached to the graph
    stats = {k: v.clone() for k, v in model.state_dict().items() if "running" in k}
    assert stats
    out = model.objective.sample_negatives(model, x0, torch.zeros(6), z_ref, g)
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
        together = model.objective.sample_negatives(model, x, torch.zeros(4), z_ref)[:1]
        alone = model.objective.sample_negatives(model, x[:1], torch.zeros(1), z_ref)
        assert torch.allclose(together, alone, atol=1e-5) is independent
        assert model.training


# ------------------------------------------------------------------ the callback


def test_buffer_is_filled_with_augmented_training_images_in_minus_one_to_one():
    model = build(augmentations=[PLAIN_CROP])
    loader, _ = fake_loaders(n=64)
    cb = MSGLDReplayBuffer(48, rho=0.5, seed=3)
    rng_before = torch.get_rng_state()
    start(cb, model, loader)
    assert torch.equal(torch.get_rng_state(), rng_before)  # a random stream of its own
    buf = cb.buffer
    assert buf.initialized and buf.samples.shape == (48, 3, 28, 28)
    assert torch.all(buf.counts == 5.0)
    images = to_float_rgb(loader.dataset.images) * 2 - 1
    assert torch.all(nearest(buf.samples, images) < 1e-4)  # every slot holds an image

    augmented = build()  # random crops, flips, jitter: not the raw images any more
    cb2 = MSGLDReplayBuffer(48, rho=0.5, seed=3)
    start(cb2, augmented, loader)
    assert cb2.buffer.samples.min() >= -1 - 1e-5 and cb2.buffer.samples.max() <= 1 + 1e-5
    assert nearest(cb2.buffer.samples, images).median() > 1.0


def test_uniform_proposal_fills_the_buffer_with_noise():
    model = build({"proposal": "uniform"})
    cb = model.method_callbacks()[0]
    start(cb, model, fake_loaders()[0])
    pixels = (cb.buffer.samples + 1) / 2  # U[-1, 1], as the official code
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
    assert 0.1 < sum(restarted) / len(restarted) < 0.4  # about 1 - (15/16)^4 = 0.228
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
        SimpleNamespace(global_rank=1, global_step=5, num_devices=1, train_dataloader=loader), model
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
    ({"rho": 1.5}, "rho is a fraction and must be in \\[0, 1\\], got 1.5"),
    ({"rho": -0.1}, "rho is a fraction"),
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
def test_shipped_ebclr_configs_build_the_model_they_describe(path):
    prep = prepare(path)
    model = adapter.build_method(prep.cfg, 10, prep.small_images, prep.num_crops)
    if prep.cfg["method"] == "ebclr":  # the config's arguments reach the objective
        assert model.args == model.objective.Args(**prep.cfg["method_kwargs"])
    assert_model_follows_config(model, prep.cfg)


@pytest.mark.parametrize("name", ["byol", "mocov2plus"])
def test_the_table1_baselines_constant_ema_reaches_the_model(name):
    """EBCLR's official BYOL/MoCo keep the EMA momentum constant: the config's
    method_kwargs.base/final_tau_momentum reach the model under either solo-learn version
    (1.0.2: constructor arguments; main: cfg.momentum)."""
    path = f"configs/ebclr/baselines/fashionmnist-{name}.yaml"
    prep = prepare(path)
    kwargs = prep.cfg["method_kwargs"]
    model = adapter.build_method(prep.cfg, 10, prep.small_images, prep.num_crops)
    updater = model.momentum_updater
    assert (updater.base_tau, updater.final_tau) == (
        kwargs["base_tau_momentum"], kwargs["final_tau_momentum"]
    )
    assert updater.base_tau == updater.final_tau  # constant, not solo's 0.99 -> 1 schedule


@pytest.mark.parametrize("dataset, rho", [("mnist", 0.4), ("fashionmnist", 0.6), ("cifar10", 0.2), ("cifar100", 0.2)])
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


@pytest.mark.parametrize("folder", ["configs/ebclr/batch-study", "configs/ebclr/batch-study/mnist"])
def test_batch_study_pairs_ebclr_and_simclr_at_16_64_128(folder):
    folder = Path(folder)
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


def test_the_default_buffer_is_the_official_one_up_to_32_px_and_its_memory_beyond():
    official = ReplayBuffer.bytes_needed(50_000, (3, 32, 32))
    assert default_capacity((3, 32, 32)) == default_capacity((1, 28, 28)) == 50_000
    assert default_capacity((3, 224, 224)) == 1020  # about 614 MB, as the official buffer
    for shape in ((3, 96, 96), (3, 224, 224), (3, 512, 512)):
        n = default_capacity(shape)
        assert ReplayBuffer.bytes_needed(n, shape) <= official < ReplayBuffer.bytes_needed(n + 1, shape)


def test_a_buffer_that_cannot_fit_is_refused_where_it_is_built_before_any_allocation(monkeypatch):
    """Built outside ``prepare`` (solo's launchers and tests, a user's Trainer): the callback
    checks before it allocates, naming method_kwargs.buffer_size."""
    model = solo_pipeline_model()
    train, _, _ = solo_loaders(model)
    allocated = []

    class Spy(ReplayBuffer):
        def __init__(self, *args, **kwargs):
            allocated.append(args)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(callbacks_module, "ReplayBuffer", Spy)
    cb = MSGLDReplayBuffer(10**10, rho=0.5, seed=0)
    with pytest.raises(ValueError, match=r"method_kwargs.buffer_size=10000000000 needs .* GiB"):
        start(cb, model, train)
    assert not allocated
