"""Config loading, overrides and validation: bad input stops before any work, with a fix."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from conftest import assert_model_follows_config, tiny_config

import solo_hyper.methods  # noqa: F401  (registers the methods)
from solo_hyper.config import ConfigError, load_config, parse_override
from solo_hyper.run.train import prepare

CONFIGS = sorted(Path("configs/pretrain").rglob("*.yaml"))


def test_overrides_are_yaml_typed_and_dotted(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"a": {"b": 1}, "augmentations": [{"crop_size": 28}]}))
    cfg = load_config(path, ["a.b=0.5", "a.c=true", "x=null", "augmentations.0.crop_size=24"])
    assert cfg == {"a": {"b": 0.5, "c": True}, "x": None, "augmentations": [{"crop_size": 24}]}
    assert parse_override("k=[1, 2]") == (["k"], [1, 2])
    with pytest.raises(ConfigError, match="dotted.key=value"):
        parse_override("novalue")


BAD = [
    ("unknown method", {"method": "hlc"}, "unknown method 'hlc'.*did you mean 'hcl'"),
    (
        "misspelt top key",
        {"max_epoch": 3},
        "unknown config key 'max_epoch'.*did you mean 'max_epochs'",
    ),
    (
        "misspelt nested key",
        {"optimizer": {"batchsize": 3}},
        "optimizer.batchsize.*did you mean 'batch_size'",
    ),
    (
        "misspelt method key",
        {"method_kwargs": {"curvatur": 0.1}},
        "method_kwargs.curvatur.*did you mean 'curvature'",
    ),
    ("zero curvature", {"method_kwargs": {"curvature": 0.0}}, "curvature must be > 0"),
    ("negative curvature", {"method_kwargs": {"curvature": -1}}, "curvature must be > 0"),
    ("zero temperature", {"method_kwargs": {"temperature": 0}}, "temperature must be > 0"),
    (
        "crop larger than images",
        {"augmentations": [{"crop_size": 32, "num_crops": 2}]},
        "crop_size=32 is larger than the 28x28",
    ),
    ("batch of one", {"optimizer": {"batch_size": 1}}, "batch_size must be an integer >= 2"),
    (
        "one large crop",
        {"augmentations": [{"crop_size": 28, "num_crops": 1}]},
        "needs 2 large crops",
    ),
    ("unknown dataset", {"data": {"dataset": "fmnist"}}, "unknown data.dataset 'fmnist'"),
    (
        "unknown backbone",
        {"backbone": {"name": "resnet19"}},
        "unknown backbone.name 'resnet19'.*resnet18",
    ),
    (
        "unknown optimizer",
        {"optimizer": {"name": "sdg"}},
        "optimizer.name 'sdg'.*did you mean 'sgd'",
    ),
    (
        "the removed distance key",
        {"method_kwargs": {"distance": "cosine"}},
        "unknown .*'method_kwargs.distance'.*'geometry'",
    ),
    (
        "bad rrc scale",
        {"augmentations": [{"crop_size": 28, "rrc": {"crop_min_scale": 0.0}}]},
        "crop_min_scale",
    ),
    ("custom without image size", {"data": {"dataset": "custom"}}, "image_size is required"),
    ("bad clip radius", {"method_kwargs": {"clip_radius": -2.0}}, "clip_radius must be > 0"),
]


@pytest.mark.parametrize("case, sections, message", BAD, ids=[b[0] for b in BAD])
def test_bad_config_is_rejected_with_a_clear_message(case, sections, message):
    base = tiny_config("hcl")
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            base[key] = {**base[key], **value}
        else:
            base[key] = value
    with pytest.raises(ConfigError, match=message):
        prepare(None, base=base)


@pytest.mark.parametrize("path", CONFIGS, ids=[str(p) for p in CONFIGS])
def test_every_shipped_config_builds_the_model_it_describes(path):
    from solo_hyper.solo import adapter

    prep = prepare(str(path))
    method = path.stem.split("-")[0]  # simclr-rocl-recipe.yaml: SimCLR with RoCL's recipe
    assert prep.cfg["method"] == method
    from solo_hyper.methods import CLASSES

    model = adapter.build_method(prep.cfg, 10, prep.small_images, prep.num_crops)
    if method in CLASSES:  # the objective the config names, with the config's arguments
        assert type(model.objective) is CLASSES[method].OBJECTIVE
        assert model.args == model.objective.Args(**prep.cfg["method_kwargs"])
    else:  # solo's own class of that name, with this plugin's base
        solo_class = adapter.registered_methods()[method]
        assert isinstance(model, solo_class) and isinstance(model, adapter.PluginBase)
    assert_model_follows_config(model, prep.cfg)


def test_shipped_configs_cover_the_paper_recipes():
    for ds, c in [("cifar10", 0.6), ("cifar100", 0.1)]:
        cfg = yaml.safe_load(Path(f"configs/pretrain/{ds}/hcl.yaml").read_text())
        assert cfg["method_kwargs"]["curvature"] == c
        assert cfg["optimizer"]["batch_size"] == 512 and cfg["optimizer"]["lr"] == 0.5
        assert cfg["max_epochs"] == 200 and cfg["backbone"]["name"] == "resnet18"
        assert (
            yaml.safe_load(Path(f"configs/pretrain/{ds}/shcl.yaml").read_text())["backbone"]["name"]
            == "resnet50"
        )
