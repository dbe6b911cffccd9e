"""The robust evaluation's config (``robust-eval``, ``finetune-adv``; ``configs/robust/``): its
keys, defaults and meanings (``ROBUST``, ``ROBUST_DESCRIPTIONS``: the configuration reference is
made from them), and the parsing of every value, checked before any work: numbers and fractions
such as 8/255 (a step also eps/n), PGD and AutoAttack entries, the diagnostics' budget, the heads'
and the fine-tuning's schedules. What comes out is plain data; ``evaluation.robust`` makes the
attacks, the schedules and the diagnostics of it (and their own checks speak through
ConfigError too).
"""

from __future__ import annotations

import re
from typing import Any

from solo_hyper.config.devices import resolve_device
from solo_hyper.config.errors import ConfigError, closest
from solo_hyper.config.loading import positive_int_or_none
from solo_hyper.config.schema import Schema

_TRAINING = {"epochs": 150, "lr": 0.1, "momentum": 0.9, "weight_decay": 5e-4,
             "milestones": [30, 50, 100], "gamma": 0.1}  # fmt: skip
_TRAIN_ATTACK = {"eps": "8/255", "alpha": 0.007, "steps": 10, "random_start": True}
SOLVERS = ("sgd", "logistic")  # LE's fit (linear.solver)

ROBUST_DEFAULTS: dict[str, Any] = {
    "seed": 0,
    "device": "auto",  # auto | cpu | cuda | cuda:N
    "out": None,  # None: <run dir>/robust
    # batch size of every stage; subsets of the run's own dataset (null: all of it)
    "data": {"batch_size": 1024, "train_subset": None, "val_subset": None},
    # heads on the frozen encoder (RoCL linear_eval.py): LE on clean images, r-LE on PGD-10
    # standardize: SGD sees the features standardised by the clean training features' statistics
    # (the head stays linear on the features: evaluation/adversarial.py StandardizedLinear), so a
    # short schedule converges on any network, an untrained control's included; false: RoCL's
    # head on raw features. solver: LE's fit, sgd (the schedule below, RoCL's) or logistic (the
    # L2-regularised logistic regression solved to convergence, C chosen on a held-out tenth:
    # metrics/logistic.py); r-LE is SGD either way (its examples depend on the head)
    "linear": {"standard": True, "robust": True, "standardize": True, "solver": "sgd", **_TRAINING,
               "attack": dict(_TRAIN_ATTACK)},  # fmt: skip
    # RHCL+AT: supervised adversarial fine-tuning of encoder + head (Madry et al.)
    "finetune": {**_TRAINING, "attack": dict(_TRAIN_ATTACK)},
    # attacks on encoder + head: white-box PGD (RoCL robustness_test.py) and AutoAttack entries
    # ({autoattack: {eps: 8/255, version: standard}}); null removes one
    "evaluation": {
        # null: every evaluation image; N: a fixed class-stratified subset of N (the first N/C
        # of each class in the evaluation order, evaluation/stratified.py), the same images for
        # every model: clean accuracy and every attack are measured on it
        "images": None,
        "attacks": {
            "pgd20_8": {"eps": "8/255", "alpha": "eps/10", "steps": 20, "random_start": True},
            "pgd20_16": {"eps": "16/255", "alpha": "eps/10", "steps": 20, "random_start": True},
        },
        # gradient-masking checks of every evaluated model (evaluation/diagnostics.py) on
        # `images` class-stratified evaluation images, written to <out>/diagnostics.md; the
        # strength report: PGD-`steps` against PGD-`long_steps` and `restarts` restarts
        "diagnostics": {
            "enabled": True, "images": 100, "eps": "8/255", "steps": 20, "long_steps": 200,
            "restarts": 10, "sweep": ["2/255", "8/255", "16/255", 0.1, 0.2, 0.3],
            "unbounded": 0.5, "square_queries": 5000, "tolerance": 2.0, "tiny_gradient": 1e-10,
            "tiny_share": 10.0,
        },
    },
}

ATTACK_KEYS = ("eps", "alpha", "steps", "random_start")
AA_KEYS = ("eps", "version", "attacks", "images")
_FRACTION = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*/\s*([0-9]*\.?[0-9]+)\s*$")
_NUMBER = re.compile(r"^[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?$")


def parse_number(value: Any, where: str, eps: float | None = None) -> float:
    """A number, 'a/b' (e.g. '8/255') or, for a step, 'eps/n'."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        if eps is not None and text.startswith("eps/"):
            return eps / parse_number(text[4:], where)
        match = _FRACTION.match(text)
        if match and float(match.group(2)) != 0:
            return float(match.group(1)) / float(match.group(2))
        if _NUMBER.match(text):
            return float(text)
    allowed = "a number or a fraction such as 8/255" + (" or eps/10" if eps is not None else "")
    raise ConfigError(f"{where} must be {allowed}, got {value!r}")


def autoattack_entry(entry: Any, where: str) -> dict:
    """``{eps: 8/255, version: standard}`` (``attacks: [...]`` with ``version: custom``) as
    (eps, version, attacks, images)."""
    if not isinstance(entry, dict) or "eps" not in entry:
        raise ConfigError(f"{where} must be a mapping with keys {list(AA_KEYS)} "
                          "(e.g. {eps: 8/255, version: standard})")  # fmt: skip
    for key in entry:
        if key not in AA_KEYS:
            raise ConfigError(f"unknown key {where}.{key}{closest(key, AA_KEYS)}")
    attacks = entry.get("attacks") or ()
    if not isinstance(attacks, (list, tuple)):
        raise ConfigError(f"{where}.attacks must be a list such as [apgd-ce, square]")
    return {"eps": parse_number(entry["eps"], f"{where}.eps"),
            "version": entry.get("version", "standard"), "attacks": tuple(attacks),
            "images": entry.get("images")}  # fmt: skip


def attack_entry(entry: Any, where: str) -> tuple[str, dict]:
    """("pgd", its values) of a PGD entry, or ("autoattack", its values) of
    ``{autoattack: {...}}``."""
    if isinstance(entry, dict) and "autoattack" in entry:
        if len(entry) != 1:
            raise ConfigError(f"{where}: an autoattack entry has the one key 'autoattack', got "
                              f"{sorted(entry)}")  # fmt: skip
        return "autoattack", autoattack_entry(entry["autoattack"], f"{where}.autoattack")
    return "pgd", pgd_entry(entry, where)


def pgd_entry(entry: Any, where: str) -> dict:
    """A PGD entry as (eps, alpha, steps, random_start); alpha may be 'eps/n'."""
    if not isinstance(entry, dict):
        raise ConfigError(f"{where} must be a mapping with keys {list(ATTACK_KEYS)}")
    for key in entry:
        if key not in ATTACK_KEYS:
            raise ConfigError(f"unknown key {where}.{key}{closest(key, ATTACK_KEYS)}")
    missing = [k for k in ("eps", "alpha", "steps") if k not in entry]
    if missing:
        raise ConfigError(f"{where} needs {missing}")
    eps = parse_number(entry["eps"], f"{where}.eps")
    alpha = parse_number(entry["alpha"], f"{where}.alpha", eps=eps)
    random_start = entry.get("random_start", True)
    if not isinstance(random_start, bool):
        raise ConfigError(f"{where}.random_start must be true or false, got {random_start!r}")
    return {"eps": eps, "alpha": alpha, "steps": entry["steps"], "random_start": random_start}


def diagnostics_section(section: dict, where: str = "evaluation.diagnostics") -> dict | None:
    """The diagnostics' budget and thresholds (None: disabled)."""
    if not isinstance(section["enabled"], bool):
        raise ConfigError(f"{where}.enabled must be true or false, got {section['enabled']!r}")
    if not section["enabled"]:
        return None
    if not isinstance(section["sweep"], list) or not section["sweep"]:
        raise ConfigError(f"{where}.sweep must be a non-empty list, got {section['sweep']!r}")
    numbers = {k: parse_number(section[k], f"{where}.{k}")
               for k in ("eps", "unbounded", "tolerance", "tiny_gradient", "tiny_share")}  # fmt: skip
    counts = {k: section[k] for k in ("images", "steps", "long_steps", "restarts", "square_queries")}
    return {"sweep": tuple(parse_number(e, f"{where}.sweep") for e in section["sweep"]),
            **counts, **numbers}  # fmt: skip


def schedule_section(section: dict, where: str, batch_size: int) -> dict:
    """A head's (or the fine-tuning's) SGD schedule: epochs, lr, momentum, weight decay,
    milestones, gamma and the batch size."""
    epochs = section["epochs"]
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 0:
        raise ConfigError(f"{where}.epochs must be an integer >= 0, got {epochs!r}")
    for key in ("lr", "gamma"):
        if parse_number(section[key], f"{where}.{key}") <= 0:
            raise ConfigError(f"{where}.{key} must be > 0, got {section[key]!r}")
    for key in ("momentum", "weight_decay"):
        if parse_number(section[key], f"{where}.{key}") < 0:
            raise ConfigError(f"{where}.{key} must be >= 0, got {section[key]!r}")
    milestones = section["milestones"] or []
    if not isinstance(milestones, list) or not all(
        isinstance(m, int) and not isinstance(m, bool) and m > 0 for m in milestones
    ):
        raise ConfigError(
            f"{where}.milestones must be a list of positive epoch numbers, got {milestones!r}"
        )
    return {
        "epochs": epochs,
        "lr": parse_number(section["lr"], ""),
        "momentum": parse_number(section["momentum"], ""),
        "weight_decay": parse_number(section["weight_decay"], ""),
        "milestones": tuple(sorted(milestones)),
        "gamma": parse_number(section["gamma"], ""),
        "batch_size": batch_size,
    }


# (type, meaning) of every key of ROBUST_DEFAULTS: the configuration reference
# (docs/configuration.md, ``python -m solo_hyper.cli.reference``) is made from it; radii and
# steps are numbers or fractions such as 8/255 (a step also eps/n), on [0, 1] pixels
ROBUST_DESCRIPTIONS: dict[str, tuple[str, str]] = {
    "seed": ("int", "random seed of the heads, the fine-tuning and the attacks"),
    "device": ("str", "auto | cpu | cuda | cuda:N"),
    "out": ("path | null", "folder of the tables and diagnostics (null: <run dir>/robust)"),
    "data.batch_size": ("int", "batch size of every stage"),
    "data.train_subset": ("int | null", "train the heads on a fixed random subset of this many training images (null: all)"),
    "data.val_subset": ("int | null", "evaluate on a fixed random subset of this many test images (null: all)"),
    "linear.standard": ("bool", "train LE: a linear head on the frozen encoder's features of clean images"),
    "linear.robust": ("bool", "train r-LE: a linear head on the features of PGD images (linear.attack)"),
    "linear.standardize": ("bool", "the heads' SGD sees features standardised by the clean training features' statistics (the head stays linear); false: raw features, RoCL's head"),
    "linear.solver": ("str", "how LE is fitted: sgd (the schedule of linear.epochs, RoCL's) or logistic (L2-regularised logistic regression on the standardised features solved to convergence, its L2 strength chosen on a held-out tenth of the training images; metrics/logistic.py); r-LE always trains by SGD"),
    "linear.epochs": ("int", "epochs of SGD for each head (LE under solver: sgd; r-LE always)"),
    "linear.lr": ("float", "learning rate of the heads"),
    "linear.momentum": ("float", "SGD momentum of the heads"),
    "linear.weight_decay": ("float", "weight decay of the heads"),
    "linear.milestones": ("list[int]", "epochs at which the learning rate is multiplied by gamma"),
    "linear.gamma": ("float", "learning-rate factor at each milestone"),
    "linear.attack": ("mapping", "the PGD that makes r-LE's training images: eps, alpha, steps, random_start"),
    "finetune.epochs": ("int", "AT (finetune-adv): epochs of supervised adversarial fine-tuning of encoder and head"),
    "finetune.lr": ("float", "AT: learning rate"),
    "finetune.momentum": ("float", "AT: SGD momentum"),
    "finetune.weight_decay": ("float", "AT: weight decay"),
    "finetune.milestones": ("list[int]", "AT: epochs at which the learning rate is multiplied by gamma"),
    "finetune.gamma": ("float", "AT: learning-rate factor at each milestone"),
    "finetune.attack": ("mapping", "AT: the PGD that makes the training images: eps, alpha, steps, random_start"),
    "evaluation.images": ("int | null", "a fixed class-stratified subset of this many test images for clean accuracy and every attack, the same for every model (null: every evaluation image)"),
    "evaluation.attacks": ("mapping", "the attacks on encoder + head, by name: PGD entries {eps, alpha, steps, random_start} or {autoattack: {eps, version, attacks, images}}; null removes one"),
    "evaluation.diagnostics.enabled": ("bool", "run the gradient-masking checks on every evaluated model (diagnostics.md)"),
    "evaluation.diagnostics.images": ("int", "the checks run on the first this many test images"),
    "evaluation.diagnostics.eps": ("float | str", "radius of the strength, black-box, transfer and gradient checks"),
    "evaluation.diagnostics.steps": ("int", "strength report: the reported PGD's step count (PGD-20), the base of the stronger attacks"),
    "evaluation.diagnostics.long_steps": ("int", "strength report: PGD with this many steps, against the reported PGD"),
    "evaluation.diagnostics.restarts": ("int", "strength report: PGD with this many random restarts, on its own, against the reported PGD"),
    "evaluation.diagnostics.sweep": ("list[float | str]", "monotone check: radii along which PGD accuracy must not rise"),
    "evaluation.diagnostics.unbounded": ("float | str", "unbounded check: a radius no classifier can stand (>= 0.5 on [0, 1] pixels); accuracy there must be at chance"),
    "evaluation.diagnostics.square_queries": ("int", "black-box check: queries of the Square attack"),
    "evaluation.diagnostics.tolerance": ("float", "accuracy points a check may be off before it flags"),
    "evaluation.diagnostics.tiny_gradient": ("float", "gradient check: l1 norm of an input gradient that counts as zero"),
    "evaluation.diagnostics.tiny_share": ("float", "gradient check: % of images with a zero gradient that flags masking"),
}  # fmt: skip


ROBUST = Schema(
    "robust-eval config", ROBUST_DEFAULTS,
    frozenset({("evaluation", "attacks"), ("linear", "attack"), ("finetune", "attack")}),
)  # fmt: skip


def load(path: str | None, overrides: list[str] = ()) -> dict:
    """The robust-evaluation config, defaults < YAML < overrides, every value checked and parsed:
    the merged config under "raw", the device, the schedules (``schedule_section``), the
    training attacks and every evaluation attack (``attack_entry``, by name), the diagnostics
    (``diagnostics_section``)."""
    raw = ROBUST.load(path, overrides)
    data = raw["data"]
    batch_size = data["batch_size"]
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ConfigError(f"data.batch_size must be a positive integer, got {batch_size!r}")
    for key in ("train_subset", "val_subset"):
        positive_int_or_none(data[key], f"data.{key}")
    positive_int_or_none(raw["evaluation"]["images"], "evaluation.images")
    if not isinstance(raw["seed"], int) or isinstance(raw["seed"], bool):
        raise ConfigError(f"seed must be an integer, got {raw['seed']!r}")
    device = resolve_device(raw["device"], "device")
    for key in ("standard", "robust", "standardize"):
        if not isinstance(raw["linear"][key], bool):
            raise ConfigError(f"linear.{key} must be true or false, got {raw['linear'][key]!r}")
    if raw["linear"]["solver"] not in SOLVERS:
        raise ConfigError(f"linear.solver must be one of {', '.join(SOLVERS)}, got "
                          f"{raw['linear']['solver']!r}{closest(str(raw['linear']['solver']), list(SOLVERS))}")  # fmt: skip
    return {
        "raw": raw,
        "device": device,
        "linear": schedule_section(raw["linear"], "linear", batch_size),
        "linear_attack": pgd_entry(raw["linear"]["attack"], "linear.attack"),
        "finetune": schedule_section(raw["finetune"], "finetune", batch_size),
        "finetune_attack": pgd_entry(raw["finetune"]["attack"], "finetune.attack"),
        "attacks": {name: attack_entry(entry, f"evaluation.attacks.{name}")
                    for name, entry in raw["evaluation"]["attacks"].items() if entry is not None},
        "diagnostics": diagnostics_section(raw["evaluation"]["diagnostics"]),
    }  # fmt: skip


__all__ = ["ROBUST", "ROBUST_DEFAULTS", "ROBUST_DESCRIPTIONS", "attack_entry", "load",
           "parse_number", "pgd_entry"]  # fmt: skip
