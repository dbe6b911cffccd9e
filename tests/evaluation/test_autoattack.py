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
    assert custom.label == "AA-apgd-ce+square 0.1"


def _settings(attack) -> dict:
    """An attack object's settings (numbers, strings, flags), not its model or logger."""
    return {k: v for k, v in vars(attack).items()
            if isinstance(v, (bool, int, float, str, type(None)))}  # fmt: skip


def test_apgd_ce_and_apgd_t_are_exactly_the_standard_versions_first_two_stages():
    from pyautoattack import AutoAttack

    net = nn.Sequential(nn.Flatten(), nn.Linear(4, 10))
    spec = AutoAttackSpec(8 / 255, "custom", ("apgd-ce", "apgd-t"))
    ours = spec.attack(net, 0, CPU)
    standard = AutoAttack(net, norm="Linf", eps=8 / 255, version="standard", seed=0, device=CPU)
    assert ours.attacks_to_run == standard.attacks_to_run[:2] == ["apgd-ce", "apgd-t"]
    for name in ("apgd", "apgd_targeted"):
        assert _settings(getattr(ours, name)) == _settings(getattr(standard, name))
    assert ours.apgd.n_restarts == 1 and ours.apgd_targeted.n_target_classes == 9
    assert ours.apgd_targeted.n_restarts == 1 and ours.apgd.n_iter == 100
    # the package's own custom version differs: APGD-CE at 5 restarts
    package = AutoAttack(net, norm="Linf", eps=8 / 255, version="custom", seed=0, device=CPU,
                         attacks=["apgd-ce", "apgd-t"])  # fmt: skip
    assert package.apgd.n_restarts == 5
    assert spec.label == "AA-apgd-ce+apgd-t 8/255"


def test_fashion_mnist_config_attacks_at_the_mnist_radius_too():
    labels = list(load_robust_config("configs/robust/fashionmnist.yaml")["attacks"])
    assert labels == ["PGD-20 8/255", "PGD-20 16/255", "PGD-20 0.1", "AA 8/255", "AA 16/255",
                      "AA 0.1"]  # fmt: skip


def test_autoattack_images_attacks_only_the_first_images_across_batches():
    """`images: N` attacks the first N evaluation images (here across two batches) and its
    accuracy is over those N; the clean accuracy and PGD stay over every image."""
    rcfg = load_robust_config(None, ["evaluation.attacks.aa={autoattack: {eps: 0.1, version: "
                                     "custom, attacks: [apgd-ce], images: 5}}"])  # fmt: skip
    spec = rcfg["attacks"]["AA-apgd-ce 0.1"]
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


# The tests run AutoAttack's custom version with some of its attacks (each configured as in the
# standard version): FAB-T and 5,000 Square queries on every image still correct would take
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


class SaturatedLogits(nn.Module):
    """A logit rescale that saturates the softmax (a 'defence' by overconfidence): the same
    decisions, but the cross-entropy's input gradient is exactly 0 in float32 on every image
    the model gets right, so PGD on the cross-entropy never leaves a correct image."""

    def __init__(self, model: nn.Module, scale: float = 1e4) -> None:
        super().__init__()
        self.model, self.scale = model, scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x) * self.scale


MASKED = {"rounded input": RoundedInput, "saturated softmax": SaturatedLogits}
# the AutoAttack stages that see through each mask (the whole standard version takes minutes of
# CI): no gradient survives the rounding, so it takes the black-box Square; the saturation
# leaves the logits' order, which APGD-T's scale-free DLR loss follows (the CPU protocol's part b)
SEES_THROUGH = {"rounded input": BLACK_BOX, "saturated softmax": ("apgd-ce", "apgd-t")}


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(MASKED))
def test_masked_gradients_fool_pgd20_but_not_autoattack(fmnist_cnn, kind):
    net, val = fmnist_cnn
    masked = MASKED[kind](net)
    eps = 0.1
    messages: list[str] = []
    attacks = {"pgd": PGDSpec(eps, eps / 10, 20),
               "aa": AutoAttackSpec(eps, "custom", SEES_THROUGH[kind])}  # fmt: skip
    plain = robust_accuracy(net, val, {"pgd": attacks["pgd"]}, CPU, 0)
    acc = robust_accuracy(masked, val, attacks, CPU, 0, messages)
    assert acc["A_nat"] == plain["A_nat"]  # the mask changes no decision
    # PGD-20 never moves a correct image of the masked copy (zero gradients): it calls it
    # robust, far above the network it wraps; AutoAttack does not
    assert acc["pgd"] >= acc["A_nat"] - 15.0 and acc["pgd"] >= plain["pgd"] + 25.0
    assert acc["aa"] <= acc["pgd"] - 25.0
    if kind == "rounded input":  # and its own check says why
        assert any("Square Attack has decreased the robust accuracy" in m for m in messages)


# ----------------------------------------------------------------------------- diagnostics

# Square at 300 queries, not the default 5,000 (minutes of CI on 16 images): the masks here are
# caught at 300 already
SMALL = DiagnosticsSpec(images=16, eps=0.1, steps=10, long_steps=30, restarts=3,
                        sweep=(8 / 255, 0.1, 0.3), square_queries=300)  # fmt: skip


def _checks(diagnosis):
    return {c.name: c.flagged for c in diagnosis.checks}


@pytest.mark.slow
def test_diagnostics_pass_the_plain_cnn(fmnist_cnn):
    net, val = fmnist_cnn
    x, y = next(val())
    plain = diagnose(net, x, y, SMALL, "plain", twin=net, twin_name="itself")
    assert _checks(plain) == {"black-box": False, "unbounded": False, "monotone": False,
                              "transfer": False, "gradients": False}  # fmt: skip
    assert plain.verdict == "passed"
    lines = plain.lines()
    assert any(line.startswith("plain: unbounded: passed: PGD-30 at eps 0.5: 0.0") for line in lines)
    assert any(line.startswith("plain: attack strength: PGD-10 ") for line in lines)
    text = markdown([plain])
    assert "## plain: passed" in text and "| attack strength (not a masking check) |" in text
    assert Diagnosis.from_dict(plain.as_dict()).as_dict() == plain.as_dict()


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(MASKED))
def test_diagnostics_catch_masked_gradients(fmnist_cnn, kind):
    net, val = fmnist_cnn
    x, y = next(val())
    masked = diagnose(MASKED[kind](net), x, y, SMALL, kind, twin=net, twin_name="plain")
    checks = _checks(masked)
    flagged = [name for name, bad in checks.items() if bad]
    # zero gradients on the images it gets right: Square (5,000 queries) and the transfer
    # from the unmasked twin beat PGD, and PGD stays far above chance at eps 0.5
    assert len(flagged) >= 2 and {"black-box", "gradients"} <= set(flagged), flagged
    assert checks["unbounded"] and checks["transfer"]
    assert masked.verdict.startswith("FLAGGED (")
    assert any(line.startswith(f"{kind}: black-box: FLAGGED: Square (300 queries)")
               for line in masked.lines())  # fmt: skip
    assert Diagnosis.from_dict(masked.as_dict()).as_dict() == masked.as_dict()


def test_the_checks_can_fail_on_their_numbers():
    """Each verdict turns on its own numbers: a rise with eps, accuracy above chance at the
    unbounded radius, and a drop from PGD-20 to a stronger PGD (the strength report)."""

    class Fixed(nn.Module):
        """Right on the images whose first pixel is below a threshold, else wrong."""

        def __init__(self, threshold: float) -> None:
            super().__init__()
            self.threshold = threshold

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            right = (x.flatten(1)[:, 0] < self.threshold).float()
            return torch.stack([right, 1 - right], 1) + 0 * x.flatten(1).sum(1, keepdim=True)

    x, y = torch.zeros(20, 1, 2, 2), torch.zeros(20, dtype=torch.long)
    spec = DiagnosticsSpec(images=20, eps=0.1, steps=2, long_steps=3, restarts=2, sweep=(0.1,),
                           square_queries=5)  # fmt: skip
    always = diagnose(Fixed(2.0), x, y, spec, "always right")  # no gradient moves it
    checks = _checks(always)
    assert checks["unbounded"] and checks["gradients"] and not checks["monotone"]
    assert always.strength.drop == 0 and always.strength.verdict == "PGD-2 holds"
    assert "PGD-3 at eps 0.5: 100.0 (chance 50.0)" in next(c.detail for c in always.checks
                                                          if c.name == "unbounded")  # fmt: skip

    class Bright(nn.Module):
        """Right once the image's mean brightness passes 0.05: a black image is wrong, and the
        larger the random start's noise, the more often it is right (no gradient anywhere)."""

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            right = (x.flatten(1).mean(1) > 0.05).float()
            return torch.stack([right, 1 - right], 1) + 0 * x.flatten(1).sum(1, keepdim=True)

    spec = DiagnosticsSpec(images=20, eps=0.1, steps=2, long_steps=3, restarts=2,
                           sweep=(0.1, 0.3), square_queries=5)  # fmt: skip
    x = torch.zeros(20, 1, 8, 8)
    rising = diagnose(Bright(), x, y, spec, "rising")
    assert _checks(rising)["monotone"]  # 0% at eps 0.1, 100% at 0.3: accuracy rose with eps
    assert "0.1: 0.0, 0.3: 100.0, 0.5: 100.0" in next(c.detail for c in rising.checks
                                                      if c.name == "monotone")  # fmt: skip


def test_strength_report_says_how_much_stronger_attacks_lower_pgd20():
    from solo_hyper.evaluation.diagnostics import Strength

    weak = Strength(20, 41.0, 200, 30.0, 10, 38.0, 2.0)
    assert weak.drop == pytest.approx(11.0) and weak.verdict == "PGD-20 OVERSTATES by 11.0"
    assert "PGD-200 30.0 (-11.0); PGD-20 x10 restarts 38.0 (-3.0)" in weak.detail
    assert Strength(20, 41.0, 200, 40.0, 10, 39.5, 2.0).verdict == "PGD-20 holds"


def test_diagnostics_budget_is_checked():
    spec = load_robust_config(None)["diagnostics"]
    assert (spec.square_queries, spec.unbounded, spec.steps, spec.long_steps, spec.restarts) == (
        5000, 0.5, 20, 200, 10)  # AutoAttack's Square budget; PGD-20 against 200 and 10 restarts
    with pytest.raises(ConfigError, match="restarts must be an integer >= 1"):
        load_robust_config(None, ["evaluation.diagnostics.restarts=0"])
    with pytest.raises(ConfigError, match="sweep must be a non-empty list"):
        load_robust_config(None, ["evaluation.diagnostics.sweep=[]"])
    with pytest.raises(ConfigError, match="unbounded must be >= 0.5"):
        load_robust_config(None, ["evaluation.diagnostics.unbounded=0.3"])
    spec = load_robust_config(None, ["evaluation.diagnostics.sweep=[0.1, 3/10]"])["diagnostics"]
    assert spec.sweep == (0.1, pytest.approx(0.3))
    assert load_robust_config(None, ["evaluation.diagnostics.enabled=false"])["diagnostics"] is None
