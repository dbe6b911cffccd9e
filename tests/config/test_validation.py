"""One validation pass at the entry: the method_kwargs schema is the objective's dataclass, crop
entries are completed from one table of defaults (the config keeps them as written, so its hash
does not move), and ``devices`` has one reading, ``devices: auto`` included."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import tiny_config

from solo_hyper.augment import DEFAULT_CROP
from solo_hyper.config import (
    ConfigError,
    crop_counts,
    crop_entries,
    small_images,
    training_processes,
)
from solo_hyper.methods import CLASSES
from solo_hyper.run.identity import config_hash
from solo_hyper.run.train import prepare
from solo_hyper.solo import adapter
from solo_hyper.solo.baselines import BASELINES
from solo_hyper.solo.common import scaled_lr


@pytest.mark.parametrize(
    "accelerator, devices, gpus, processes",
    [
        ("cpu", 1, 0, 1), ("cpu", "auto", 0, 1), ("auto", "auto", 0, 1), (None, None, 0, 1),
        ("gpu", "auto", 4, 4), ("auto", "auto", 2, 2), ("cpu", "auto", 4, 1), ("gpu", -1, 3, 3),
        ("gpu", [0, 2], 4, 2), ("gpu", "0,1", 2, 2), ("cpu", "3", 0, 3), ("cpu", 2, 0, 2),
    ],
)  # fmt: skip
def test_devices_have_one_reading(accelerator, devices, gpus, processes):
    assert training_processes(accelerator, devices, gpus=gpus) == processes


def test_scaled_lr_takes_devices_auto():
    """It raised int('auto') after the data had loaded."""
    cfg = prepare(None, base=tiny_config("hcl", devices="auto", optimizer={"scale_lr": True})).cfg
    assert scaled_lr(cfg) == pytest.approx(0.05 * 16 / 256)


def test_the_global_batch_check_reads_devices_the_same_way():
    """NNCLR's queue must be a multiple of batch x processes: with devices=2 on the CPU, 16 x 2."""
    base = tiny_config("nnclr", devices=2, method_kwargs={"queue_size": 48, "proj_hidden_dim": 16})
    with pytest.raises(ConfigError, match=r"global batch \(optimizer.batch_size x devices = 32\)"):
        prepare(None, base=base)


def test_crop_entries_are_completed_once_and_the_config_keeps_them_as_written():
    cfg = tiny_config("hcl", augmentations=[{"crop_size": 28}, {"crop_size": 12, "num_crops": 4}])
    prep = prepare(None, base=cfg)
    assert prep.cfg["augmentations"] == cfg["augmentations"]  # what the hash is of
    assert [c["num_crops"] for c in prep.crops] == [DEFAULT_CROP["num_crops"], 4]
    assert prep.crops[1]["rrc"] == DEFAULT_CROP["rrc"]
    assert prep.num_crops == crop_counts(prep.crops) == (2, 4)
    assert prep.small_images is small_images(prep.crops) is True
    assert crop_entries(prep.cfg) == prep.crops
    assert config_hash(prep.cfg) == config_hash(prepare(None, base=cfg).cfg)


def test_a_crop_default_is_checked_like_a_written_value():
    """The completed entries are what is checked: a crop larger than the images, written or the
    default of 32 on 28-pixel Fashion-MNIST, is the same error."""
    written = tiny_config("hcl", augmentations=[{"crop_size": 32, "num_crops": 2}])
    default = tiny_config("hcl", augmentations=[{"num_crops": 2}])
    for cfg in (written, default):
        with pytest.raises(ConfigError, match=r"augmentations.0.crop_size=32 is larger than the 28x28"):
            prepare(None, base=cfg)


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_the_method_kwargs_schema_is_the_objectives_dataclass(name):
    fields = {f.name: f.default for f in dataclasses.fields(CLASSES[name].OBJECTIVE.Args)}
    assert adapter.method_info(name).defaults == fields
    prep = prepare(None, base=tiny_config(name))  # the tiny projector, every other default
    assert prep.cfg["method_kwargs"] == {**fields, **tiny_config(name)["method_kwargs"]}
    wrong = next(iter(fields)) + "x"
    with pytest.raises(ConfigError, match=f"method_kwargs.{wrong}.*did you mean"):
        prepare(None, base=tiny_config(name, method_kwargs={wrong: 1}))


def test_every_method_answers_the_config_checks_without_lookups():
    """Baselines and this plugin's methods alike: ``method_info`` declares the arguments' check
    (this plugin's methods; the baselines' are their schema's types), check_config and
    required_crops, so prepare calls them without looking them up; a baseline's check_config
    runs its table's constraints."""
    for name in adapter.registered_methods():
        info = adapter.method_info(name)
        assert callable(info.check_config) and info.required_crops in (None, 2), name
        assert (info.check_args is not None) is (name in CLASSES), name
    assert any(b.checks for b in BASELINES.values())
