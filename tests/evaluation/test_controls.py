"""Controls: each run's untrained backbone and the raw pixels, evaluated by the runs' own code."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from solo_hyper.evaluation import controls, protocol
from solo_hyper.run.train import prepare

TINY_LINEAR = "tests/linear-tiny.yaml"  # the logistic probe and kNN on evaluation subsets
SIMCLR = "configs/pretrain/fashionmnist/simclr.yaml"
TINY = ["data.train_subset=64", "optimizer.batch_size=32", "backbone.kwargs.width=8",
        "method_kwargs.proj_hidden_dim=32", "method_kwargs.proj_output_dim=16", "max_epochs=1",
        "knn_eval.enabled=false", "data.val_subset=32", "limit_val_batches=1"]  # fmt: skip


def tiny(tmp_path: Path, config: str = SIMCLR, seed: int = 0, name: str = "run"):
    return prepare(config, [*TINY, f"seed={seed}", f"name={name}", f"checkpoint.dir={tmp_path}"])


def test_raw_pixels_backbone_is_the_flattened_input():
    from solo_hyper.backbones import build_backbone

    net = build_backbone("pixels", shape=(3, 28, 28))
    x = torch.randn(4, 3, 28, 28)
    assert net.num_features == 3 * 28 * 28 and torch.equal(net(x), x.flatten(1))
    assert not list(net.parameters())
    with pytest.raises(ValueError, match="expects images of shape"):
        net(torch.randn(4, 3, 32, 32))


def test_raw_pixels_read_copied_channels_once_and_refuse_distinct_ones():
    from solo_hyper.backbones import build_backbone

    net = build_backbone("pixels", shape=(1, 28, 28))
    grey = torch.randn(4, 1, 28, 28)
    assert net.num_features == 28 * 28 and torch.equal(net(grey.expand(-1, 3, -1, -1)), grey.flatten(1))
    # the kNN's cosine between images is the same on one channel as on its three copies
    three = grey.expand(-1, 3, -1, -1).flatten(1)
    cos = torch.nn.functional.cosine_similarity
    assert torch.allclose(cos(three[:1], three[1:]), cos(net(grey)[:1], net(grey)[1:]), atol=1e-6)
    with pytest.raises(ValueError, match="channels differ: give shape \\(3, 28, 28\\)"):
        net(torch.randn(4, 3, 28, 28))


def test_the_pixel_control_reads_one_channel_only_where_the_three_are_copies():
    fashion = tiny(Path("unused")).cfg
    assert controls.pixels_config(fashion)["backbone"]["kwargs"]["shape"] == [1, 28, 28]
    assert "one channel" in controls.pixels_note(fashion)
    cifar = {**fashion, "data": {**fashion["data"], "dataset": "cifar10",
                                 "mean": [0.49, 0.48, 0.45], "std": [0.25, 0.24, 0.26]}}  # fmt: skip
    assert controls.pixels_config(cifar)["backbone"]["kwargs"]["shape"] == [3, 28, 28]
    # a grey dataset normalised with another dataset's per-channel statistics: distinct channels
    tinted = {**fashion, "data": {**fashion["data"], "mean": [0.49, 0.48, 0.45]}}
    assert controls.pixels_config(tinted)["backbone"]["kwargs"]["shape"] == [3, 28, 28]
    assert "one channel" not in controls.pixels_note(tinted)
    # transfer: the evaluated dataset's channels decide (under the run's normalisation)
    assert controls.pixels_config(fashion, "mnist")["backbone"]["kwargs"]["shape"] == [1, 28, 28]
    assert controls.pixels_config(fashion, "cifar10")["backbone"]["kwargs"]["shape"] == [3, 28, 28]


def test_the_untrained_control_is_the_runs_network_before_its_first_step(tmp_path):
    """pretrain's network at on_train_start (no optimisation step yet) has exactly the weights
    of the run's untrained control: seeded as the run, loaders built first, as pretrain does."""
    import pytorch_lightning as pl

    from solo_hyper.run.train import pretrain

    seen = {}

    class Capture(pl.Callback):
        def on_train_start(self, trainer, pl_module):
            seen.update({k: v.detach().clone() for k, v in pl_module.state_dict().items()})

    prep = tiny(tmp_path)
    pretrain(prep, quiet=True, callbacks=[Capture()], on_mismatch="new")
    control = torch.load(controls.write_control(prep, controls.UNTRAINED, tmp_path) / "last.ckpt",
                         weights_only=False)["state_dict"]  # fmt: skip
    assert seen.keys() == control.keys()
    assert all(torch.equal(seen[k], control[k]) for k in seen)
    other = torch.load(controls.write_control(tiny(tmp_path, seed=1), controls.UNTRAINED, tmp_path)
                       / "last.ckpt", weights_only=False)["state_dict"]  # fmt: skip
    assert not all(torch.equal(other[k], control[k]) for k in control)  # another seed, another net


def test_gain_over_the_untrained_backbone_is_paired_by_seed():
    rows = [{"config": "hcl", "linear_acc1": v, "knn_top1": 80.0} for v in (85.0, 86.0, 87.5)]
    untrained = [{"run_dir": f"u{i}", "linear_acc1": v, "knn_top1": 80.0}
                 for i, v in enumerate((83.0, 84.0, 85.0))]  # fmt: skip
    found = {g["key"]: g["interval"] for g in controls.gains(rows, untrained)}
    assert found["linear_acc1"].mean == pytest.approx(2.1666666, rel=1e-6)
    assert found["linear_acc1"].low > 0 and found["knn_top1"].within_noise
    pixels = {"linear_acc1": 84.6, "knn_top1": 84.0, "note": "Raw pixels: one channel."}
    text = controls.controls_markdown(rows, untrained, pixels)
    assert "| raw pixels | 1 | 84.60 | 84.00 |" in text and "\nRaw pixels: one channel.\n" in text
    assert "| hcl | linear top-1 | 3 | +2.17 |" in text and "above the untrained backbone" in text
    assert "| hcl | kNN top-1 | 3 | +0.00 | [+0.00, +0.00] | not above the untrained backbone" in text


def test_the_raw_pixels_are_one_control_whatever_the_seeds(tmp_path):
    first = controls.write_control(tiny(tmp_path, seed=0), controls.PIXELS, tmp_path)
    assert controls.write_control(tiny(tmp_path, seed=1), controls.PIXELS, tmp_path) == first
    assert first.name.startswith("pixels-fashionmnist-") and "-s" not in first.name.removeprefix("pixels-")
    untrained = {controls.write_control(tiny(tmp_path, seed=s), controls.UNTRAINED, tmp_path) for s in (0, 1)}
    assert len(untrained) == 2  # an untrained network is its seed's


def test_methods_with_other_pretraining_views_share_their_common_networks_control(tmp_path):
    """ReSSL's teacher view has no colour jitter, HCL's views do: the evaluation reads neither, so
    one seed's untrained small CNN is one control for both (one directory, one entry in a
    table's control line); another evaluation view (crop size) is another control."""
    hcl = controls.write_control(tiny(tmp_path, "configs/pretrain/fashionmnist/hcl.yaml"), controls.UNTRAINED, tmp_path)
    ressl = controls.write_control(tiny(tmp_path, "configs/pretrain/fashionmnist/ressl.yaml"), controls.UNTRAINED,
                                   tmp_path)  # fmt: skip
    assert hcl == ressl
    resized = prepare(SIMCLR, [*TINY, "seed=0", "name=run", f"checkpoint.dir={tmp_path}",
                               "augmentations.0.crop_size=24"])  # fmt: skip
    assert controls.write_control(resized, controls.UNTRAINED, tmp_path) != hcl


def test_a_smoke_evaluation_is_cached_apart_from_the_full_one(tmp_path, monkeypatch):
    """The budget is part of the cache key: a smoke evaluation (2,000 / 1,000 images) goes to
    eval-smoke.json, the full one (here tests/linear-tiny.yaml's subsets) to eval.json, and
    neither is ever read for the other."""
    run = controls.write_control(tiny(tmp_path), controls.UNTRAINED, tmp_path)
    smoke = protocol.evaluate_run(run, None, TINY_LINEAR, False, budget="smoke")
    assert (smoke["eval_train_images"], smoke["eval_test_images"], smoke["eval_budget"]) == (2000, 1000, "smoke")
    assert (run / "eval-smoke.json").is_file() and not (run / "eval.json").exists()
    full = protocol.evaluate_run(run, None, TINY_LINEAR, False)
    assert (full["eval_train_images"], full["eval_test_images"], full["eval_budget"]) == (512, 256, "full")
    monkeypatch.setattr(protocol, "linear_probe", lambda *a, **k: pytest.fail("re-evaluated"))
    assert protocol.evaluate_run(run, None, TINY_LINEAR, False, budget="smoke")["eval_train_images"] == 2000
    assert protocol.evaluate_run(run, None, TINY_LINEAR, False)["eval_train_images"] == 512
    with pytest.raises(protocol.ConfigError, match="unknown evaluation budget 'tiny'"):
        protocol.evaluate_run(run, None, TINY_LINEAR, False, budget="tiny")
