"""Robustness evaluation of a pretraining run: ``robust-eval`` (LE, r-LE) and ``finetune-adv`` (AT).

Reads a robust-evaluation YAML (``configs/robust/<dataset>.yaml``; defaults = RoCL's protocol,
see ``ROBUST_DEFAULTS``), checks it completely before any work, rebuilds the pretrained model
with :func:`solo_hyper.run.checkpoints.load_pretrained`, trains the heads / fine-tunes with
``evaluation/adversarial.py`` and writes a table (method, protocol, A_nat, one column per
white-box attack) as markdown, CSV and JSON next to the run (``<run dir>/robust/``).
"""

from __future__ import annotations

import copy
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from solo_hyper.augment import to_float_rgb
from solo_hyper.config import (
    ConfigError,
    Schema,
    closest,
    positive_int_or_none,
    resolve_device,
)
from solo_hyper.evaluation import tables
from solo_hyper.evaluation.adversarial import (
    Batches,
    PGDSpec,
    PixelClassifier,
    Schedule,
    adversarial_finetune,
    robust_accuracy,
    train_linear_head,
)
from solo_hyper.evaluation.progress import Progress

_TRAINING = {"epochs": 150, "lr": 0.1, "momentum": 0.9, "weight_decay": 5e-4,
             "milestones": [30, 50, 100], "gamma": 0.1}  # fmt: skip
_TRAIN_ATTACK = {"eps": "8/255", "alpha": 0.007, "steps": 10, "random_start": True}

ROBUST_DEFAULTS: dict[str, Any] = {
    "seed": 0,
    "device": "auto",  # auto | cpu | cuda | cuda:N
    "out": None,  # None: <run dir>/robust
    # batch size of every stage; subsets of the run's own dataset (null: all of it)
    "data": {"batch_size": 1024, "train_subset": None, "val_subset": None},
    # heads on the frozen encoder (RoCL linear_eval.py): LE on clean images, r-LE on PGD-10
    "linear": {"standard": True, "robust": True, **_TRAINING, "attack": dict(_TRAIN_ATTACK)},
    # RHCL+AT: supervised adversarial fine-tuning of encoder + head (Madry et al.)
    "finetune": {**_TRAINING, "attack": dict(_TRAIN_ATTACK)},
    # white-box attacks on encoder + head (RoCL robustness_test.py); null removes one
    "evaluation": {
        "attacks": {
            "pgd20_8": {"eps": "8/255", "alpha": "eps/10", "steps": 20, "random_start": True},
            "pgd20_16": {"eps": "16/255", "alpha": "eps/10", "steps": 20, "random_start": True},
        }
    },
}

ATTACK_KEYS = ("eps", "alpha", "steps", "random_start")
_FRACTION = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*/\s*([0-9]*\.?[0-9]+)\s*$")
_NUMBER = re.compile(r"^[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?$")


# ----------------------------------------------------------------------------- config


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


def parse_attack(entry: Any, where: str) -> PGDSpec:
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
    try:
        return PGDSpec(eps, alpha, entry["steps"], random_start)
    except ValueError as err:
        raise ConfigError(f"{where}: {err}") from None


def parse_schedule(section: dict, where: str, batch_size: int) -> Schedule:
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
    return Schedule(
        epochs=epochs,
        lr=parse_number(section["lr"], ""),
        momentum=parse_number(section["momentum"], ""),
        weight_decay=parse_number(section["weight_decay"], ""),
        milestones=tuple(sorted(milestones)),
        gamma=parse_number(section["gamma"], ""),
        batch_size=batch_size,
    )


ROBUST = Schema(
    "robust-eval config", ROBUST_DEFAULTS,
    frozenset({("evaluation", "attacks"), ("linear", "attack"), ("finetune", "attack")}),
)  # fmt: skip


def load_robust_config(path: str | None, overrides: list[str] = ()) -> dict:
    """The robust-evaluation config: defaults < YAML < overrides, fully checked and parsed.

    Returns the raw merged config under "raw" and the parsed objects (schedules, PGDSpecs).
    """
    raw = ROBUST.load(path, overrides)
    data = raw["data"]
    batch_size = data["batch_size"]
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ConfigError(f"data.batch_size must be a positive integer, got {batch_size!r}")
    for key in ("train_subset", "val_subset"):
        positive_int_or_none(data[key], f"data.{key}")
    if not isinstance(raw["seed"], int) or isinstance(raw["seed"], bool):
        raise ConfigError(f"seed must be an integer, got {raw['seed']!r}")
    device = resolve_device(raw["device"], "device")
    for key in ("standard", "robust"):
        if not isinstance(raw["linear"][key], bool):
            raise ConfigError(f"linear.{key} must be true or false, got {raw['linear'][key]!r}")
    attacks = {
        name: parse_attack(entry, f"evaluation.attacks.{name}")
        for name, entry in raw["evaluation"]["attacks"].items()
        if entry is not None
    }
    labels = [spec.label for spec in attacks.values()]
    if len(set(labels)) != len(labels):
        raise ConfigError(f"evaluation.attacks: two attacks share a label ({labels}); remove one")
    return {
        "raw": raw,
        "device": device,
        "linear": parse_schedule(raw["linear"], "linear", batch_size),
        "linear_attack": parse_attack(raw["linear"]["attack"], "linear.attack"),
        "finetune": parse_schedule(raw["finetune"], "finetune", batch_size),
        "finetune_attack": parse_attack(raw["finetune"]["attack"], "finetune.attack"),
        "attacks": {spec.label: spec for spec in attacks.values()},
    }


# ----------------------------------------------------------------------------- data


def _loaders(cfg: dict, rcfg: dict):
    """The run's dataset as pixel-space batch functions: its full labelled splits (whatever
    subset the run was pretrained on), or the robust config's own subsets."""
    from solo_hyper.data import build_dataloaders

    raw = rcfg["raw"]
    data_cfg = copy.deepcopy(cfg["data"])
    for key in ("train_subset", "val_subset"):
        data_cfg[key] = raw["data"][key]
    batch_size = raw["data"]["batch_size"]
    train, val, num_classes = build_dataloaders(data_cfg, batch_size, seed=raw["seed"])
    if len(train) == 0:
        raise ConfigError(
            f"data.batch_size={batch_size} is larger than the {len(train.dataset)} training "
            "images (batches are full); lower data.batch_size"
        )
    return train, val, num_classes


def _pixel_batches(
    loader, view: Callable[[torch.Tensor], torch.Tensor], desc: str = "", progress: bool = False
):
    """Batch function: uint8 (indexes,) images, targets -> ([0, 1] pixels, targets); every pass
    draws a progress bar when ``progress``."""

    def batches():
        for batch in Progress(loader, desc, progress):
            yield view(batch[-2]), batch[-1]

    return batches


def _pixel_view(model) -> Callable[[torch.Tensor], torch.Tensor]:
    """The run's evaluation view (resize + centre crop) without normalisation."""
    aug = getattr(model, "device_augmentation", None)
    if aug is None:
        return to_float_rgb
    return lambda images: aug.evaluation_view(images, normalize=False)


# ----------------------------------------------------------------------------- runs


@dataclass
class _Run:
    """A pretraining run opened for evaluation, with its data as pixel-space batch functions."""

    model: Any
    cfg: dict
    ckpt: dict
    out: Path
    train: Batches
    val: Batches
    num_classes: int

    def classifier(self, seed: int) -> PixelClassifier:
        """The run's encoder under a new linear head (seeded initialisation)."""
        torch.manual_seed(seed)
        head = nn.Linear(self.model.features_dim, self.num_classes)
        data = self.cfg["data"]
        return PixelClassifier(self.model.encoder, head, data["mean"], data["std"])


def _open_run(checkpoint: str, rcfg: dict, progress: bool = False) -> _Run:
    from solo_hyper.run.checkpoints import load_pretrained, resolve_checkpoint

    model, cfg, ckpt = load_pretrained(checkpoint)
    out = rcfg["raw"]["out"]
    out = Path(out) if out else resolve_checkpoint(checkpoint).parent / "robust"
    train, val, num_classes = _loaders(cfg, rcfg)
    view = _pixel_view(model)
    batches = (
        _pixel_batches(train, view, "train images", progress),
        _pixel_batches(val, view, "test images", progress),
    )
    return _Run(model, cfg, ckpt, out, *batches, num_classes)


def _epochs(n: int) -> str:
    return f"{n} epoch{'' if n == 1 else 's'}"


def robust_eval(
    checkpoint: str, config: str | None = None, overrides: list[str] = (),
    log: Callable[[str], None] = print, progress: bool = False,
) -> list[dict]:  # fmt: skip
    """LE and r-LE of a pretraining run, each evaluated clean and under the white-box attacks."""
    rcfg = load_robust_config(config, overrides)  # every check before any loading
    raw, device, seed = rcfg["raw"], rcfg["device"], rcfg["raw"]["seed"]
    protocols = []  # (name, attack the head is trained on)
    if raw["linear"]["standard"]:
        protocols.append(("LE", None))
    if raw["linear"]["robust"]:
        protocols.append(("r-LE", rcfg["linear_attack"]))
    if not protocols:
        raise ConfigError("nothing to evaluate: set linear.standard=true and/or linear.robust=true")
    run = _open_run(checkpoint, rcfg, progress)
    rows = []
    for protocol, attack in protocols:
        start = time.perf_counter()
        log(f"{protocol}: training the linear head ({_epochs(rcfg['linear'].epochs)}) on {device}")
        classifier = run.classifier(seed)
        losses = train_linear_head(classifier, run.train, rcfg["linear"], device, attack, seed)
        accuracy = robust_accuracy(classifier, run.val, rcfg["attacks"], device, seed)
        rows.append(_row(run, protocol, accuracy, losses, start))
        log(_summary(rows[-1]))
    write_tables(rows, run.out, "robust_eval", rcfg)
    log(f"written: {run.out}/robust_eval.md, .csv, .json")
    return rows


def finetune_adv(
    checkpoint: str, config: str | None = None, overrides: list[str] = (),
    log: Callable[[str], None] = print, progress: bool = False,
) -> list[dict]:  # fmt: skip
    """RHCL+AT: adversarial fine-tuning of encoder + a new head, then the white-box evaluation."""
    rcfg = load_robust_config(config, overrides)  # every check before any loading
    device, seed = rcfg["device"], rcfg["raw"]["seed"]
    run = _open_run(checkpoint, rcfg, progress)
    start = time.perf_counter()
    log(f"AT: adversarial fine-tuning ({_epochs(rcfg['finetune'].epochs)}) on {device}")
    classifier = run.classifier(seed)
    attack = rcfg["finetune_attack"]
    losses = adversarial_finetune(classifier, run.train, rcfg["finetune"], device, attack)
    accuracy = robust_accuracy(classifier, run.val, rcfg["attacks"], device, seed)
    row = {**_row(run, "AT", accuracy, losses, start), "method": f"{run.cfg['method']}+AT"}
    log(_summary(row))
    run.out.mkdir(parents=True, exist_ok=True)
    torch.save(
        {
            "state_dict": classifier.state_dict(),
            "solo_hyper_config": run.cfg,
            "robust": rcfg["raw"],
        },
        run.out / "finetune_adv.pt",
    )
    write_tables([row], run.out, "finetune_adv", rcfg)
    log(f"written: {run.out}/finetune_adv.md, .csv, .json, .pt")
    return [row]


def _row(run: _Run, protocol: str, accuracy: dict, losses: list, start: float) -> dict:
    return {
        "method": run.cfg["method"],
        "protocol": protocol,
        **accuracy,
        "final_train_loss": losses[-1] if losses else None,
        "wall_time_s": round(time.perf_counter() - start, 2),
        "checkpoint": run.ckpt["_path"],
    }


def _summary(row: dict) -> str:
    numbers = ", ".join(f"{k} {v:.2f}" for k, v in row.items() if _is_accuracy(k))
    return f"{row['method']} ({row['protocol']}): {numbers}"


def _is_accuracy(key: str) -> bool:
    return key == "A_nat" or key.startswith("PGD-")


# ----------------------------------------------------------------------------- tables


def table_columns(rows: list[dict]) -> list[str]:
    attacks = [k for k in rows[0] if k.startswith("PGD-")] if rows else []
    return ["method", "protocol", "A_nat", *attacks]


def _cell(key: str, value) -> str:
    return f"{value:.2f}" if _is_accuracy(key) else str(value)


def markdown_table(rows: list[dict]) -> str:
    return tables.markdown_table(rows, [(c, c) for c in table_columns(rows)], _cell)


def write_tables(rows: list[dict], out: Path, stem: str, rcfg: dict) -> None:
    """<out>/<stem>.md, .csv (the table) and .json (rows with timings and the config used)."""
    columns = [(c, c) for c in table_columns(rows)]
    tables.write_table(out, stem, rows, columns, _cell, extra={"config": rcfg["raw"]})
