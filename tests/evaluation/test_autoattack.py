"""AutoAttack in robust-eval: the config entry, the missing package, and what it finds that PGD-20
does not (a plain small CNN, and a model built to mask its gradients)."""

from __future__ import annotations

import sys

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from solo_hyper.config import ConfigError
from solo_hyper.evaluation.adversarial import PGDSpec, robust_accuracy
from solo_hyper.evaluation.autoattack import AutoAttackSpec
from solo_hyper.evaluation.diagnostics import Diagnosis, DiagnosticsSpec, diagnose, markdown
from solo_hyper.evaluation.robust import load_robust_config

CPU = torch.device("cpu")


class RoundedInput(nn.Module):
    """An input-quantisation 'defence' (Buckman et al.; broken by Athalye et al. 2018): the model
    sees the image rounded to its 256 grey levels, which changes nothing a real image holds but
    makes every input gradient exactly zero."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(torch.round(x * 255) / 255)


@pytest.fixture(scope="module")
def fmnist_cnn():
    """A plain small CNN trained for two epochs on 3,000 Fashion-MNIST test images, and 16 others
    (grey [0, 1] pixels) to attack."""
    from solo_hyper.data import load_fashion_mnist, locate_fashion_mnist

    if locate_fashion_mnist(None) is None:
        pytest.fail("Fashion-MNIST is required: run ./scripts/bootstrap.sh")
    images, labels = load_fashion_mnist(train=False)
    x = images[:3016].float().div(255).reshape(-1, 1, 28, 28)
    y = labels[:3016]
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(16 * 49, 10),
    )  # fmt: skip
    opt = torch.optim.Adam(net.parameters(), 3e-3)
    for _ in range(2):
        for i in range(0, 3000, 50):
            loss = F.cross_entropy(net(x[i : i + 50]), y[i : i + 50])
            opt.zero_grad()
            loss.backward()
            opt.step()
    net.eval()
    held_out = (x[3000:], y[3000:])
    return net, (lambda: iter([held_out]))


# ----------------------------------------------------------------------------- config


def test_autoattack_entry_is_parsed_and_named():
    rcfg = load_robust_config(None, ["evaluation.attacks.aa={autoattack: {eps: 8/255}}"])
    spec = rcfg["attacks"]["AA 8/255"]
    assert spec == AutoAttackSpec(8 / 255, "standard")
    custom = AutoAttackSpec(0.1, "custom", ("apgd-ce", "square"))
    assert custom.label == "AA-custom 0.1"


def test_fashion_mnist_config_attacks_at_the_mnist_radius_too():
    labels = list(load_robust_config("configs/robust/fashionmnist.yaml")["attacks"])
    assert labels == ["PGD-20 8/255", "PGD-20 16/255", "PGD-20 0.1", "AA 8/255", "AA 16/255",
                      "AA 0.1"]  # fmt: skip


def test_autoattack_images_attacks_only_the_first_images_across_batches():
    """`images: N` attacks the first N evaluation images (here across two batches) and its
    accuracy is over those N; the clean accuracy and PGD stay over every image."""
    rcfg = load_robust_config(None, ["evaluation.attacks.aa={autoattack: {eps: 0.1, version: "
                                     "custom, attacks: [apgd-ce], images: 5}}"])  # fmt: skip
    spec = rcfg["attacks"]["AA-custom 0.1"]
    assert spec.images == 5
    torch.manual_seed(0)
    net = nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, 10))
    x, y = torch.rand(8, 3, 8, 8), torch.randint(0, 10, (8,))
    batches = lambda: iter([(x[:4], y[:4]), (x[4:], y[4:])])  # noqa: E731
    counts: dict[str, int] = {}
    acc = robust_accuracy(net, batches, {"pgd": PGDSpec(0.1, 0.01, 2), "aa": spec}, CPU, 0,
                          counts=counts)  # fmt: skip
    assert counts == {"A_nat": 8, "pgd": 8, "aa": 5}
    first = torch.cat([spec.perturb(net, x[:4], y[:4], 0), spec.perturb(net, x[4:5], y[4:5], 0)])
    with torch.no_grad():
        expected = 100.0 * float((net(first).argmax(1) == y[:5]).sum()) / 5
    assert acc["aa"] == expected


@pytest.mark.parametrize(
    "entry, message",
    [
        ("{autoattack: {eps: 8/255, version: fast}}", "version must be one of standard"),
        ("{autoattack: {eps: 8/255, steps: 3}}", "unknown key evaluation.attacks.aa.autoattack.steps"),
        ("{autoattack: {version: standard}}", "must be a mapping with keys"),
        ("{autoattack: {eps: 8/255, attacks: [apgd-ce]}}", "with version: custom"),
        ("{autoattack: {eps: 8/255, version: custom, attacks: [pgd]}}", "unknown; choose from"),
        ("{autoattack: {eps: 8/255}, eps: 0.1}", "has the one key 'autoattack'"),
        ("{autoattack: {eps: 0}}", "eps must be a finite number > 0"),
        ("{autoattack: {eps: 0.1, images: 0}}", "images must be an integer >= 1"),
    ],
)
def test_bad_autoattack_entry_is_rejected_with_the_fix(entry, message):
    with pytest.raises(ConfigError, match=message):
        load_robust_config(None, [f"evaluation.attacks.aa={entry}"])


def test_missing_package_is_one_line_naming_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "pyautoattack", None)  # find_spec: not installed
    with pytest.raises(ConfigError) as err:
        load_robust_config("configs/robust/fashionmnist.yaml")
    text = str(err.value)
    assert "\n" not in text and "pip install pyautoattack==0.2.0" in text
    assert "evaluation.attacks.aa_8" in text
    nulls = [f"evaluation.attacks.{n}=null" for n in ("aa_8", "aa_16", "aa_01")]
    with pytest.raises(ConfigError, match="evaluation.diagnostics .its Square attack. needs"):
        load_robust_config("configs/robust/fashionmnist.yaml", nulls)
    # without an AutoAttack entry and without the diagnostics the package is not needed
    off = [*nulls, "evaluation.diagnostics.enabled=false"]
    assert load_robust_config("configs/robust/fashionmnist.yaml", off)["attacks"]


# ----------------------------------------------------------------------------- what it finds


# The tests run AutoAttack's custom version with some of its attacks (APGD-CE then with its
# default 5 restarts): FAB-T and 5,000 Square queries on every image still correct would take
# minutes of CI. benchmarks/autoattack.py times the standard version.
GRADIENT_PART = ("apgd-ce",)  # the standard version's first attack
BLACK_BOX = ("apgd-ce", "square")  # its first and its black-box attack


@pytest.mark.slow
def test_autoattack_is_at_least_as_strong_as_pgd20_on_a_plain_cnn(fmnist_cnn):
    net, val = fmnist_cnn
    eps = 8 / 255
    aa = AutoAttackSpec(eps, "custom", GRADIENT_PART)
    messages: list[str] = []
    rng = torch.get_rng_state()
    acc = robust_accuracy(net, val, {"pgd": PGDSpec(eps, eps / 10, 20), "aa": aa}, CPU, 0,
                          messages)  # fmt: skip
    assert torch.equal(torch.get_rng_state(), rng)  # AutoAttack's seeding left ours alone
    assert acc["A_nat"] >= 70.0  # a trained classifier, not chance
    assert acc["aa"] <= acc["pgd"] < acc["A_nat"]
    assert messages == []  # nothing for AutoAttack's own checks to flag on a plain network
    first = AutoAttackSpec(eps, "custom", ("apgd-ce",))
    x, y = next(val())
    once, twice = (first.perturb(net, x[:8], y[:8], seed=3) for _ in range(2))
    assert torch.equal(once, twice)  # seeded: the same examples twice


@pytest.mark.slow
def test_masked_gradients_fool_pgd20_but_not_autoattack(fmnist_cnn):
    net, val = fmnist_cnn
    masked = RoundedInput(net)
    eps = 0.1
    messages: list[str] = []
    attacks = {"pgd": PGDSpec(eps, eps / 10, 20), "aa": AutoAttackSpec(eps, "custom", BLACK_BOX)}
    plain = robust_accuracy(net, val, {"pgd": attacks["pgd"]}, CPU, 0)
    acc = robust_accuracy(masked, val, attacks, CPU, 0, messages)
    assert acc["A_nat"] == plain["A_nat"]  # the rounding changes no real image
    # PGD-20 never moves on the masked copy (zero gradients): it calls it robust, far above
    # the network it wraps; AutoAttack's Square does not
    assert acc["pgd"] >= acc["A_nat"] - 15.0 and acc["pgd"] >= plain["pgd"] + 25.0
    assert acc["aa"] <= acc["pgd"] - 25.0
    # and its own check says why
    assert any("Square Attack has decreased the robust accuracy" in m for m in messages)


# ----------------------------------------------------------------------------- diagnostics

SMALL = DiagnosticsSpec(images=16, eps=0.1, steps=(10, 30), restarts=2, sweep=(8 / 255, 0.3),
                        square_queries=300)  # fmt: skip


def _checks(diagnosis):
    return {c.name: c.flagged for c in diagnosis.checks}


@pytest.mark.slow
def test_diagnostics_flag_masked_gradients_and_pass_the_plain_cnn(fmnist_cnn):
    net, val = fmnist_cnn
    x, y = next(val())
    plain = diagnose(net, x, y, SMALL, "plain", twin=net, twin_name="itself")
    assert _checks(plain) == {"strength": False, "eps sweep": False, "black-box": False,
                              "transfer": False, "gradients": False}  # fmt: skip
    assert plain.verdict == "passed"
    masked = diagnose(RoundedInput(net), x, y, SMALL, "rounded", twin=net, twin_name="plain")
    checks = _checks(masked)
    # zero gradients everywhere: PGD never moves, so the sweep stays high; Square and the
    # transfer from the un-rounded twin both beat it
    assert checks["gradients"] and checks["eps sweep"] and checks["black-box"]
    assert checks["transfer"]
    assert masked.flagged and masked.verdict.startswith("FLAGGED (")
    assert any(line.startswith("rounded: gradients: FLAGGED") for line in masked.lines())
    text = markdown([plain, masked])
    assert "## plain: passed" in text and "## rounded: FLAGGED" in text
    assert Diagnosis.from_dict(masked.as_dict()).as_dict() == masked.as_dict()


def test_diagnostics_budget_is_checked():
    with pytest.raises(ConfigError, match="restarts must be an integer >= 1"):
        load_robust_config(None, ["evaluation.diagnostics.restarts=0"])
    with pytest.raises(ConfigError, match="steps must be a non-empty list"):
        load_robust_config(None, ["evaluation.diagnostics.steps=[]"])
    spec = load_robust_config(None, ["evaluation.diagnostics.sweep=[0.1, 3/10]"])["diagnostics"]
    assert spec.sweep == (0.1, pytest.approx(0.3))
    assert load_robust_config(None, ["evaluation.diagnostics.enabled=false"])["diagnostics"] is None
