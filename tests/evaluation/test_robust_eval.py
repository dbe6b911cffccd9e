"""Robust evaluation: LE / r-LE heads, adversarial fine-tuning, white-box PGD accuracy, the CLI."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler
from torch import nn

from solo_hyper.augment import to_float_rgb
from solo_hyper.backbones import SmallCNN
from solo_hyper.config import ConfigError
from solo_hyper.data import DATASETS, load_fashion_mnist
from solo_hyper.evaluation.adversarial import (
    PGDSpec,
    PixelClassifier,
    Schedule,
    StandardizedLinear,
    adversarial_finetune,
    extract_features,
    robust_accuracy,
    train_linear_head,
)
from solo_hyper.evaluation.robust import load_robust_config

CPU = torch.device("cpu")
INFO = DATASETS["fashionmnist"]


@pytest.fixture(scope="module")
def fmnist(fashion_mnist_available_module):
    """Tiny real Fashion-MNIST splits as batch functions over [0, 1] pixels."""
    g = torch.Generator().manual_seed(0)
    images, labels = load_fashion_mnist(train=True)
    keep = torch.randperm(len(labels), generator=g)[:640]
    x, y = to_float_rgb(images[keep]), labels[keep]

    def split(lo, hi, bs=128):
        return lambda: ((x[i : i + bs], y[i : i + bs]) for i in range(lo, hi, bs))

    return split(0, 512, 64), split(512, 640)


@pytest.fixture(scope="module")
def fashion_mnist_available_module():
    from solo_hyper.data import locate_fashion_mnist

    if locate_fashion_mnist(None) is None:
        pytest.fail("Fashion-MNIST is required: run ./scripts/bootstrap.sh")


def tiny_classifier(seed: int = 0) -> PixelClassifier:
    torch.manual_seed(seed)
    encoder = SmallCNN(width=8)
    return PixelClassifier(encoder, nn.Linear(encoder.num_features, 10), INFO.mean, INFO.std)


def encoder_state(model: PixelClassifier) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in model.encoder.state_dict().items()}


@pytest.fixture(scope="module")
def le_head(fmnist):
    """A clean LE head on a small CNN given a few epochs of plain supervised training first
    (adversarial training with a zero budget; random conv features are nearly constant)."""
    train, _ = fmnist
    model = tiny_classifier()
    adversarial_finetune(model, train, Schedule(epochs=3, milestones=()), CPU, PGDSpec(0, 0, 0))
    model.head.reset_parameters()
    before = encoder_state(model)
    schedule = Schedule(epochs=20, lr=0.1, milestones=(15,), batch_size=64)
    return model, before, train_linear_head(model, train, schedule, CPU)


# ----------------------------------------------------------------------------- helpers


def test_pgd_spec_checks_its_budget_and_names_itself():
    assert PGDSpec(8 / 255, 0.8 / 255, 20).label == "PGD-20 8/255"
    assert PGDSpec(0.1, 0.01, 3).label == "PGD-3 0.1"
    for bad in [dict(eps=-0.1, alpha=0.1, steps=1), dict(eps=0.1, alpha=-1, steps=1),
                dict(eps=0.1, alpha=0.1, steps=-1), dict(eps=0.1, alpha=0.1, steps=1.5)]:  # fmt: skip
        with pytest.raises(ValueError, match="must be"):
            PGDSpec(**bad)


def test_linear_evaluation_learns_and_leaves_the_encoder_untouched(le_head):
    model, before, losses = le_head
    assert losses[-1] < losses[0]
    after = model.encoder.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # weights and BN statistics
    assert all(p.requires_grad for p in model.encoder.parameters())  # flags handed back


def test_white_box_accuracies_are_percentages_and_attacks_only_hurt(le_head, fmnist):
    model, _, _ = le_head
    _, val = fmnist
    attacks = {
        "none": PGDSpec(0.0, 0.0, 5),
        "small": PGDSpec(2 / 255, 0.5 / 255, 3),
        "pgd": PGDSpec(8 / 255, 2 / 255, 5),
    }
    acc = robust_accuracy(model, val, attacks, CPU)
    assert set(acc) == {"A_nat", "none", "small", "pgd"}
    assert all(0.0 <= v <= 100.0 for v in acc.values())
    assert acc["A_nat"] > 40.0  # a linear head on random conv features of Fashion-MNIST
    assert acc["none"] == acc["A_nat"]  # a zero budget is the clean accuracy exactly
    assert acc["pgd"] <= acc["small"] <= acc["A_nat"]
    assert acc["pgd"] < acc["A_nat"]
    assert robust_accuracy(model, val, attacks, CPU) == acc  # seeded random starts


def test_each_accuracy_comes_with_which_images_it_got_right(le_head, fmnist):
    """Per-image outcomes, in the batches' order: as many as the accuracy's images, their share
    the accuracy; a zero budget's are the clean pass's exactly."""
    model, _, _ = le_head
    _, val = fmnist
    attacks = {"none": PGDSpec(0.0, 0.0, 5), "pgd": PGDSpec(8 / 255, 2 / 255, 5)}
    counts, outcomes = {}, {}
    acc = robust_accuracy(model, val, attacks, CPU, counts=counts, outcomes=outcomes)
    assert set(outcomes) == set(acc)
    for name, hits in outcomes.items():
        assert len(hits) == counts[name]
        assert 100.0 * sum(hits) / len(hits) == pytest.approx(acc[name])
    assert outcomes["none"] == outcomes["A_nat"]
    assert outcomes["pgd"] != outcomes["A_nat"]  # the attack flips some images


def test_a_cached_entry_without_a_required_key_is_computed_again(tmp_path):
    """An attack evaluated before per-image outcomes were stored: robust-eval re-runs it (and
    stores the outcomes) instead of reading the entry without them."""
    from solo_hyper.evaluation.robust_cache import EvaluationCache

    cache = EvaluationCache(tmp_path, {"run": "x"})
    old = cache.json("attack", {"a": 1}, lambda: {"accuracy": 1.0})
    assert old == {"accuracy": 1.0}
    assert cache.json("attack", {"a": 1}, lambda: {"accuracy": 2.0}) == old  # a plain hit
    new = cache.json("attack", {"a": 1}, lambda: {"accuracy": 1.0, "outcomes": "10"},
                     required=("outcomes",))  # fmt: skip
    assert new["outcomes"] == "10"
    assert cache.json("attack", {"a": 1}, lambda: {}, required=("outcomes",)) == new  # stored


def test_robust_linear_evaluation_trains_the_head_on_attacks_only(fmnist):
    train, _ = fmnist
    model = tiny_classifier()
    before, head = encoder_state(model), model.head.weight.detach().clone()
    seen = []
    model.encoder.register_forward_pre_hook(lambda m, args: seen.append(m.training))
    losses = train_linear_head(
        model, train, Schedule(epochs=1, lr=0.1, milestones=()), CPU, PGDSpec(8 / 255, 0.007, 2)
    )
    assert len(losses) == 1 and losses[0] > 0
    assert not torch.equal(model.head.linear.weight, head)
    assert all(torch.equal(before[k], v) for k, v in model.encoder.state_dict().items())
    assert seen and not any(seen)  # the frozen encoder always runs in eval mode


def test_the_standardised_head_skips_dead_units_and_unscaled_is_the_plain_head():
    g = torch.Generator().manual_seed(0)
    feats = 5.0 + 1e-3 * torch.randn(256, 16, generator=g)  # an untrained network's: tiny spread
    feats[:, 3] = 2.0  # a dead unit
    linear = nn.Linear(16, 10)
    head = StandardizedLinear.fitted(linear, feats)
    assert head.std[3] == 1.0 and head.std[0] < 0.01  # never divided by its zero spread
    torch.testing.assert_close(head.mean, feats.mean(0))
    with torch.no_grad():
        assert torch.isfinite(head(feats)).all()
        assert torch.equal(StandardizedLinear.unscaled(linear)(feats), linear(feats))


def test_the_unstandardised_head_is_rocls_sgd_on_raw_features_exactly(fmnist):
    """standardize=False against an independent loop: SGD on raw features, same seeded order."""
    train, _ = fmnist
    schedule = Schedule(epochs=3, lr=0.1, milestones=(2,), batch_size=64)
    model = tiny_classifier()
    reference = nn.Linear(model.head.in_features, 10)
    reference.load_state_dict(model.head.state_dict())
    train_linear_head(model, train, schedule, CPU, seed=3, standardize=False)
    feats, labels = extract_features(tiny_classifier(), train, CPU)
    opt = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    order = torch.Generator().manual_seed(3)
    for epoch in range(3):
        for group in opt.param_groups:
            group["lr"] = 0.1 if epoch < 2 else 0.01
        for idx in torch.randperm(len(labels), generator=order).split(64):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(reference(feats[idx]), labels[idx]).backward()
            opt.step()
    torch.testing.assert_close(model.head.linear.weight, reference.weight)
    torch.testing.assert_close(model.head.linear.bias, reference.bias)


def _accuracy(model, batches) -> float:
    feats, labels = extract_features(model, batches, CPU)
    with torch.no_grad():
        return 100.0 * float((model.head(feats).argmax(1) == labels).float().mean())


def test_a_short_schedule_converges_on_an_untrained_network_as_scikit_learn_does(fmnist):
    """robust-eval's CPU schedule (5 epochs, lr 0.1, /10 at 3 and 4) on a network at
    initialisation: on standardised features it reaches scikit-learn's converged logistic
    regression; on raw features (RoCL's head) it stays far below it."""
    train, val = fmnist
    schedule = Schedule(epochs=5, lr=0.1, milestones=(3, 4), batch_size=64)
    accuracy = {}
    for standardize in (True, False):
        model = tiny_classifier()
        losses = train_linear_head(model, train, schedule, CPU, standardize=standardize)
        assert len(losses) == 5
        accuracy[standardize] = _accuracy(model, val)
    model = tiny_classifier()
    xtr, ytr = extract_features(model, train, CPU)
    xte, yte = extract_features(model, val, CPU)
    scaler = StandardScaler().fit(xtr.numpy())
    reference = LogisticRegression(max_iter=5000).fit(scaler.transform(xtr.numpy()), ytr.numpy())
    sklearn = 100.0 * reference.score(scaler.transform(xte.numpy()), yte.numpy())
    assert sklearn > 50.0
    assert accuracy[True] == pytest.approx(sklearn, abs=6.0)
    assert accuracy[False] < sklearn - 15.0, (accuracy, sklearn)


def test_the_logistic_solver_fits_le_at_scikit_learns_optimum(fmnist):
    """linear.solver=logistic: LE is the converged L2-regularised logistic regression on the
    frozen features, the same function of the features as scikit-learn's LogisticRegression at
    the C the held-out choice picked (an independent solver of the same objective), as a head the
    attacks go through (pixels -> encoder -> standardised linear head); the encoder untouched."""
    from solo_hyper.metrics.logistic import fit_probe

    train, val = fmnist
    model = tiny_classifier()
    adversarial_finetune(model, train, Schedule(epochs=3, milestones=()), CPU, PGDSpec(0, 0, 0))
    model.head.reset_parameters()
    before = encoder_state(model)
    losses = train_linear_head(model, train, Schedule(), CPU, seed=0, solver="logistic")
    assert len(losses) == 1 and 0.0 < losses[0] < 2.3
    assert all(torch.equal(before[k], v) for k, v in model.encoder.state_dict().items())
    xtr, ytr = extract_features(model, train, CPU)
    xte, _ = extract_features(model, val, CPU)
    chosen = fit_probe(xtr, ytr, 10, seed=0).c
    scaler = StandardScaler().fit(xtr.double().numpy())
    reference = LogisticRegression(C=chosen, max_iter=20000, tol=1e-8).fit(scaler.transform(xtr.double().numpy()),
                                                                           ytr.numpy())  # fmt: skip
    theirs = torch.from_numpy(reference.predict_proba(scaler.transform(xte.double().numpy())))
    with torch.no_grad():
        ours = model.head(xte).double().softmax(1)
        through_pixels = model(torch.cat([x for x, _ in val()])).double().softmax(1)
    assert (ours - theirs).abs().max() < 0.02
    assert (ours.argmax(1) == theirs.argmax(1)).double().mean() > 0.99
    assert torch.allclose(through_pixels, ours, atol=1e-5)
    with pytest.raises(ValueError, match="LE only"):
        train_linear_head(tiny_classifier(), train, Schedule(), CPU, PGDSpec(8 / 255, 0.007, 2), solver="logistic")


def test_adversarial_finetuning_trains_the_encoder(fmnist):
    train, _ = fmnist
    model = tiny_classifier()
    before = encoder_state(model)
    losses = adversarial_finetune(
        model, train, Schedule(epochs=1, lr=0.05, milestones=()), CPU, PGDSpec(8 / 255, 0.007, 2)
    )
    assert len(losses) == 1 and torch.isfinite(torch.tensor(losses[0]))
    after = model.encoder.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before if "weight" in k)
    assert not model.training


# ----------------------------------------------------------------------------- config


def test_default_robust_config_is_rocls_protocol():
    rcfg = load_robust_config(None)
    lin = rcfg["linear"]
    assert (lin.epochs, lin.lr, lin.momentum, lin.weight_decay) == (150, 0.1, 0.9, 5e-4)
    assert lin.milestones == (30, 50, 100) and lin.gamma == 0.1
    assert rcfg["linear_attack"] == PGDSpec(8 / 255, 0.007, 10, True)
    assert list(rcfg["attacks"]) == ["PGD-20 8/255", "PGD-20 16/255"]
    for spec, eps in zip(rcfg["attacks"].values(), (8 / 255, 16 / 255)):
        assert spec.eps == pytest.approx(eps) and spec.alpha == pytest.approx(eps / 10)
        assert spec.steps == 20 and spec.random_start


@pytest.mark.parametrize(
    "path", ["configs/robust/cifar10.yaml", "configs/robust/fashionmnist.yaml"]
)
def test_shipped_robust_configs_parse(path):
    rcfg = load_robust_config(path)
    assert rcfg["attacks"] and rcfg["linear"].epochs > 0


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            ["linear.epoch=3"],
            "unknown robust-eval config key 'linear.epoch'.*did you mean 'epochs'",
        ),
        (["evaluation.attacks.pgd20_8.eps=-0.1"], "eps must be a finite number >= 0"),
        (["evaluation.attacks.pgd20_8.eps=eps/10"], "eps must be a number or a fraction"),
        (["linear.attack.steps=-1"], "steps must be an integer >= 0"),
        (["finetune.epochs=-1"], "finetune.epochs must be an integer >= 0"),
        (["data.batch_size=0"], "data.batch_size must be a positive integer"),
        (["device=tpu"], "device must be auto, cpu"),
        (["linear.standard=false", "linear.robust=maybe"], "linear.robust must be true or false"),
        (["linear.solver=logistics"], "linear.solver must be one of sgd, logistic.*did you mean 'logistic'"),
    ],
)
def test_bad_robust_config_is_rejected_with_the_fix(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_robust_config(None, overrides)


# ----------------------------------------------------------------------------- command line


def run_cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "solo_hyper", *args], capture_output=True, text=True, timeout=600
    )


TINY = [
    "data.batch_size=64", "data.train_subset=256", "data.val_subset=128", "linear.epochs=2",
    "finetune.epochs=1", "linear.attack.steps=2", "finetune.attack.steps=2",
    "evaluation.attacks.pgd20_8.steps=3", "evaluation.attacks.pgd20_16.steps=3",
    "evaluation.attacks.pgd20_01=null", "evaluation.attacks.aa_16=null",
    "evaluation.attacks.aa_01=null", "evaluation.attacks.aa_8.autoattack.version=custom",
    "evaluation.attacks.aa_8.autoattack.attacks=[apgd-ce]",
    "evaluation.images=60", "evaluation.diagnostics.images=20", "evaluation.diagnostics.steps=2",
    "evaluation.diagnostics.long_steps=4", "evaluation.diagnostics.restarts=2",
    "evaluation.diagnostics.sweep=[8/255, 0.3]", "evaluation.diagnostics.square_queries=20",
]  # fmt: skip


@pytest.fixture(scope="module")
def rhcl_run(tmp_path_factory, fashion_mnist_available_module):
    out = tmp_path_factory.mktemp("runs")
    proc = run_cli(
        "pretrain", "--config", "configs/pretrain/fashionmnist/rhcl.yaml", "--quiet",
        "max_epochs=1", "limit_train_batches=2", "limit_val_batches=1", f"checkpoint.dir={out}",
        "data.train_subset=256", "optimizer.batch_size=32", "backbone.kwargs.width=8",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out / "rhcl-fashionmnist"


def _table(path):
    with open(path) as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
def test_robust_eval_command_end_to_end(rhcl_run, capsys):
    from solo_hyper.cli.main import main

    args = ["--checkpoint", str(rhcl_run), "--config", "configs/robust/fashionmnist.yaml"]
    assert main(["robust-eval", *args, *TINY]) == 0
    rows = _table(rhcl_run / "robust" / "robust_eval.csv")
    assert [(r["method"], r["protocol"]) for r in rows] == [("rhcl", "LE"), ("rhcl", "r-LE")]
    for r in rows:
        clean, pgd8, pgd16, aa8 = (float(r[k].rstrip("*")) for k in
                                   ("A_nat", "PGD-3 8/255", "PGD-3 16/255", "AA-apgd-ce 8/255"))  # fmt: skip
        assert 0.0 <= pgd16 <= clean <= 100.0 and 0.0 <= pgd8 <= clean and 0.0 <= aa8 <= clean
        assert r["masking"].split(" ")[0] in ("passed", "FLAGGED")
        assert "PGD-4 " in r["strength"] and "x2 restarts" in r["strength"] and "AA-apgd-ce " in r["strength"]
    printed = capsys.readouterr()
    assert "| rhcl | r-LE |" in printed.out
    assert "rhcl (r-LE): unbounded: " in printed.err  # each check's verdict on the phase lines
    assert "rhcl (r-LE): attack strength: PGD-2 " in printed.err
    table = (rhcl_run / "robust" / "robust_eval.md").read_text()
    assert table.startswith("| method | protocol | A_nat | AA-apgd-ce 8/255 | PGD-3 8/255 | "
                            "PGD-3 16/255 | masking | strength |")  # fmt: skip
    saved = json.loads((rhcl_run / "robust" / "robust_eval.json").read_text())
    assert saved["config"]["linear"]["epochs"] == 2
    # the fixed class-stratified subset: 60 images, 6 of each class, for every column
    assert saved["rows"][0]["images"] == {"A_nat": 60, "PGD-3 8/255": 60, "PGD-3 16/255": 60,
                                          "AA-apgd-ce 8/255": 60}  # fmt: skip
    # which of those images each accuracy got right, '1' per correct image in their fixed order
    for row in saved["rows"]:
        assert set(row["outcomes"]) == set(row["images"])
        for key, bits in row["outcomes"].items():
            assert len(bits) == 60 and set(bits) <= {"0", "1"}
            assert 100.0 * bits.count("1") / 60 == pytest.approx(row[key])
    diagnostics = (rhcl_run / "robust" / "diagnostics.md").read_text()
    for section in ("## rhcl (LE): ", "## rhcl (r-LE): "):
        assert section in diagnostics
    for check in ("black-box", "unbounded", "monotone", "transfer", "gradients",
                  "attack strength (not a masking check)"):  # fmt: skip
        assert f"| {check} | " in diagnostics
    heads = torch.load(rhcl_run / "robust" / "robust_eval.pt", weights_only=False)["heads"]
    assert set(heads) == {"LE", "r-LE"}  # kept: a twin's transfer attack is crafted on them
    # stopped and resumed: the heads, each attack and the diagnostics come from the cache, and
    # an attack dropped from the config leaves the others' numbers as they were
    cached = sorted(p.name for p in (rhcl_run / "robust" / "cache").iterdir())
    assert main(["robust-eval", *args, *TINY, "evaluation.attacks.pgd20_16=null"]) == 0
    assert "the linear head from" in capsys.readouterr().err
    assert sorted(p.name for p in (rhcl_run / "robust" / "cache").iterdir()) == cached
    again = _table(rhcl_run / "robust" / "robust_eval.csv")
    assert [{k: v for k, v in r.items() if k != "PGD-3 16/255"} for r in rows] == again


@pytest.mark.slow
def test_finetune_adv_command_end_to_end(rhcl_run):
    from solo_hyper.cli.main import main

    args = [
        "--checkpoint",
        str(rhcl_run / "last.ckpt"),
        "--config",
        "configs/robust/fashionmnist.yaml",
    ]
    assert main(["finetune-adv", *args, "--quiet", *TINY]) == 0
    (row,) = _table(rhcl_run / "robust" / "finetune_adv.csv")
    assert row["method"] == "rhcl+AT" and row["protocol"] == "AT"
    assert 0.0 <= float(row["PGD-3 8/255"].rstrip("*")) <= float(row["A_nat"]) <= 100.0
    diagnostics = (rhcl_run / "robust" / "diagnostics.md").read_text()
    assert "## rhcl+AT (AT): " in diagnostics
    saved = torch.load(rhcl_run / "robust" / "finetune_adv.pt", weights_only=False)
    assert (
        "encoder.features.0.weight" in saved["state_dict"] and "head.weight" in saved["state_dict"]
    )


def test_robust_commands_check_config_then_checkpoint_before_any_work(tmp_path, capsys):
    from solo_hyper.cli.main import main

    # a named config is checked before the checkpoint; without one, the checkpoint names the
    # dataset whose shipped config is read, so the checkpoint comes first
    given = ["--checkpoint", str(tmp_path / "nope"), "--config", "configs/robust/fashionmnist.yaml"]
    assert main(["robust-eval", *given, "linear.epoch=3"]) == 2
    assert "unknown robust-eval config key 'linear.epoch'" in capsys.readouterr().err
    off = ["linear.standard=false", "linear.robust=false"]
    assert main(["robust-eval", *given, *off]) == 2
    assert "nothing to evaluate" in capsys.readouterr().err
    assert main(["finetune-adv", "--checkpoint", str(tmp_path / "nope")]) == 2
    assert "does not exist" in capsys.readouterr().err
