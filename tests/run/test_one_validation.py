"""``prepare`` is the one validation pass: it checks a config without changing it, makes each
plugin method's arguments (its objective's ``Args``) once, and the run's module is built from
what it returns, with no second check."""

from __future__ import annotations

import copy

import pytest

from solo_hyper import objectives
from solo_hyper.config import complete, validate
from solo_hyper.config.shipped import shipped_config
from solo_hyper.run.train import initial_model, prepare
from solo_hyper.solo import adapter, common

TINY = ["data.train_subset=32", "data.val_subset=16", "optimizer.batch_size=16", "max_epochs=1"]


@pytest.mark.parametrize("name", sorted(objectives.OBJECTIVES))
def test_building_a_runs_module_from_prepare_makes_its_arguments_once(
    name, monkeypatch, tmp_path, fashion_mnist_available
):
    """A counting spy on the objective's ``Args``: prepare plus the module built from its output
    (``initial_model``, what ``pretrain`` trains) construct them exactly once, under either
    solo-learn; the module holds prepare's very object."""
    args_cls = objectives.OBJECTIVES[name].Args
    made = []
    check = args_cls.__post_init__

    def counting(self) -> None:
        if type(self) is args_cls:
            made.append(self)
        check(self)

    monkeypatch.setattr(args_cls, "__post_init__", counting)
    monkeypatch.setattr(common, "_MADE", {})  # nothing made by earlier tests
    prep = prepare(str(shipped_config(f"pretrain/fashionmnist/{name}.yaml")),
                   [*TINY, f"checkpoint.dir={tmp_path}", "checkpoint.enabled=false"])  # fmt: skip
    assert len(made) == 1 and prep.args is made[0]
    model, _, _ = initial_model(prep)
    assert len(made) == 1, f"{name}: {len(made)} constructions of {args_cls.__name__}"
    assert model.args is prep.args and model.objective.args is prep.args


def test_validate_checks_a_completed_config_without_changing_it():
    cfg = complete(
        {"method": "hcl", "data": {"dataset": "fashionmnist"}, "max_epochs": 1,
         "augmentations": [{"crop_size": 28}]},  # fmt: skip
        adapter.trainer_arg_names(),
    )
    assert cfg["data"]["mean"] == [0.2860] * 3  # completion filled the dataset's statistics
    before = copy.deepcopy(cfg)
    validate(cfg, 2, ["resnet18"])
    assert cfg == before
