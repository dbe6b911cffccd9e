"""The papers' table commands in docs/results.md reproduce what they say: every config they name
exists and carries the paper's recipe (global batch, optimiser, epochs, augmentation), and no
command overrides a recipe key on the command line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from doc_shell import commands

from solo_hyper.run.train import prepare
from solo_hyper.solo import adapter

RESULTS = Path("docs/results.md")
GPU_SECTION = "## The papers' tables on a GPU"
# keys a command may set: where the data is and which accelerator runs it
ALLOWED_SET = re.compile(r"^(data\.(train_path|val_path|train_subset)|accelerator)=")

CIFAR_AUG = {"gaussian_blur": 0.0, "solarization": 0.0, "grayscale": 0.2, "horizontal_flip": 0.5}
IMAGENET_AUG = {"gaussian_blur": 0.5, "solarization": 0.1, "grayscale": 0.2, "horizontal_flip": 0.5}
# HCL Table 1 (section 4.2): dataset -> (backbone, global batch, lr, epochs, crop, augmentation)
HCL_TABLE1 = {
    "cifar10": ("resnet18", 512, 0.5, 200, 32, CIFAR_AUG),
    "cifar100": ("resnet18", 512, 0.5, 200, 32, CIFAR_AUG),
    "tiny-imagenet": ("resnet18", 512, 0.5, 200, 64, CIFAR_AUG),
    "imagenet-100": ("resnet50", 1024, 0.6, 100, 224, IMAGENET_AUG),
    "imagenet-200": ("resnet50", 1024, 0.6, 100, 224, IMAGENET_AUG),
    "imagenet": ("resnet50", 1024, 0.6, 100, 224, IMAGENET_AUG),
}


def _commands(after: str = "") -> list[list[str]]:
    """The ``python -m solo_hyper compare`` commands of docs/results.md (those after the heading
    ``after``), with the words bash passes (tests/doc_shell.py)."""
    text = RESULTS.read_text()
    start = text.count("\n", 0, text.index(after)) + 1 if after else 0
    return [list(c.words) for c in commands([RESULTS.resolve()])
            if c.words[:4] == ("python", "-m", "solo_hyper", "compare")
            and int(c.where.split(":")[1]) > start]  # fmt: skip


def _options(words: list[str]) -> dict[str, list[str]]:
    opts, key = {}, None
    for w in words[4:]:
        if w.startswith("--"):
            key = w
            opts.setdefault(key, [])
        elif key is not None:
            opts[key].append(w)
    return opts


def test_table_commands_name_existing_configs_and_override_no_recipe_key():
    assert len(_commands(GPU_SECTION)) >= 10
    for words in _commands():
        opts = _options(words)
        for path in opts["--configs"] + opts.get("--linear-config", []):
            assert Path(path).is_file(), (path, words)
        bad = [s for s in opts.get("--set", []) if not ALLOWED_SET.match(s)]
        assert not bad, (bad, words)
    for words in _commands(GPU_SECTION):  # the tables' epochs are the configs' own
        assert "--epochs" not in words, words


@pytest.mark.parametrize("dataset", sorted(HCL_TABLE1))
def test_hcl_table1_configs_carry_the_papers_recipe(dataset):
    backbone, batch, lr, epochs, crop, aug = HCL_TABLE1[dataset]
    pair = {f"configs/pretrain/{dataset}/{m}.yaml" for m in ("simclr", "hcl")}
    assert any(pair <= set(w) for w in _commands()), f"docs/results.md has no Table 1 command for {dataset}"
    for method in ("simclr", "hcl"):
        prep = prepare(f"configs/pretrain/{dataset}/{method}.yaml")
        cfg = prep.cfg
        devices = cfg["devices"] if isinstance(cfg["devices"], int) else len(cfg["devices"])
        assert cfg["optimizer"]["batch_size"] * devices == batch
        assert (cfg["backbone"]["name"], cfg["optimizer"]["lr"], cfg["max_epochs"]) == (
            backbone, lr, epochs,
        )  # fmt: skip
        assert cfg["optimizer"]["name"] == "sgd" and cfg["scheduler"]["name"] == "cosine"
        assert cfg["optimizer"]["weight_decay"] == 1e-4
        (entry,) = cfg["augmentations"]
        assert entry["crop_size"] == crop and entry["num_crops"] == 2
        assert entry["rrc"]["crop_min_scale"] == 0.08
        assert {k: entry[k]["prob"] for k in aug} == aug
        assert prep.small_images == (crop <= 64)  # ResNet-18 on 64 px: the CIFAR stem
        if method == "hcl":
            assert cfg["method_kwargs"]["curvature"] == (0.6 if dataset == "cifar10" else 0.1)


# EBCLR Table 1 baselines: the official configs_<method>/fmnist_b256.yaml
EBCLR_BASELINES = {
    "simclr": {"temperature": 0.1, "proj_output_dim": 128},
    "mocov2plus": {"temperature": 0.07, "queue_size": 65536, "proj_output_dim": 128},
    "simsiam": {"proj_output_dim": 2048, "pred_hidden_dim": 512},
    "byol": {"proj_output_dim": 256, "proj_hidden_dim": 4096},
}
MOMENTUM = {"mocov2plus": 0.999, "byol": 0.9}


@pytest.mark.parametrize("method", sorted(EBCLR_BASELINES))
def test_ebclr_table1_baselines_carry_the_official_settings(method):
    path = f"configs/ebclr/baselines/fashionmnist-{method}.yaml"
    assert any(path in words for words in
               (w for c in _commands() for w in [_options(c)["--configs"]]))
    prep = prepare(path)
    cfg = prep.cfg
    opt = cfg["optimizer"]
    assert (opt["name"], opt["batch_size"], opt["weight_decay"]) == ("sgd", 256, 1e-4)
    assert opt["lr"] == pytest.approx(0.03 * opt["batch_size"] / 256)
    assert cfg["scheduler"]["name"] == "none" and cfg["max_epochs"] == 100
    assert cfg["backbone"]["name"] == "resnet18" and prep.small_images
    (entry,) = cfg["augmentations"]
    assert entry["rrc"]["enabled"] and entry["rrc"]["crop_min_scale"] == 0.08
    # crops only: the official baseline configs set no noise_std (EBCLR's sets 0.03)
    for key in ("color_jitter", "grayscale", "gaussian_blur", "solarization", "horizontal_flip",
                "gaussian_noise"):  # fmt: skip
        assert entry[key]["prob"] == 0.0, key
    for key, value in EBCLR_BASELINES[method].items():
        assert cfg["method_kwargs"][key] == value, key
    model = adapter.build_method(cfg, 10, prep.small_images, prep.num_crops)
    if method in MOMENTUM:  # a constant EMA, as the official loop
        updater = model.momentum_updater
        assert updater.base_tau == updater.final_tau == MOMENTUM[method]
    if method == "mocov2plus":
        assert model.queue.shape[-1] == 65536
    with torch.no_grad():
        out = model(torch.randn(2, 3, 28, 28))
    assert out["feats"].shape == (2, 512)
