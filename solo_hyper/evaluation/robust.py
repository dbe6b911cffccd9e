"""Robustness evaluation of a pretraining run: ``robust-eval`` (LE, r-LE) and ``finetune-adv`` (AT).

Reads a robust-evaluation YAML (``configs/robust/<dataset>.yaml``; its keys, defaults (RoCL's
protocol) and parsing: ``config.robust``), checks it completely before any work, rebuilds the pretrained model
with :func:`solo_hyper.run.checkpoints.load_pretrained`, trains the heads / fine-tunes with
``evaluation/adversarial.py`` and writes a table (method, protocol, A_nat, one column per
white-box attack) as markdown, CSV and JSON next to the run (``<run dir>/robust/``).
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from solo_hyper.augment import to_float
from solo_hyper.config import ConfigError
from solo_hyper.config import robust as robust_config
from solo_hyper.evaluation import autoattack, tables
from solo_hyper.evaluation.adversarial import (
    Batches,
    PGDSpec,
    PixelClassifier,
    Schedule,
    StandardizedLinear,
    adversarial_finetune,
    robust_accuracy,
    train_linear_head,
)
from solo_hyper.evaluation.autoattack import AutoAttackSpec
from solo_hyper.evaluation.diagnostics import (
    Check,
    Diagnosis,
    DiagnosticsSpec,
    diagnose,
    transfer_check,
)
from solo_hyper.evaluation.diagnostics import markdown as diagnostics_markdown
from solo_hyper.evaluation.inference import attacked_at_inference_speed
from solo_hyper.evaluation.progress import Progress, image_progress
from solo_hyper.evaluation.robust_cache import EvaluationCache, describe
from solo_hyper.evaluation.stratified import first, stratified
from solo_hyper.run.identity import save_torch_atomic, write_json_atomic, write_text_atomic

# ----------------------------------------------------------------------------- config


def _built(make: Callable[[], Any], where: str) -> Any:
    """A spec made of parsed values; its own check's ValueError as a ConfigError naming where."""
    try:
        return make()
    except ValueError as err:
        raise ConfigError(f"{where}: {err}") from None


def _attack(kind: str, values: dict, where: str) -> PGDSpec | AutoAttackSpec:
    return _built(lambda: (AutoAttackSpec if kind == "autoattack" else PGDSpec)(**values), where)


def load_robust_config(path: str | None, overrides: list[str] = ()) -> dict:
    """The robust-evaluation config (``config.robust.load``: defaults < YAML < overrides, every
    value checked) with its attacks, schedules and diagnostics made, and AutoAttack's package
    checked where the config needs it: all before any work.

    Returns the raw merged config under "raw" and the parsed objects (schedules, PGDSpecs).
    """
    parsed = robust_config.load(path, overrides)
    attacks = {name: _attack(kind, values, f"evaluation.attacks.{name}")
               for name, (kind, values) in parsed["attacks"].items()}  # fmt: skip
    labels = [spec.label for spec in attacks.values()]
    if len(set(labels)) != len(labels):
        raise ConfigError(f"evaluation.attacks: two attacks share a label ({labels}); remove one")
    where = "evaluation.diagnostics"
    diagnostics = (None if parsed["diagnostics"] is None
                   else _built(lambda: DiagnosticsSpec(**parsed["diagnostics"]), where))  # fmt: skip
    needs_package = [f"evaluation.attacks.{n}" for n, spec in attacks.items()
                     if isinstance(spec, AutoAttackSpec)]  # fmt: skip
    if diagnostics is not None:
        needs_package.append("evaluation.diagnostics (its Square attack)")
    if needs_package and not autoattack.available():
        raise ConfigError(autoattack.missing_message(needs_package[0]))
    return {
        "raw": parsed["raw"],
        "device": parsed["device"],
        "linear": Schedule(**parsed["linear"]),
        "linear_attack": _attack("pgd", parsed["linear_attack"], "linear.attack"),
        "finetune": Schedule(**parsed["finetune"]),
        "finetune_attack": _attack("pgd", parsed["finetune_attack"], "finetune.attack"),
        "attacks": {spec.label: spec for spec in attacks.values()},
        "diagnostics": diagnostics,
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
    """The run's evaluation view (resize + centre crop) without normalisation, with the stored
    channels: a grey image is attacked as the 1-channel image it is (``PixelClassifier``)."""
    aug = getattr(model, "device_augmentation", None)
    if aug is None:
        return to_float
    return lambda images: aug.evaluation_view(images, normalize=False, stored_channels=True)


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

    def cache(self, raw: dict) -> EvaluationCache:
        """The run's evaluation cache; every entry depends on the checkpoint, the evaluation
        data and subset, and the seed."""
        identity = {"checkpoint": Path(self.ckpt["_path"]).name, "run": self.cfg.get("name"),
                    "global_step": self.ckpt.get("global_step"), "data": raw["data"],
                    "images": raw["evaluation"]["images"], "seed": raw["seed"]}  # fmt: skip
        return EvaluationCache(self.out / "cache", identity)

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
    images = rcfg["raw"]["evaluation"]["images"]
    if images is None:
        test = _pixel_batches(val, view, "test images", progress)
    else:  # the subset stops reading the loader early: its bar counts images, not batches
        subset = stratified(_pixel_batches(val, view), images, num_classes)
        test = image_progress(subset, images, "test images", progress)
    batches = (_pixel_batches(train, view, "train images", progress), test)
    return _Run(model, cfg, ckpt, out, *batches, num_classes)


def _epochs(n: int) -> str:
    return f"{n} epoch{'' if n == 1 else 's'}"


def _twin_classifier(twin: str | None, protocol: str, num_classes: int) -> PixelClassifier | None:
    """The twin run's classifier for ``protocol``: its fine-tuned AT model for AT when it has
    one, else its r-LE (LE) head from robust_eval.pt on its encoder; None without a twin."""
    if twin is None:
        return None
    from solo_hyper.run.checkpoints import load_pretrained

    saved = _twin_heads(twin)
    model, cfg, _ = load_pretrained(twin)
    head = nn.Linear(model.features_dim, num_classes)
    finetuned = saved.parent / "finetune_adv.pt"
    if protocol == "AT" and finetuned.is_file():
        classifier = PixelClassifier(model.encoder, head, cfg["data"]["mean"], cfg["data"]["std"])
        state = torch.load(finetuned, map_location="cpu", weights_only=False)["state_dict"]
        classifier.load_state_dict(state)
    else:
        heads = torch.load(saved, map_location="cpu", weights_only=False)["heads"]
        name = protocol if protocol in heads else ("r-LE" if "r-LE" in heads else next(iter(heads)))
        head = StandardizedLinear.unscaled(head)  # its statistics come with the state
        head.load_state_dict(heads[name])
        classifier = PixelClassifier(model.encoder, head, cfg["data"]["mean"], cfg["data"]["std"])
    return classifier.eval()


def _head_keys(linear: dict, standard: bool) -> dict:
    """The keys a head depends on, its cache's: an SGD head's schedule (and r-LE's attack), the
    logistic LE's solver alone."""
    if standard and linear["solver"] == "logistic":
        return {"solver": "logistic"}
    return {k: v for k, v in linear.items() if k not in ("standard", "robust", "solver")}


def _twin_name(twin: str) -> str:
    """The twin as the stored evaluation names it: its run directory's name (where it lies may
    differ between machines)."""
    from solo_hyper.run.checkpoints import resolve_checkpoint

    return resolve_checkpoint(twin).parent.name


def _twin_heads(twin: str) -> Path:
    """The twin's robust/robust_eval.pt (its trained heads), or a ConfigError saying what to run."""
    from solo_hyper.run.checkpoints import resolve_checkpoint

    path = resolve_checkpoint(twin).parent / "robust" / "robust_eval.pt"
    if not path.is_file():
        raise ConfigError(f"--twin {twin}: {path} is missing; run robust-eval on the twin first "
                          "(its heads are what the transfer attack is crafted on)")  # fmt: skip
    return path


def robust_eval(
    checkpoint: str, config: str | None = None, overrides: list[str] = (),
    log: Callable[[str], None] = print, progress: bool = False, twin: str | None = None,
) -> list[dict]:  # fmt: skip
    """LE and r-LE of a pretraining run, each evaluated clean, under every attack and by the
    gradient-masking diagnostics (``twin``: the Euclidean twin's run for the transfer attack)."""
    rcfg = load_robust_config(config, overrides)  # every check before any loading
    raw, device, seed = rcfg["raw"], rcfg["device"], rcfg["raw"]["seed"]
    protocols = []  # (name, attack the head is trained on)
    if raw["linear"]["standard"]:
        protocols.append(("LE", None))
    if raw["linear"]["robust"]:
        protocols.append(("r-LE", rcfg["linear_attack"]))
    if not protocols:
        raise ConfigError("nothing to evaluate: set linear.standard=true and/or linear.robust=true")
    if twin is not None and rcfg["diagnostics"] is not None:
        _twin_heads(twin)
    run = _open_run(checkpoint, rcfg, progress)
    cache = run.cache(raw)
    rows, diagnoses, heads = [], [], {}
    for protocol, attack in protocols:
        start = time.perf_counter()
        # the head depends on its schedule (and r-LE on its attack), not on which heads run
        model = {"protocol": protocol, "linear": _head_keys(raw["linear"], attack is None)}
        classifier = run.classifier(seed).to(device)
        stored = cache.load_torch("head", model)
        if stored is None:
            how = ("fitting the converged logistic head" if "solver" in model["linear"]
                   else f"training the linear head ({_epochs(rcfg['linear'].epochs)})")
            log(f"{protocol}: {how} on {device}")
            with attacked_at_inference_speed(classifier, device):  # the encoder stays frozen
                losses = train_linear_head(classifier, run.train, rcfg["linear"], device, attack,
                                           seed, standardize=raw["linear"]["standardize"],
                                           solver=raw["linear"]["solver"] if attack is None else "sgd")  # fmt: skip
            stored = {"state": {k: v.detach().cpu() for k, v in classifier.head.state_dict().items()},
                      "losses": losses}  # fmt: skip
            cache.save_torch("head", model, stored)
        else:
            log(f"{protocol}: the linear head from {cache.folder}")
            classifier.head = StandardizedLinear.unscaled(classifier.head)
            classifier.head.load_state_dict(stored["state"])
            classifier.to(device).eval()
            losses = stored["losses"]
        heads[protocol] = stored["state"]
        accuracy = _attacked(classifier, run, rcfg, log, cache, model)
        row = _row(run, protocol, accuracy, losses, start)
        diagnoses += _diagnosed(classifier, row, run, rcfg, twin, log, cache, model)
        rows.append(row)
        log(_summary(row))
    save_torch_atomic(run.out / "robust_eval.pt",
                      {"heads": heads, "solo_hyper_config": run.cfg, "robust": raw})  # fmt: skip
    write_tables(rows, run.out, "robust_eval", rcfg, diagnoses, twin)
    log(f"written: {run.out}/robust_eval.md, .csv, .json, .pt" + _diagnostics_written(run.out))
    return rows


def finetune_adv(
    checkpoint: str, config: str | None = None, overrides: list[str] = (),
    log: Callable[[str], None] = print, progress: bool = False, twin: str | None = None,
) -> list[dict]:  # fmt: skip
    """RHCL+AT: adversarial fine-tuning of encoder + a new head, then the evaluation of
    ``robust_eval`` (attacks and diagnostics)."""
    rcfg = load_robust_config(config, overrides)  # every check before any loading
    device, seed = rcfg["device"], rcfg["raw"]["seed"]
    if twin is not None and rcfg["diagnostics"] is not None:
        _twin_heads(twin)
    run = _open_run(checkpoint, rcfg, progress)
    cache = run.cache(rcfg["raw"])
    start = time.perf_counter()
    model = {"protocol": "AT", "finetune": rcfg["raw"]["finetune"]}
    classifier = run.classifier(seed)
    stored = cache.load_torch("finetuned", model)
    if stored is None:
        log(f"AT: adversarial fine-tuning ({_epochs(rcfg['finetune'].epochs)}) on {device}")
        attack = rcfg["finetune_attack"]
        losses = adversarial_finetune(classifier, run.train, rcfg["finetune"], device, attack)
        cache.save_torch("finetuned", model, {"state": classifier.state_dict(), "losses": losses})
    else:
        log(f"AT: the fine-tuned classifier from {cache.folder}")
        classifier.load_state_dict(stored["state"])
        classifier.to(device).eval()
        losses = stored["losses"]
    accuracy = _attacked(classifier, run, rcfg, log, cache, model)
    row = {**_row(run, "AT", accuracy, losses, start), "method": f"{run.cfg['method']}+AT"}
    diagnoses = _diagnosed(classifier, row, run, rcfg, twin, log, cache, model)
    log(_summary(row))
    save_torch_atomic(run.out / "finetune_adv.pt", {"state_dict": classifier.state_dict(),
                      "solo_hyper_config": run.cfg, "robust": rcfg["raw"]})  # fmt: skip
    write_tables([row], run.out, "finetune_adv", rcfg, diagnoses, twin)
    log(f"written: {run.out}/finetune_adv.md, .csv, .json, .pt" + _diagnostics_written(run.out))
    return [row]


def _attacked(
    classifier: PixelClassifier, run: _Run, rcfg: dict, log: Callable[[str], None],
    cache: EvaluationCache, model: dict,
) -> dict:  # fmt: skip
    """Clean and attacked accuracies of one classifier, each attack on its own (its PGD random
    starts seeded alike whatever the other attacks) and cached per model and attack, with
    AutoAttack's warnings (printed and kept in the row as "autoattack_warnings")."""
    device, seed = rcfg["device"], rcfg["raw"]["seed"]

    def measured(label: str, spec) -> dict:
        def compute() -> dict:
            attacks = {} if spec is None else {label: spec}
            messages: list[str] = []
            counts: dict[str, int] = {}
            hits: dict[str, list[bool]] = {}
            with attacked_at_inference_speed(classifier.to(device).eval(), device):
                accuracy = robust_accuracy(classifier, run.val, attacks, device, seed, messages,
                                           counts, hits)  # fmt: skip
            return {"accuracy": accuracy, "images": counts, "messages": messages,
                    "outcomes": {k: bits(v) for k, v in hits.items()}}  # fmt: skip

        parts = {**model, "attack": None if spec is None else describe(spec)}
        return cache.json("attack", parts, compute, required=("outcomes",))

    # AutoAttack's columns first where it ran (the robust number), PGD's beside them
    ordered = sorted(
        rcfg["attacks"].items(), key=lambda item: not isinstance(item[1], AutoAttackSpec)
    )
    entries = {label: measured(label, spec) for label, spec in ordered}
    clean = next(iter(entries.values()), None) or measured("A_nat", None)
    accuracy = {"A_nat": clean["accuracy"]["A_nat"]}
    counts = {"A_nat": clean["images"]["A_nat"]}
    outcomes = {"A_nat": clean["outcomes"]["A_nat"]}
    messages: list[str] = []
    for label, entry in entries.items():
        accuracy[label], counts[label] = entry["accuracy"][label], entry["images"][label]
        outcomes[label] = entry["outcomes"][label]
        messages += [m for m in entry["messages"] if m not in messages]
    for text in messages:
        log(f"AutoAttack warning: {text}")
    if any(isinstance(spec, AutoAttackSpec) for spec in rcfg["attacks"].values()):
        accuracy["autoattack_warnings"] = messages
    accuracy["images"] = counts  # how many evaluation images each accuracy is over
    # which images each accuracy got right: character i is the i-th image of the fixed
    # class-stratified evaluation set ('1' correct), the same images for every model evaluated
    # with this config, so two models' outcomes pair image by image
    accuracy["outcomes"] = outcomes
    return accuracy


def bits(correct: list[bool]) -> str:
    """Per-image outcomes as a string: '1' where the image was classified correctly."""
    return "".join("1" if c else "0" for c in correct)


def _diagnosed(
    classifier: PixelClassifier, row: dict, run: _Run, rcfg: dict, twin: str | None,
    log: Callable[[str], None], cache: EvaluationCache, model: dict,
) -> list[dict]:  # fmt: skip
    """The diagnostics of one evaluated model (on a class-stratified subset of the evaluation
    images, cached per model): each verdict printed, the model's verdict in ``row["masking"]``
    and its attack strength in ``row["strength"]`` (with PGD-20 -> AutoAttack from the row's
    own columns); returned as a list of one JSON-ready diagnosis (none when disabled)."""
    spec = rcfg["diagnostics"]
    if spec is None:
        return []

    def images() -> tuple[Tensor, Tensor]:
        x, y = first(stratified(run.val, spec.images, run.num_classes))
        return x.to(rcfg["device"]), y.to(rcfg["device"])

    def compute() -> dict:  # every check but the transfer: it waits for the twin's heads
        x, y = images()
        with attacked_at_inference_speed(classifier.to(rcfg["device"]).eval(), rcfg["device"]):
            return diagnose(
                classifier,
                x,
                y,
                spec,
                f"{row['method']} ({row['protocol']})",
                rcfg["raw"]["seed"],
                rcfg["raw"]["data"]["batch_size"],
            ).as_dict()

    def transfer() -> dict:
        x, y = images()
        surrogate = _twin_classifier(twin, row["protocol"], run.num_classes).to(rcfg["device"])
        with attacked_at_inference_speed(classifier.to(rcfg["device"]).eval(), rcfg["device"]):
            check = transfer_check(classifier, x, y, spec, diagnosis.white_box, surrogate,
                                   _twin_name(twin), rcfg["raw"]["seed"],
                                   rcfg["raw"]["data"]["batch_size"])  # fmt: skip
        return {"name": check.name, "detail": check.detail, "flagged": check.flagged}

    parts = {**model, "diagnostics": describe(spec), "checks": "all but transfer"}
    diagnosis = Diagnosis.from_dict(cache.json("diagnostics", parts, compute))
    if twin is None:
        diagnosis.checks.append(Check("transfer", "no twin of the other geometry given", None))
    else:
        found = cache.json("transfer", {**parts, "twin": _twin_name(twin)}, transfer)
        diagnosis.checks.append(Check(**found))
    for line in diagnosis.lines():
        log(line)
    row["masking"] = diagnosis.verdict
    row["strength"] = strength_text(row, diagnosis)
    return [diagnosis.as_dict()]


def strength_text(row: dict, diagnosis: Diagnosis) -> str:
    """How much stronger attacks lower the row's PGD-20: the diagnostics' PGD-200 and restarts
    (on their images), and AutoAttack against the row's PGD at the same radius (on the row's)."""
    parts = []
    if diagnosis.strength is not None:
        s = diagnosis.strength
        parts.append(f"PGD-{s.long_steps} {s.long - s.base:+.1f}, x{s.restarts} restarts "
                     f"{s.restarted - s.base:+.1f} ({diagnosis.images} images)")  # fmt: skip
    for key, value in row.items():
        if not (key.startswith("AA") and isinstance(value, float)):
            continue
        name, radius = key.split(" ", 1)
        pgd = next((k for k, v in row.items() if k.startswith("PGD-") and isinstance(v, float)
                    and k.split(" ", 1)[1] == radius), None)  # fmt: skip
        if pgd is not None:
            parts.append(f"{name} {value - row[pgd]:+.1f} vs {pgd.split(' ')[0]}")
    return "; ".join(parts)


def _diagnostics_written(out: Path) -> str:
    return f"; {out}/diagnostics.md" if (out / "diagnostics.md").is_file() else ""


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
    masking = f"; gradient masking: {row['masking']}" if "masking" in row else ""
    return f"{row['method']} ({row['protocol']}): {numbers}{masking}"


def is_attack(key: str) -> bool:
    """A column of accuracy under an attack: 'PGD-20 8/255', 'AA 8/255', 'AA-plus 0.1'."""
    return key.startswith("PGD-") or key.split(" ")[0].split("-")[0] == "AA"


def _is_accuracy(key: str) -> bool:
    return key == "A_nat" or is_attack(key)


def flagged(row: dict) -> bool:
    """Whether the row's model was flagged by the gradient-masking diagnostics."""
    return str(row.get("masking", "")).startswith("FLAGGED")


# ----------------------------------------------------------------------------- tables

MARK = "*"
LEGEND = (f"{MARK} gradient masking flagged by the diagnostics (diagnostics.md): the robust "
          "columns of that model overstate its robustness.")  # fmt: skip


def table_columns(rows: list[dict]) -> list[str]:
    attacks = [k for k in rows[0] if is_attack(k)] if rows else []
    notes = [k for k in ("masking", "strength") if any(k in r for r in rows)]
    return ["method", "protocol", "A_nat", *attacks, *notes]


def _shown(rows: list[dict]) -> list[dict]:
    """Rows as tables show them: a flagged model's attack columns marked."""
    return [{k: (f"{v:.2f}{MARK}" if flagged(r) and is_attack(k) and isinstance(v, float) else v)
             for k, v in r.items()} for r in rows]  # fmt: skip


def _cell(key: str, value) -> str:
    if isinstance(value, str) or value is None:
        return tables.plain(key, value)
    return f"{value:.2f}" if _is_accuracy(key) else str(value)


def markdown_table(rows: list[dict]) -> str:
    text = tables.markdown_table(_shown(rows), [(c, c) for c in table_columns(rows)], _cell)
    return text + ("\n\n" + LEGEND if any(flagged(r) for r in rows) else "")


def write_tables(rows: list[dict], out: Path, stem: str, rcfg: dict,
                 diagnoses: list[dict] = (), twin: str | None = None) -> None:  # fmt: skip
    """<out>/<stem>.md, .csv (the table) and .json (rows with timings, the diagnoses, the
    config used and the twin the transfer check was crafted on, by its run's name); then
    <out>/diagnostics.md from every stem's diagnoses in <out>."""
    out.mkdir(parents=True, exist_ok=True)
    columns = [(c, c) for c in table_columns(rows)]
    notes = LEGEND if any(flagged(r) for r in rows) else None
    tables.write_markdown_csv(out, stem, _shown(rows), rows, columns, _cell, notes)
    write_json_atomic(out / f"{stem}.json", {
        "rows": rows, "diagnostics": list(diagnoses), "config": rcfg["raw"],
        "twin": None if twin is None or rcfg["diagnostics"] is None else _twin_name(twin)})  # fmt: skip
    write_diagnostics(out)


def write_diagnostics(out: Path) -> None:
    """<out>/diagnostics.md from the diagnoses stored by robust-eval and finetune-adv in <out>."""
    found = []
    for stem in ("robust_eval", "finetune_adv"):
        path = out / f"{stem}.json"
        if path.is_file():
            found += json.loads(path.read_text()).get("diagnostics", [])
    if found:
        write_text_atomic(out / "diagnostics.md", diagnostics_markdown(
            [Diagnosis.from_dict(d) for d in found]))  # fmt: skip
