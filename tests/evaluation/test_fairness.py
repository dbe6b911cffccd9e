"""Fairness by construction: each method's shipped config and its Euclidean twin's differ only in
the geometry (docs/fairness.md lists every deliberate difference)."""

from __future__ import annotations

from pathlib import Path

import pytest

from solo_hyper.reproduce.pairs import differences, flatten
from solo_hyper.run.train import prepare

PAIRS = [("hcl", "simclr"), ("shcl", "supcon"), ("rhcl", "rocl")]
GEOMETRY = {"curvature", "geometry", "normalize", "clip_radius", "learnable_curvature"}
# how the loss is computed, not what: the chunked InfoNCE equals the fused one (test_chunked_*)
COMPUTATION = {"chunk_size"}
CASES = [
    (folder.name, a, b)
    for folder in sorted(Path("configs/pretrain").iterdir())
    for a, b in PAIRS
    if (folder / f"{a}.yaml").is_file() and (folder / f"{b}.yaml").is_file()
]


def test_every_dataset_ships_its_pairs():
    assert {(ds, a) for ds, a, _ in CASES} >= {
        ("fashionmnist", "hcl"), ("fashionmnist", "shcl"), ("fashionmnist", "rhcl"),
        ("mnist", "hcl"), ("mnist", "shcl"),
        ("cifar10", "hcl"), ("cifar10", "shcl"), ("cifar10", "rhcl"),
    }  # fmt: skip


@pytest.mark.parametrize("dataset,method,baseline", CASES)
def test_a_method_and_its_baseline_differ_only_in_geometry(dataset, method, baseline):
    # the validated configs, method defaults filled in: a default can tilt a pair as well
    a = prepare(f"configs/pretrain/{dataset}/{method}.yaml").cfg
    b = prepare(f"configs/pretrain/{dataset}/{baseline}.yaml").cfg
    differing = set(differences(a, b))  # the run's name aside
    allowed = {"method"} | {f"method_kwargs.{k}" for k in GEOMETRY | COMPUTATION}
    assert differing <= allowed, sorted(differing - allowed)


def test_rhcl_and_rocl_use_rocl_temperature_augmentation_and_pixels():
    for dataset in ("fashionmnist", "cifar10"):
        cfg = prepare(f"configs/pretrain/{dataset}/rhcl.yaml").cfg
        assert cfg["method_kwargs"]["temperature"] == 0.5
        assert cfg["method_kwargs"]["lambda_adv"] == 1 / 512  # RoCL's 1/256, see losses/robust.py
        aug = cfg["augmentations"][0]
        assert aug["rrc"]["crop_min_scale"] == 0.08 and aug["grayscale"]["prob"] == 0.2
        jitter = aug["color_jitter"]
        assert (jitter["brightness"], jitter["contrast"], jitter["saturation"], jitter["hue"]) == (
            0.4, 0.4, 0.4, 0.1,
        )  # fmt: skip
        assert aug["gaussian_blur"]["prob"] == 0.0
        assert cfg["data"]["mean"] == [0.0] * 3 and cfg["data"]["std"] == [1.0] * 3


def test_shcl_curvature_on_cifar10_is_one_the_paper_tuned():
    assert prepare("configs/pretrain/cifar10/shcl.yaml").cfg["method_kwargs"]["curvature"] in (
        0.1, 0.2,
    )  # fmt: skip


@pytest.mark.parametrize("dataset", ["mnist", "fashionmnist", "cifar10", "cifar100"])
def test_ebclr_linear_protocol_is_its_papers(dataset):
    import torch

    from solo_hyper.evaluation.linear import load_linear_config
    from solo_hyper.solo import adapter

    cfg = load_linear_config(f"configs/linear/ebclr-{dataset}.yaml")
    assert cfg["features"] == "precomputed" and cfg["max_epochs"] == 200
    assert cfg["scheduler"]["name"] == "none" and cfg["data"]["train_subset"] is None
    head = adapter.build_linear_model(None, 16, 10, cfg)
    optimizer = head.configure_optimizers()
    optimizer = optimizer[0][0] if isinstance(optimizer, tuple) else optimizer
    optimizer = optimizer[0] if isinstance(optimizer, list) else optimizer
    assert isinstance(optimizer, torch.optim.Adam)  # no SGD momentum carried over
    group = optimizer.param_groups[0]
    assert (group["lr"], group["weight_decay"], cfg["optimizer"]["batch_size"]) == (1e-3, 0.0, 512)


def test_ebclr_table_configs_run_the_papers_100_epochs():
    for path in sorted(Path("configs/ebclr").rglob("*.yaml")):
        assert prepare(str(path)).cfg["max_epochs"] == 100, path


def test_mnist_configs_are_fashion_mnists_on_the_other_dataset():
    """MNIST's HCL/SHCL tables and EBCLR columns run at Fashion-MNIST's budget and recipe: the
    configs differ in the dataset, the run name, horizontal flips (pretraining configs: a mirrored
    digit is another symbol) and EBCLR's rho (the official MNIST 0.4 against 0.6) only."""
    twins = [(f"configs/pretrain/{{}}/{m}.yaml", {"augmentations.0.horizontal_flip.prob"})
             for m in ("hcl", "simclr", "shcl", "supcon")]
    twins += [(f"configs/ebclr/baselines/{{}}-{m}.yaml", set())
              for m in ("simclr", "mocov2plus", "simsiam", "byol")]
    twins += [("configs/ebclr/{}-official.yaml", {"method_kwargs.rho"})]
    twins += [(f"configs/ebclr/batch-study/{{}}{m}-b{b}.yaml", {"method_kwargs.rho"} if m == "ebclr" else set())
              for m in ("ebclr", "simclr") for b in (16, 64, 128)]  # fmt: skip
    for pattern, allowed in twins:
        folder = ("mnist/", "") if "batch-study" in pattern else ("mnist", "fashionmnist")
        a, b = (flatten(prepare(pattern.format(f)).cfg) for f in folder)
        differing = {k for k in a.keys() | b.keys() if a.get(k, "<absent>") != b.get(k, "<absent>")}
        assert differing <= {"name", "data.dataset", "data.mean", "data.std", *allowed}, pattern
        assert a["data.dataset"] == "mnist" and b["data.dataset"] == "fashionmnist"
        if "method_kwargs.rho" in allowed:
            assert (a["method_kwargs.rho"], b["method_kwargs.rho"]) == (0.4, 0.6)
