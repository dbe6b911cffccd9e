"""Linear evaluation, robust linear evaluation, adversarial fine-tuning and white-box PGD accuracy.

Pure torch (no solo-learn, no Lightning), following RoCL's evaluation protocol (Kim et al. 2020,
``linear_eval.py`` / ``robustness_test.py``) as used by the HCL paper, section 4.2 and Table 3:

- LE: a linear head on the frozen encoder, trained on clean, un-augmented images;
- r-LE: the same head trained only on l_inf PGD examples made against the current head through
  the frozen encoder (PGD-10, eps 8/255, step 0.007);
- AT: supervised adversarial fine-tuning of encoder and head (Madry et al. 2018) from a
  pretrained encoder;
- white-box evaluation: cross-entropy PGD-20 on encoder + head (eps 8/255 and 16/255, step eps/10).

Everything works on [0, 1] pixels (``PixelClassifier`` normalises inside), so eps is in pixel
units. Attacks always run with the network in eval mode (BatchNorm statistics untouched).
Batches are iterables of (pixels (B, C, H, W) in [0, 1], labels (B,)).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from solo_hyper.attacks import eps_text, eval_mode, pgd_linf
from solo_hyper.metrics.logistic import fit_probe

if TYPE_CHECKING:
    from solo_hyper.evaluation.autoattack import AutoAttackSpec

Batches = Callable[[], Iterable[tuple[Tensor, Tensor]]]
"""A function returning a fresh pass over (pixels, labels) batches (called once per epoch)."""


@dataclass(frozen=True)
class PGDSpec:
    """An l_inf PGD attack on the cross-entropy: budget eps and step alpha in [0, 1] pixels."""

    eps: float
    alpha: float
    steps: int
    random_start: bool = True

    def __post_init__(self) -> None:
        for key in ("eps", "alpha"):
            value = getattr(self, key)
            if not isinstance(value, (int, float)) or not value >= 0 or math.isinf(value):
                raise ValueError(f"attack {key} must be a finite number >= 0, got {value!r}")
        if isinstance(self.steps, bool) or not isinstance(self.steps, int) or self.steps < 0:
            raise ValueError(f"attack steps must be an integer >= 0, got {self.steps!r}")

    @property
    def label(self) -> str:
        """'PGD-20 8/255' (eps as a multiple of 1/255 when it is one)."""
        return f"PGD-{self.steps} {eps_text(self.eps)}"

    def perturb(
        self, model: nn.Module, x: Tensor, y: Tensor, generator: torch.Generator | None = None
    ) -> Tensor:
        """Adversarial examples maximising the mean cross-entropy of ``model`` (in eval mode)."""
        with eval_mode(model):
            return pgd_linf(
                lambda v: F.cross_entropy(model(v), y), x, self.eps, self.alpha, self.steps,
                self.random_start, generator=generator,
            )  # fmt: skip


class PixelClassifier(nn.Module):
    """encoder + linear head on [0, 1] pixels: what the white-box attacker differentiates.

    It takes images with their stored channels: a grey (1-channel) image is repeated to the
    encoder's channels (those of ``mean``) inside the model, so an attack perturbs the image as
    stored, in the 1 x H x W l_inf ball every grey-image robustness number uses, and its input
    gradient is the sum of the repeated channels' gradients."""

    def __init__(
        self, encoder: nn.Module, head: nn.Module, mean: Sequence[float], std: Sequence[float]
    ) -> None:
        super().__init__()
        self.encoder, self.head = encoder, head
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1))
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1))

    def features(self, x: Tensor) -> Tensor:
        if x.shape[1] == 1:
            x = x.expand(-1, self.mean.shape[1], -1, -1)
        return self.encoder((x - self.mean) / self.std)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.features(x))


@dataclass(frozen=True)
class Schedule:
    """SGD with step decay; defaults are RoCL's linear evaluation (150 epochs, /10 at 30, 50, 100)."""

    epochs: int = 150
    lr: float = 0.1
    momentum: float = 0.9
    weight_decay: float = 5e-4
    milestones: tuple[int, ...] = (30, 50, 100)
    gamma: float = 0.1
    batch_size: int = 1024  # only for heads trained on cached features

    def optimizer(self, params: Iterable[Tensor]):
        opt = torch.optim.SGD(
            params, lr=self.lr, momentum=self.momentum, weight_decay=self.weight_decay
        )
        sched = torch.optim.lr_scheduler.MultiStepLR(opt, list(self.milestones), self.gamma)
        return opt, sched


def _frozen(module: nn.Module) -> list[bool]:
    flags = [p.requires_grad for p in module.parameters()]
    module.requires_grad_(False)
    return flags


def _restore(module: nn.Module, flags: list[bool]) -> None:
    for p, flag in zip(module.parameters(), flags):
        p.requires_grad_(flag)


@torch.no_grad()
def extract_features(model: PixelClassifier, batches: Batches, device: torch.device):
    """(features, labels) of one pass, the encoder in eval mode."""
    feats, labels = [], []
    with eval_mode(model):
        for x, y in batches():
            feats.append(model.features(x.to(device)).float())
            labels.append(y.to(device))
    return torch.cat(feats), torch.cat(labels)


class StandardizedLinear(nn.Module):
    """A linear head on standardised features, ``linear((f - mean) / std)``: still a linear
    function of the features (the evaluation stays a linear one); only SGD's conditioning changes.

    Why: a network at initialisation has features that vary ~50x less across images than a
    trained one's, and a few epochs of SGD on them leave a head on raw features far from
    converged (15% on Fashion-MNIST where the standardised head reads 77%), which would make an
    untrained control read as worthless. The statistics are kept, not folded into the weights:
    folding divides by spreads of ~1e-3 and cancels large terms in fp32.
    """

    def __init__(self, linear: nn.Linear, mean: Tensor, std: Tensor) -> None:
        super().__init__()
        self.linear = linear
        self.register_buffer("mean", mean.detach().clone())
        self.register_buffer("std", std.detach().clone())

    @classmethod
    def fitted(cls, linear: nn.Linear, feats: Tensor, relative_floor: float = 1e-6):
        """Standardised by ``feats``' per-dimension mean and spread; a dimension that does not
        vary (a dead unit: spread below ``relative_floor`` of the largest) is left unscaled, so
        float noise in it is never blown up."""
        std = feats.std(0)
        keep = std > relative_floor * std.max().clamp_min(torch.finfo(std.dtype).tiny)
        return cls(linear, feats.mean(0), torch.where(keep, std, torch.ones_like(std)))

    @classmethod
    def unscaled(cls, linear: nn.Linear):
        """The plain head on raw features (mean 0, spread 1: RoCL's), in the same form."""
        weight = linear.weight
        zeros = torch.zeros(weight.shape[1], device=weight.device, dtype=weight.dtype)
        return cls(linear, zeros, torch.ones_like(zeros))

    def forward(self, feats: Tensor) -> Tensor:
        return self.linear((feats - self.mean) / self.std)


def train_linear_head(
    model: PixelClassifier,
    batches: Batches,
    schedule: Schedule,
    device: torch.device,
    attack: PGDSpec | None = None,
    seed: int = 0,
    standardize: bool = True,
    solver: str = "sgd",
) -> list[float]:
    """Trains ``model.head`` on the frozen encoder; returns the mean loss of each epoch (for
    ``solver="logistic"``: the fit's one training loss).

    ``attack=None`` (LE): features of the un-augmented images are computed once (the encoder is
    frozen and in eval mode, so they never change) and the head is trained on them in shuffled
    mini-batches of ``schedule.batch_size``. With an attack (r-LE): every batch is replaced by
    PGD examples against the current head through the frozen encoder, and the head is trained
    on those only. ``model.head`` (an ``nn.Linear``) becomes a :class:`StandardizedLinear`
    around it: ``standardize`` uses the clean training features' statistics, False leaves the
    features as they are (RoCL's linear evaluation, bit for bit).

    ``solver="logistic"`` (LE only): the head is the converged L2-regularised logistic regression
    of ``metrics.logistic.fit_probe`` on the features (standardised by its own statistics, its
    L2 strength chosen on a held-out tenth), so LE measures the features, not how far a short SGD
    schedule got: on a pretrained encoder a few epochs of SGD stop several points short.
    """
    if solver == "logistic":
        if attack is not None:
            raise ValueError("the logistic solver fits LE only: r-LE's examples depend on the head")
        return _converged_head(model, batches, device, seed)
    model.to(device)
    flags = _frozen(model.encoder)
    losses: list[float] = []
    try:
        model.encoder.eval()
        if attack is None or standardize:
            feats, labels = extract_features(model, batches, device)
        model.head = (StandardizedLinear.fitted(model.head, feats) if standardize
                      else StandardizedLinear.unscaled(model.head))  # fmt: skip
        opt, sched = schedule.optimizer(model.head.parameters())
        if attack is None:
            g = torch.Generator().manual_seed(seed)
            for _ in range(schedule.epochs):
                order = torch.randperm(len(labels), generator=g).to(device)
                total = 0.0
                for idx in order.split(schedule.batch_size):
                    loss = F.cross_entropy(model.head(feats[idx]), labels[idx])
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    opt.step()
                    total += float(loss.detach()) * len(idx)
                losses.append(total / len(labels))
                sched.step()
        else:

            def head_loss(x_adv: Tensor, y: Tensor) -> Tensor:  # the frozen encoder's features
                with torch.no_grad():
                    adv_feats = model.features(x_adv)
                return F.cross_entropy(model.head(adv_feats), y)

            losses = adversarial_training(model, batches, schedule, device, attack, head_loss, opt, sched)
    finally:
        _restore(model.encoder, flags)
    model.eval()
    return losses


def _converged_head(model: PixelClassifier, batches: Batches, device: torch.device, seed: int) -> list[float]:
    """LE by the converged logistic probe (``train_linear_head``'s ``solver="logistic"``)."""
    model.to(device)
    flags = _frozen(model.encoder)
    try:
        feats, labels = extract_features(model, batches, device)
    finally:
        _restore(model.encoder, flags)
    classes = model.head.out_features
    probe = fit_probe(feats, labels, classes, seed=seed)
    linear = nn.Linear(feats.shape[1], classes).to(device)
    with torch.no_grad():
        linear.weight.copy_(probe.fit.weight.T.float())
        linear.bias.copy_(probe.fit.bias.float())
    model.head = StandardizedLinear(linear, probe.scale.mean.float(), probe.scale.std.float())
    model.eval()
    with torch.no_grad():
        loss = F.cross_entropy(model.head(feats), labels)
    return [float(loss)]


def adversarial_finetune(
    model: PixelClassifier,
    batches: Batches,
    schedule: Schedule,
    device: torch.device,
    attack: PGDSpec,
) -> list[float]:
    """Madry et al.'s adversarial training of encoder + head on PGD examples only (RHCL+AT).

    The attack runs in eval mode (BatchNorm statistics see clean-trained values only); the update
    runs in train mode on the adversarial batch. Returns the mean loss of each epoch.
    """
    model.to(device)
    opt, sched = schedule.optimizer(model.parameters())

    def whole_loss(x_adv: Tensor, y: Tensor) -> Tensor:  # the update in train mode
        model.train()
        return F.cross_entropy(model(x_adv), y)

    losses = adversarial_training(model, batches, schedule, device, attack, whole_loss, opt, sched)
    model.eval()
    return losses


def adversarial_training(
    model: nn.Module, batches: Batches, schedule: Schedule, device: torch.device, attack: PGDSpec,
    loss_on: Callable[[Tensor, Tensor], Tensor], opt, sched,
) -> list[float]:  # fmt: skip
    """The epochs of training on PGD examples only (r-LE's head, AT's encoder and head): each
    batch replaced by ``attack``'s examples against ``model``, then one optimiser step on
    ``loss_on(examples, labels)``; returns the mean loss of each epoch."""
    losses: list[float] = []
    for _ in range(schedule.epochs):
        total, count = 0.0, 0
        for x, y in batches():
            x, y = x.to(device), y.to(device)
            loss = loss_on(attack.perturb(model, x, y), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total, count = total + float(loss.detach()) * len(y), count + len(y)
        losses.append(total / max(count, 1))
        sched.step()
    return losses


def robust_accuracy(
    model: nn.Module,
    batches: Batches,
    attacks: dict[str, PGDSpec | AutoAttackSpec],
    device: torch.device,
    seed: int = 0,
    messages: list[str] | None = None,
    counts: dict[str, int] | None = None,
    outcomes: dict[str, list[bool]] | None = None,
) -> dict[str, float]:
    """Top-1 accuracy in percent on clean images ("A_nat") and under each attack.

    Every attack starts from the clean batch (not from another attack's output); PGD's random
    starts are drawn from a generator seeded with ``seed`` and AutoAttack runs with ``seed``, so
    the numbers are reproducible. An AutoAttack entry with ``images`` attacks only the first that
    many images (its accuracy is over those); ``counts`` receives each accuracy's image count and
    ``outcomes`` each accuracy's per-image correctness, in the order the batches give the images
    (a paired bootstrap over images resamples them). AutoAttack's warnings are appended to
    ``messages``.
    """
    model.to(device).eval()
    generator = torch.Generator(device=device).manual_seed(seed)
    correct = {"A_nat": 0, **{name: 0 for name in attacks}}
    seen = dict.fromkeys(correct, 0)
    hits: dict[str, list[bool]] = {name: [] for name in correct}
    for x, y in batches():
        x, y = x.to(device), y.to(device)
        with torch.no_grad():
            right = model(x).argmax(1) == y
        correct["A_nat"] += int(right.sum())
        hits["A_nat"] += right.tolist()
        seen["A_nat"] += len(y)
        for name, spec in attacks.items():
            if isinstance(spec, PGDSpec):
                xs, ys = x, y
                x_adv = spec.perturb(model, xs, ys, generator)
            else:
                left = len(y) if spec.images is None else max(spec.images - seen[name], 0)
                xs, ys = x[:left], y[:left]
                if not len(ys):
                    continue
                x_adv = spec.perturb(model, xs, ys, seed, messages)
            with torch.no_grad():
                right = model(x_adv).argmax(1) == ys
            correct[name] += int(right.sum())
            hits[name] += right.tolist()
            seen[name] += len(ys)
    if seen["A_nat"] == 0:
        raise ValueError("robust_accuracy: the evaluation batches are empty")
    if counts is not None:
        counts.update(seen)
    if outcomes is not None:
        outcomes.update(hits)
    return {name: 100.0 * c / seen[name] for name, c in correct.items()}
