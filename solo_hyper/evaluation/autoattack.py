"""AutoAttack (Croce & Hein, ICML 2020) and its Square attack on a pixel-space classifier.

The official implementation (the ``pyautoattack`` package, Croce & Hein's code) does the attacking;
this module only runs it the way a robustness number needs: on the classifier as attacked
(normalisation inside the model, logits out), in eval mode, with a fixed seed and the global RNG
left as it was, every adversarial example checked against the budget, and the package's own
sanity-check warnings (zero gradients, randomised or dynamic defences, Square stronger than the
gradient attacks) collected instead of scrolling past on stderr.
"""

from __future__ import annotations

import importlib.util
import logging
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from solo_hyper.attacks import eps_text, eval_mode

PACKAGE = "pyautoattack"
INSTALL = "pip install pyautoattack==0.2.0"
VERSIONS = ("standard", "plus", "rand", "custom")
ATTACKS = ("apgd-ce", "apgd-dlr", "fab", "square", "apgd-t", "fab-t")
_BUDGET_SLACK = 1e-6  # float rounding of x + delta


def available() -> bool:
    return importlib.util.find_spec(PACKAGE) is not None


def missing_message(where: str) -> str:
    """The one-line error for a config that needs the package on a machine without it."""
    return (
        f"{where} needs AutoAttack (the {PACKAGE} package, Croce & Hein's code), which is not "
        f"installed: run '{INSTALL}' in this environment (./scripts/bootstrap.sh installs it)"
    )


@dataclass(frozen=True)
class AutoAttackSpec:
    """AutoAttack at l_inf radius ``eps`` (pixels in [0, 1]); ``attacks`` only with 'custom';
    ``images``: attack only the first that many evaluation images (None: all of them), because
    the standard version costs hundreds of PGD-20 evaluations per image that resists it (FAB-T's
    and Square's share), which a CPU affords on a thousand images, not on a whole test split."""

    eps: float
    version: str = "standard"
    attacks: tuple[str, ...] = ()
    images: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.eps, (int, float)) or not self.eps > 0 or self.eps == float("inf"):
            raise ValueError(f"autoattack eps must be a finite number > 0, got {self.eps!r}")
        if self.version not in VERSIONS:
            raise ValueError(f"autoattack version must be one of {', '.join(VERSIONS)}, "
                             f"got {self.version!r}")  # fmt: skip
        if (self.version == "custom") != bool(self.attacks):
            raise ValueError("autoattack attacks are given with version: custom (and only then)")
        unknown = [a for a in self.attacks if a not in ATTACKS]
        if unknown:
            raise ValueError(f"autoattack attacks {unknown} unknown; choose from {list(ATTACKS)}")
        if self.images is not None and (
            isinstance(self.images, bool) or not isinstance(self.images, int) or self.images < 1
        ):
            raise ValueError(f"autoattack images must be an integer >= 1 (or null: every image), "
                             f"got {self.images!r}")  # fmt: skip

    @property
    def label(self) -> str:
        """'AA 8/255' (the standard version), 'AA-plus 0.1', 'AA-apgd-ce+apgd-t 8/255' (custom)."""
        name = {"standard": "AA", "custom": "AA-" + "+".join(self.attacks)}.get(
            self.version, f"AA-{self.version}")  # fmt: skip
        return f"{name} {eps_text(self.eps)}"

    def attack(self, model: nn.Module, seed: int, device: torch.device):
        """The package's AutoAttack object. ``custom`` runs the listed attacks, in their order,
        as the standard version's own attack objects (its settings: APGD-CE 1 restart, APGD-T 9
        target classes x 1 restart, FAB-T 9 targets, Square 5,000 queries), so ``[apgd-ce,
        apgd-t]`` is exactly the standard version's first two stages; the package's own custom
        version keeps APGD-CE at 5 restarts."""
        from pyautoattack import AutoAttack

        version = "standard" if self.version == "custom" else self.version
        attack = AutoAttack(model, norm="Linf", eps=float(self.eps), version=version, seed=seed,
                            device=device)  # fmt: skip
        if self.version == "custom":
            attack.version, attack.attacks_to_run = "custom", list(self.attacks)
        return attack

    def perturb(
        self, model: nn.Module, x: Tensor, y: Tensor, seed: int, messages: list[str] | None = None
    ) -> Tensor:
        """AutoAttack's adversarial examples for (x, y): per image the first of its attacks that
        fools the model (each attack runs on the images still classified correctly), so the
        accuracy on the result is the point-wise worst case over its attacks. Its warnings are
        appended to ``messages`` (each once)."""
        with eval_mode(model), _seeded(seed, x.device), _collected(messages):
            attack = self.attack(model, seed, x.device)
            x_adv, _ = attack.run_standard_evaluation(x, y, batch_size=len(x))
        return checked(x_adv, x, self.eps, self.label)


def square(
    model: nn.Module, x: Tensor, y: Tensor, eps: float, queries: int, seed: int,
    messages: list[str] | None = None,
) -> Tensor:  # fmt: skip
    """The black-box Square attack (Andriushchenko et al.; AutoAttack's implementation, margin
    loss, AutoAttack's p_init 0.8) with ``queries`` queries per image."""
    from pyautoattack.square import SquareAttack

    with eval_mode(model), _seeded(seed, x.device), _collected(messages), torch.no_grad():
        attack = SquareAttack(
            model, norm="Linf", n_queries=queries, eps=float(eps), p_init=0.8, n_restarts=1,
            seed=seed, verbose=False, device=x.device, resc_schedule=False,
        )  # fmt: skip
        x_adv = attack.perturb(x, y)
    return checked(x_adv, x, eps, "Square")


def checked(x_adv: Tensor, x: Tensor, eps: float, name: str) -> Tensor:
    """``x_adv`` after checking it is within the l_inf budget and the pixel range."""
    x_adv = x_adv.detach().to(x.dtype)
    if not bool(torch.isfinite(x_adv).all()):
        raise RuntimeError(f"{name} returned non-finite images")
    over = float((x_adv - x).abs().amax()) if x.numel() else 0.0
    if over > eps + _BUDGET_SLACK or float(x_adv.amin()) < -_BUDGET_SLACK or float(
        x_adv.amax()
    ) > 1 + _BUDGET_SLACK:
        raise RuntimeError(f"{name} left the budget: max |delta| {over:.6f} > eps {eps:.6f} "
                           "or pixels outside [0, 1]")  # fmt: skip
    return x_adv


@contextmanager
def _seeded(seed: int, device: torch.device) -> Iterator[None]:
    """The package seeds torch's global generators itself: give it a fork of them."""
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield


class _Collect(logging.Handler):
    def __init__(self, messages: list[str]) -> None:
        super().__init__(logging.WARNING)
        self.messages = messages

    def emit(self, record: logging.LogRecord) -> None:
        _add(self.messages, record.getMessage())


def _add(messages: list[str], text: str) -> None:
    if text not in messages:
        messages.append(text)


@contextmanager
def _collected(messages: list[str] | None) -> Iterator[None]:
    """The package's warnings (its logger's and ``warnings.warn``) into ``messages``; other
    warnings raised meanwhile are passed on as they were."""
    messages = [] if messages is None else messages
    logger = logging.getLogger("auto-attack")
    handler, propagate = _Collect(messages), logger.propagate
    logger.addHandler(handler)
    logger.propagate = False  # its debug chatter and warnings do not reach the root logger
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate
    for w in caught:
        if PACKAGE in str(w.filename):
            _add(messages, str(w.message))
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
