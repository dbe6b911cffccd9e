"""Gradient-masking diagnostics of an attacked classifier (Athalye et al. 2018; Carlini et al.
2019, "On evaluating adversarial robustness"; Croce & Hein 2020).

A gradient attack can call a model robust because its input gradients are useless (zero, tiny,
noisy), not because it is. Each check below is one of the literature's symptoms of that, measured
on ``images`` evaluation images at radius ``eps``, and each can fail:

- black-box: the gradient-free Square attack with AutoAttack's 5,000 queries must not read below
  the white-box attacks on the same images (the point-wise worst of every PGD run below);
- unbounded: at a radius no classifier can stand (eps >= 0.5 on [0, 1] pixels: every image can
  be moved to mid-grey), PGD must bring the accuracy down to chance;
- monotone: accuracy under PGD must not rise with eps (the sweep, the unbounded radius last);
- transfer: examples crafted on the twin of the other geometry (RoCL for RHCL, RHCL for RoCL)
  must not beat the white-box attacks either;
- gradients: the share of images whose input gradient of the attacked loss is ~0.

A check that fails flags the model; ``robust-eval`` marks a flagged model's robust columns.
Separately, the strength report says how much stronger attacks lower the reported PGD-20: PGD
with ``long_steps`` steps and PGD-20 with ``restarts`` random restarts, each on its own (not
pooled); a drop larger than ``tolerance`` says PGD-20 overstates the robustness.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from solo_hyper.attacks import eps_text, eval_mode, pgd_linf

UNBOUNDED = 0.5  # l_inf radius at which every [0, 1] image can be moved to mid-grey


@dataclass(frozen=True)
class DiagnosticsSpec:
    """The budget (``images``, steps, restarts, sweep, queries) and the thresholds of the checks."""

    images: int = 100
    eps: float = 8 / 255
    steps: int = 20  # the reported attack's steps
    long_steps: int = 200
    restarts: int = 10
    sweep: tuple[float, ...] = (2 / 255, 8 / 255, 16 / 255, 0.1, 0.2, 0.3)
    unbounded: float = UNBOUNDED
    square_queries: int = 5000
    tolerance: float = 2.0  # accuracy points a check may be off before it flags
    tiny_gradient: float = 1e-10  # l1 norm of an input gradient that counts as zero
    tiny_share: float = 10.0  # % of images with a ~0 gradient that flags masking

    def __post_init__(self) -> None:
        counts = {"images": self.images, "steps": self.steps, "long_steps": self.long_steps,
                  "restarts": self.restarts, "square_queries": self.square_queries}  # fmt: skip
        for key, value in counts.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{key} must be an integer >= 1, got {value!r}")
        if not self.sweep or any(not e > 0 for e in self.sweep) or not self.eps > 0:
            raise ValueError("eps and every sweep radius must be > 0")
        if not self.unbounded >= UNBOUNDED:
            raise ValueError(f"unbounded must be >= {UNBOUNDED} (a radius at which every image "
                             f"can be moved to mid-grey), got {self.unbounded!r}")  # fmt: skip
        if any(e >= self.unbounded for e in self.sweep):
            raise ValueError(f"every sweep radius must be below unbounded ({self.unbounded:g})")
        for key in ("tolerance", "tiny_gradient", "tiny_share"):
            if not getattr(self, key) >= 0:
                raise ValueError(f"{key} must be >= 0, got {getattr(self, key)!r}")


@dataclass
class Check:
    """One diagnostic: its name, its numbers in words, and whether it flags masking."""

    name: str
    detail: str
    flagged: bool | None  # None: not run (e.g. no twin)

    @property
    def verdict(self) -> str:
        return {True: "FLAGGED", False: "passed", None: "not run"}[self.flagged]


@dataclass
class Strength:
    """How much stronger attacks lower PGD-``steps`` on the same images (accuracies in %)."""

    steps: int
    base: float  # PGD-steps, one random start
    long_steps: int
    long: float
    restarts: int
    restarted: float  # point-wise worst over the restarts
    tolerance: float

    @property
    def drop(self) -> float:
        return max(self.base - self.long, self.base - self.restarted)

    @property
    def verdict(self) -> str:
        return (f"PGD-{self.steps} OVERSTATES by {self.drop:.1f}" if self.drop > self.tolerance
                else f"PGD-{self.steps} holds")  # fmt: skip

    @property
    def detail(self) -> str:
        return (f"PGD-{self.steps} {self.base:.1f}; PGD-{self.long_steps} {self.long:.1f} "
                f"({self.long - self.base:+.1f}); PGD-{self.steps} x{self.restarts} restarts "
                f"{self.restarted:.1f} ({self.restarted - self.base:+.1f}); a drop of more than "
                f"{self.tolerance:g} says PGD-{self.steps} overstates")  # fmt: skip

    def as_dict(self) -> dict:
        return dict(vars(self))


@dataclass
class Diagnosis:
    title: str  # 'rhcl (r-LE)'
    images: int
    eps: float
    checks: list[Check] = field(default_factory=list)
    strength: Strength | None = None
    white_box: float | None = None  # the point-wise worst of the strength report's PGD runs (%)

    @property
    def flagged(self) -> bool:
        return any(c.flagged for c in self.checks)

    @property
    def verdict(self) -> str:
        names = [c.name for c in self.checks if c.flagged]
        return f"FLAGGED ({', '.join(names)})" if names else "passed"

    def as_dict(self) -> dict:
        return {"title": self.title, "images": self.images, "eps": self.eps, "verdict": self.verdict,
                "checks": [{"name": c.name, "detail": c.detail, "flagged": c.flagged}
                           for c in self.checks],
                "strength": None if self.strength is None else self.strength.as_dict(),
                "white_box": self.white_box}  # fmt: skip

    @classmethod
    def from_dict(cls, data: dict) -> Diagnosis:
        strength = data.get("strength")
        return cls(data["title"], data["images"], data["eps"],
                   [Check(c["name"], c["detail"], c["flagged"]) for c in data["checks"]],
                   None if strength is None else Strength(**strength), data.get("white_box"))  # fmt: skip

    def lines(self) -> list[str]:
        """One printed line per check (numbers and verdict), the model's verdict, then the
        strength report."""
        out = [f"{self.title}: {c.name}: {c.verdict}: {c.detail}" for c in self.checks]
        out.append(f"{self.title}: gradient-masking diagnostics {self.verdict}")
        if self.strength is not None:
            out.append(f"{self.title}: attack strength: {self.strength.verdict}: "
                       f"{self.strength.detail}")  # fmt: skip
        return out


def _accuracy(model: nn.Module, x: Tensor, y: Tensor, batch_size: int) -> Tensor:
    """Per-image correctness (bool), batched, without gradients."""
    with torch.no_grad(), eval_mode(model):
        return torch.cat([model(x[i : i + batch_size]).argmax(1) == y[i : i + batch_size]
                          for i in range(0, len(x), batch_size)])  # fmt: skip


def _pgd_correct(
    model: nn.Module, x: Tensor, y: Tensor, eps: float, steps: int, restarts: int,
    generator: torch.Generator, batch_size: int,
) -> Tensor:  # fmt: skip
    """Per image: still correct after every one of ``restarts`` random-start PGD runs (step
    eps/10, cross-entropy), i.e. the point-wise worst case over the restarts."""
    correct = torch.ones(len(x), dtype=torch.bool, device=x.device)
    with eval_mode(model):
        for _ in range(restarts):
            for i in range(0, len(x), batch_size):
                xb, yb = x[i : i + batch_size], y[i : i + batch_size]
                adv = pgd_linf(lambda v, yb=yb: F.cross_entropy(model(v), yb, reduction="sum"),
                               xb, eps, eps / 10, steps, True, generator=generator)  # fmt: skip
                correct[i : i + batch_size] &= _accuracy(model, adv, yb, batch_size)
    return correct


def _pct(mask: Tensor) -> float:
    return 100.0 * float(mask.float().mean())


def input_gradient_norms(model: nn.Module, x: Tensor, y: Tensor, batch_size: int) -> Tensor:
    """l1 norm of each image's input gradient of its own cross-entropy (the attacked loss)."""
    norms = []
    with torch.enable_grad(), eval_mode(model):
        for i in range(0, len(x), batch_size):
            xb = x[i : i + batch_size].detach().clone().requires_grad_(True)
            loss = F.cross_entropy(model(xb), y[i : i + batch_size], reduction="sum")
            (grad,) = torch.autograd.grad(loss, xb)
            norms.append(grad.reshape(len(xb), -1).abs().sum(1).float())
    return torch.cat(norms)


def _pgd_accuracy(model, x, y, eps, steps, generator, batch_size, restarts: int = 1) -> float:
    return _pct(_pgd_correct(model, x, y, eps, steps, restarts, generator, batch_size))


def diagnose(
    model: nn.Module, x: Tensor, y: Tensor, spec: DiagnosticsSpec, title: str, seed: int = 0,
    batch_size: int = 256, twin: nn.Module | None = None, twin_name: str = "",
) -> Diagnosis:  # fmt: skip
    """Every check of the module docstring, and the strength report, on (x, y) (its first
    ``spec.images`` images)."""
    from solo_hyper.evaluation import autoattack

    x, y = x[: spec.images], y[: spec.images]
    diagnosis = Diagnosis(title, len(x), spec.eps)
    generator = torch.Generator(device=x.device).manual_seed(seed)
    eps, tol = spec.eps, spec.tolerance
    with torch.no_grad(), eval_mode(model):
        classes = int(model(x[:1]).shape[1])
    chance = 100.0 / classes

    # attack strength: PGD-steps, then more steps, then restarts, each on its own
    base = _pgd_correct(model, x, y, eps, spec.steps, 1, generator, batch_size)
    long = _pgd_correct(model, x, y, eps, spec.long_steps, 1, generator, batch_size)
    restarted = base & _pgd_correct(model, x, y, eps, spec.steps, spec.restarts - 1, generator,
                                    batch_size)  # fmt: skip
    diagnosis.strength = Strength(spec.steps, _pct(base), spec.long_steps, _pct(long),
                                  spec.restarts, _pct(restarted), tol)  # fmt: skip
    worst = base & long & restarted
    white_box = diagnosis.white_box = _pct(worst)

    # black-box: Square must not beat the white-box attacks
    adv = torch.cat([
        autoattack.square(model, x[i : i + batch_size], y[i : i + batch_size], eps,
                          spec.square_queries, seed)
        for i in range(0, len(x), batch_size)
    ])  # fmt: skip
    square = _pct(_accuracy(model, adv, y, batch_size))
    diagnosis.checks.append(Check(
        "black-box", f"Square ({spec.square_queries} queries) {square:.1f} vs white-box "
        f"{white_box:.1f} (every PGD run of the strength report, point-wise) at eps "
        f"{eps_text(eps)}; Square lower by more than {tol:g} flags", square < white_box - tol))  # fmt: skip

    # unbounded: at eps >= 0.5 every image can be made mid-grey, so PGD must reach chance
    unbounded = _pgd_accuracy(model, x, y, spec.unbounded, spec.long_steps, generator, batch_size)
    diagnosis.checks.append(Check(
        "unbounded", f"PGD-{spec.long_steps} at eps {eps_text(spec.unbounded)}: {unbounded:.1f} "
        f"(chance {chance:.1f}); above chance by more than {tol:g} flags",
        unbounded > chance + tol))  # fmt: skip

    # monotone: accuracy must not rise with eps
    sweep = [(r, _pgd_accuracy(model, x, y, r, spec.steps, generator, batch_size))
             for r in sorted(spec.sweep)]  # fmt: skip
    sweep.append((spec.unbounded, unbounded))
    rises = [(a, b) for a, b in zip(sweep, sweep[1:]) if b[1] > a[1] + tol]
    text = ", ".join(f"{eps_text(r)}: {a:.1f}" for r, a in sweep)
    diagnosis.checks.append(Check(
        "monotone", f"PGD-{spec.steps} accuracy by eps {text} (the last PGD-{spec.long_steps}); "
        f"a rise of more than {tol:g} flags", bool(rises)))  # fmt: skip

    # gradients: a large share of ~0 input gradients
    norms = input_gradient_norms(model, x, y, batch_size)
    tiny = 100.0 * float((norms <= spec.tiny_gradient).float().mean())
    q = torch.quantile(norms.double(), torch.tensor([0.0, 0.1, 0.5, 0.9, 1.0], dtype=torch.float64,
                                                     device=norms.device))  # fmt: skip
    quantiles = ", ".join(f"{name} {v:.3g}" for name, v in zip(("min", "p10", "median", "p90",
                                                                "max"), q.tolist()))  # fmt: skip
    diagnosis.checks.append(Check(
        "gradients", f"l1 norm of the input gradient of the cross-entropy: {quantiles}; "
        f"{tiny:.1f}% of images <= {spec.tiny_gradient:g} (more than {spec.tiny_share:g}% flags)",
        tiny > spec.tiny_share))  # fmt: skip
    if twin is not None:
        diagnosis.checks.append(transfer_check(model, x, y, spec, diagnosis.white_box, twin, twin_name,
                                               seed, batch_size))  # fmt: skip
    return diagnosis


def transfer_check(
    model: nn.Module, x: Tensor, y: Tensor, spec: DiagnosticsSpec, white_box: float,
    twin: nn.Module, twin_name: str = "", seed: int = 0, batch_size: int = 256,
) -> Check:  # fmt: skip
    """Examples crafted on the Euclidean twin (PGD-``long_steps`` at ``spec.eps``) must not beat
    the white-box attacks (``white_box``: the diagnosis' point-wise worst of its PGD runs, on the
    same first ``spec.images`` images). Its own seeded generator: a pair's two models are
    diagnosed in separate jobs, and a model's check is added once its twin is evaluated."""
    x, y = x[: spec.images], y[: spec.images]
    generator = torch.Generator(device=x.device).manual_seed(seed)
    eps = spec.eps
    with eval_mode(twin):
        crafted = torch.cat([
            pgd_linf(lambda v, yb=y[i : i + batch_size]: F.cross_entropy(
                twin(v), yb, reduction="sum"), x[i : i + batch_size], eps, eps / 10,
                spec.long_steps, True, generator=generator)
            for i in range(0, len(x), batch_size)
        ])  # fmt: skip
    transfer = _pct(_accuracy(model, crafted, y, batch_size))
    return Check(
        "transfer", f"PGD-{spec.long_steps} crafted on {twin_name or 'the twin'}: {transfer:.1f} vs "
        f"white-box {white_box:.1f}; lower by more than {spec.tolerance:g} flags",
        transfer < white_box - spec.tolerance)  # fmt: skip


def markdown(diagnoses: list[Diagnosis]) -> str:
    """robust/diagnostics.md: one section per evaluated model, one line per check."""
    parts = ["# Gradient-masking diagnostics", "",
             "Each model's checks (solo_hyper/evaluation/diagnostics.py); a FLAGGED model's robust "
             "columns are marked * in every table that shows them.", ""]  # fmt: skip
    for d in diagnoses:
        parts += [f"## {d.title}: {d.verdict}", "",
                  f"{d.images} evaluation images, eps {eps_text(d.eps)}.", "",
                  "| check | verdict | numbers |", "|---|---|---|"]  # fmt: skip
        parts += [f"| {c.name} | {c.verdict} | {c.detail} |" for c in d.checks]
        if d.strength is not None:
            parts.append(f"| attack strength (not a masking check) | {d.strength.verdict} | "
                         f"{d.strength.detail} |")  # fmt: skip
        parts.append("")
    return "\n".join(parts)
