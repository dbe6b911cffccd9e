"""solo-learn 1.0.2's launcher flags accepted by ``python -m solo_hyper pretrain``: a table test
over the vendored PyPI 1.0.2's ``bash_files/pretrain/*/*.sh`` of the methods registered here (solo's
baselines), and the mapping's own rules."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from conftest import tiny_config
from vendored import bash_flags, unpack

import solo_hyper.methods  # noqa: F401  (registers the methods)
from solo_hyper.cli.main import build_parser, own_options
from solo_hyper.cli.run_solo import run_solo
from solo_hyper.cli.solo_flags import (
    FLAG_KEYS,
    SWITCHES,
    split_flags,
    split_pretrain_argv,
    to_overrides,
)
from solo_hyper.config import ConfigError
from solo_hyper.run.train import prepare
from solo_hyper.solo import adapter

DATASETS = {"cifar": "cifar10"}  # the bash files' folder -> what $1 stands for here


@pytest.fixture(scope="module")
def solo_102(tmp_path_factory) -> Path:
    return unpack("1.0.2", tmp_path_factory.mktemp("solo-102"))


def scripts(root: Path) -> list[tuple[Path, str]]:
    found = []
    for folder, dataset in DATASETS.items():
        for script in sorted((root / "bash_files" / "pretrain" / folder).glob("*.sh")):
            method = split_flags(bash_flags(script, dataset))["method"][0]
            if method in adapter.registered_methods():
                found.append((script, dataset))
    return found


def _value(text: str):
    return yaml.safe_load(text)


@pytest.mark.skipif(
    adapter.API.startswith("solo-learn main"), reason="1.0.2's flags for 1.0.2's methods"
)
def test_every_shared_bash_file_becomes_a_valid_config(solo_102):
    table = scripts(solo_102)
    assert len(table) >= 10  # simclr, byol, barlow_twins, ... on CIFAR
    for script, dataset in table:
        flags = bash_flags(script, dataset)
        parsed = split_flags(flags)
        base = tiny_config(parsed["method"][0], method_kwargs={})
        base["augmentations"] = [{"crop_size": 32, "num_crops": 2}]
        base["data"]["train_subset"] = None  # the whole CIFAR set, as the bash files train on
        overrides = to_overrides(flags) + ["wandb.enabled=false", "accelerator=cpu", "devices=1"]
        try:
            cfg = prepare(None, overrides, base=base).cfg
        except ConfigError as err:
            raise AssertionError(f"{script.name}: {err}") from None
        asymmetric = any(len(set(v)) > 1 for f, v in parsed.items() if f in FLAG_KEYS)
        for flag, values in parsed.items():
            if flag in SWITCHES or flag == "optimizer":  # --lars wraps it: checked below
                continue
            if flag not in FLAG_KEYS and len(values) > 1:  # nargs="+": a list
                assert cfg["method_kwargs"][flag] == [yaml.safe_load(v) for v in values], flag
                continue
            if flag == "num_crops_per_aug" and not asymmetric:  # one entry makes every crop
                assert cfg["augmentations"][0]["num_crops"] == sum(map(int, values)), script.name
            elif flag in FLAG_KEYS and FLAG_KEYS[flag].startswith("augmentations.") and asymmetric:
                for i, value in enumerate(values):  # one entry per crop pipeline
                    node = cfg["augmentations"][i]
                    for part in FLAG_KEYS[flag].split(".")[2:]:
                        node = node[part]
                    assert node == _value(value), (script.name, flag, i)
            elif flag in FLAG_KEYS:
                node = cfg
                for part in FLAG_KEYS[flag].split("."):
                    node = node[int(part)] if isinstance(node, list) else node[part]
                assert node == _value(values[0]), (script.name, flag)
            elif flag not in ("data_dir", "train_dir", "val_dir", "gpus"):
                expected = _value(values[0]) if values else True
                assert cfg["method_kwargs"][flag] == expected, (script.name, flag)
        assert cfg["optimizer"]["name"] == ("lars" if "lars" in parsed else parsed["optimizer"][0])
        assert cfg["devices"] == 1 and cfg["data"]["dataset"] == dataset


def test_flags_map_to_the_yaml_keys():
    out = to_overrides(
        ["--optimizer", "sgd", "--lars", "--lr", "0.4", "--gaussian_prob", "0.0", "0.0",
         "--data_dir", "/d", "--train_dir", "c/train", "--gpus", "0,1", "--temperature", "0.2",
         "--supervised"]
    )  # fmt: skip
    assert out == [
        "optimizer.name=sgd", "optimizer.name=lars", "optimizer.lr=0.4",
        "augmentations.0.gaussian_blur.prob=0.0", "method_kwargs.temperature=0.2",
        "method_kwargs.supervised=true", "data.train_path=/d/c/train", "accelerator=gpu",
        "devices=[0, 1]",
    ]  # fmt: skip


def test_per_pipeline_values_become_one_crop_entry_per_pipeline():
    out = to_overrides(["--solarization_prob", "0.0", "0.2", "--brightness", "0.4", "--lr", "1"])
    assert out[0] == (
        'augmentations=[{"num_crops": 1, "solarization": {"prob": 0.0}, "color_jitter": '
        '{"brightness": 0.4}}, {"num_crops": 1, "solarization": {"prob": 0.2}, '
        '"color_jitter": {"brightness": 0.4}}]'
    )
    assert out[1:] == ["optimizer.lr=1"]
    with pytest.raises(ConfigError, match="solarization_prob: give 1 or 3 values"):
        to_overrides(["--solarization_prob", "0.0", "0.2", "--hue", "0.1", "0.1", "0.2"])


def test_the_pretrain_command_takes_the_flags(capsys):
    from solo_hyper.cli.main import main

    code = main(["pretrain", "--config", "configs/pretrain/fashionmnist/hcl.yaml", "--temprature", "0.2"])
    assert code == 2 and "method_kwargs.temprature" in capsys.readouterr().err  # checked by prepare
    with pytest.raises(SystemExit):
        main(["compare", "--configs", "a.yaml", "--lr", "0.4"])
    argv = ["pretrain", "--config", "c.yaml", "max_epochs=2", "--lr", "0.4", "--lars", "--quiet",
            "--gaussian_prob", "1.0", "0.1", "x.y=1", "--new-run"]  # fmt: skip
    assert split_pretrain_argv(argv, own_options(build_parser(), "pretrain")) == (
        ["pretrain", "--config", "c.yaml", "max_epochs=2", "--quiet", "x.y=1", "--new-run"],
        ["--lr", "0.4", "--lars", "--gaussian_prob", "1.0", "0.1"],
    )


def test_run_solo_refuses_102s_launcher_with_the_command_to_use(solo_102):
    with pytest.raises(ConfigError, match="1.0.2 launcher.*solo_hyper pretrain"):
        run_solo(str(solo_102 / "main_pretrain.py"), [])


def test_num_crops_per_aug_gives_each_pipeline_its_crops():
    """PyPI 1.0.2's ``--num_crops_per_aug``: pipelines that agree fold into one entry making all
    the crops; pipelines that differ get one entry each with its own count."""
    assert to_overrides(["--num_crops_per_aug", "2", "--auto_resume"]) == [
        "augmentations.0.num_crops=2", "auto_resume.enabled=true",
    ]  # fmt: skip
    assert to_overrides(["--num_crops_per_aug", "1", "1", "--hue", "0.1"]) == [
        "augmentations.0.num_crops=2", "augmentations.0.color_jitter.hue=0.1",
    ]  # fmt: skip
    (crops,) = to_overrides(["--num_crops_per_aug", "2", "1", "--solarization_prob", "0.0", "0.2"])
    entries = yaml.safe_load(crops.split("=", 1)[1])
    assert [(e["num_crops"], e["solarization"]["prob"]) for e in entries] == [(2, 0.0), (1, 0.2)]
    with pytest.raises(ConfigError, match="num_crops_per_aug: give 3 values"):
        to_overrides(["--num_crops_per_aug", "1", "1", "--gaussian_prob", "0.0", "0.1", "0.2"])
