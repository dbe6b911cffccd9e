"""Bad input to the library is an error before anything is computed (issue 33): the objectives
check their batch (crop counts against what they declare, batch sizes, NaN/Inf crops), the loss
modules name non-finite points, and a budget that trains nothing is refused before any work."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_config
from test_objectives import CASES, encoder, fixed_batch

from solo_hyper.config import ConfigError
from solo_hyper.losses import HyperbolicInfoNCELoss, InfoNCELoss
from solo_hyper.objectives import Net


def with_crops(batch: list, crops: list) -> list:
    return [batch[0], crops, batch[2]]


def nan_in(x: torch.Tensor) -> torch.Tensor:
    x = x.clone()
    x[1, 0, 2, 3] = float("nan")
    return x


def inf_in(x: torch.Tensor) -> torch.Tensor:
    x = x.clone()
    x[0, 0, 0, 0] = float("inf")
    return x


# (objective, batch -> bad batch, message regex)
BATCH_CASES = [
    ("hcl", lambda b: with_crops(b, b[1][:1]), r"HCL needs at least 2 crops per image .* got 1"),
    ("shcl", lambda b: with_crops(b, b[1][:1]), r"SHCL needs at least 2 crops per image"),
    ("rhcl", lambda b: with_crops(b, [*b[1], b[1][0]]), r"RHCL trains on exactly 2 crops per image, got 3"),
    ("ebclr", lambda b: with_crops(b, b[1][:1]), r"EBCLR trains on exactly 2 crops per image, got 1"),
    ("hcl", lambda b: with_crops(b, [b[1][0], b[1][1][:7]]), r"crop 1 holds 7 images, the indexes 16"),
    ("rocl", lambda b: with_crops(b, [b[1][0][:7], b[1][1]]), r"crop 0 holds 7 images, the indexes 16"),
    ("hcl", lambda b: [b[0], b[1], b[2][:7]], r"targets must be a \(16,\) tensor like the indexes"),
    ("hcl", lambda b: [b[0][:, None], b[1], b[2]], r"indexes must be a \(B,\) tensor"),
    ("hcl", lambda b: with_crops(b, torch.stack(b[1])), r"crops must be a list of \(B, C, H, W\) tensors"),
    ("hcl", lambda b: with_crops(b, [b[1][0], b[1][1][:, 0]]), r"crop 1 must be a \(B, C, H, W\) tensor"),
    ("hcl", lambda b: b[:2], r"HCL takes a batch \[indexes \(B,\), crops"),
    ("hcl", lambda b: with_crops(b, [b[1][0], nan_in(b[1][1])]), r"crop 1 holds NaN values \(1 of"),
    ("rhcl", lambda b: with_crops(b, [inf_in(b[1][0]), b[1][1]]), r"crop 0 holds Inf values \(1 of"),
    ("ebclr", lambda b: with_crops(b, [nan_in(b[1][0]), b[1][1]]), r"EBCLR: crop 0 holds NaN values"),
]


@pytest.mark.parametrize("name, corrupt, message", BATCH_CASES)
def test_a_bad_batch_is_an_error_before_any_work(name, corrupt, message, monkeypatch):
    objective = CASES[name]()
    net = Net(encoder(), objective.head(32))
    calls = []
    monkeypatch.setattr(type(objective), "prepare", lambda *a, **k: calls.append("prepare"))
    net.encoder.register_forward_pre_hook(lambda *a: calls.append("encoder"))
    with pytest.raises(ValueError, match=message):
        objective.step(net, corrupt(fixed_batch(objective)))
    assert calls == []  # nothing was computed


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_good_batch_passes_the_check(name):
    objective = CASES[name]()
    objective.check_batch(fixed_batch(objective))


def points(n: int = 8) -> torch.Tensor:
    z = torch.nn.functional.normalize(torch.randn(n, 4, generator=torch.Generator().manual_seed(0)), dim=1)
    return 0.5 * z


@pytest.mark.parametrize(
    "loss, z, message",
    [
        (HyperbolicInfoNCELoss(0.2, curvature=1.0), points().index_fill(0, torch.tensor([2]), float("nan")),
         r"out0 holds NaN values \(4 of 32\)"),
        (HyperbolicInfoNCELoss(0.2, curvature=1.0), points().index_fill(0, torch.tensor([0]), float("inf")),
         r"out0 holds Inf values"),
        (InfoNCELoss(0.2), points().index_fill(0, torch.tensor([2]), float("nan")), r"out0 holds NaN values"),
    ],
)  # fmt: skip
def test_loss_modules_name_non_finite_points(loss, z, message):
    with pytest.raises(ValueError, match=message):
        loss(z, points(), torch.arange(8) % 4)


# (override, message): budgets that would train nothing and report numbers as if they had
BUDGET_CASES = [
    ({"limit_train_batches": 0}, r"limit_train_batches=0 trains nothing; give a number of batches >= 1"),
    ({"limit_train_batches": 0.0}, r"limit_train_batches=0.0 trains nothing"),
    ({"limit_train_batches": 1.5}, r"a fraction must be in \(0, 1\]"),
    ({"max_steps": 0}, r"max_steps=0 trains nothing; give -1 \(no limit\) or a step count >= 1"),
    ({"max_epochs": 0}, r"max_epochs must be an integer >= 1, got 0"),
]


@pytest.mark.parametrize("override, message", BUDGET_CASES)
def test_a_budget_that_trains_nothing_is_refused_before_work(override, message):
    from solo_hyper.run.train import prepare

    with pytest.raises(ConfigError, match=message):
        prepare(None, base=tiny_config("hcl", **override))


def test_the_command_line_refuses_limit_train_batches_0_before_any_work(tmp_path, capsys):
    from solo_hyper.cli.main import main

    code = main(["pretrain", "--quiet", "--config", "configs/pretrain/fashionmnist/hcl.yaml",
                 f"checkpoint.dir={tmp_path}", "limit_train_batches=0"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "limit_train_batches=0 trains nothing" in err
    assert list(tmp_path.iterdir()) == []  # no run directory: nothing started
