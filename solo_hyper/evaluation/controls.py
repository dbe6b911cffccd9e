"""Controls: what the evaluation reads without pretraining, beside every comparison.

A trained run is a measurement of its representation only beside (a) the same network at
initialisation, seeded exactly as the run (``run.train.initial_model``: no optimisation step),
and (b) the raw input (the evaluation view's pixels, flattened: the ``pixels`` backbone). Each
control is written as a checkpoint in a run-like directory and evaluated by the very function
that evaluates runs (``protocol.evaluate_run``: the same features, probe, kNN, splits), so a
difference between a run and its control is the pretraining's. Controls are cached like runs:
``OUT/controls/untrained-<dataset>-<backbone>-s<seed>-<hash>/`` and
``OUT/controls/pixels-<dataset>-<hash>/`` (the raw pixels have no weights: one for every seed),
the hash over the network's initial weights and the evaluation's data settings, so runs whose
untrained backbones are equal share one (SimCLR and HCL of one seed); each evaluation budget is
cached apart inside (``protocol.evaluate_run``), and a finished comparison re-evaluates nothing.
"""

from __future__ import annotations

import copy
import hashlib
import json
import sys
from pathlib import Path

import torch

from solo_hyper.data import IDX_SOURCES
from solo_hyper.evaluation.protocol import evaluate_run
from solo_hyper.evaluation.stats import Interval, paired_interval
from solo_hyper.run.checkpoints import LAST
from solo_hyper.run.identity import save_torch_atomic
from solo_hyper.run.train import Prepared, initial_model, prepare

UNTRAINED, PIXELS = "untrained", "pixels"
PIXELS_SEED = 0  # the raw pixels' config seed, whatever the runs': it draws a smoke budget's subsets
TITLES = {UNTRAINED: "untrained backbone", PIXELS: "raw pixels"}
GAIN_METRICS = (("linear_acc1", "linear top-1"), ("knn_top1", "kNN top-1"))
FIGURE_METRICS = ("linear_acc1", "knn_top1", "knn_coarse_top1")  # a control's numbers in a figure
# what the evaluation of a control depends on besides the weights (run_data_config drops subsets)
EVAL_KEYS = ("data", "augmentations")


def _digest(state: dict[str, torch.Tensor], cfg: dict) -> str:
    h = hashlib.sha256()
    for key in sorted(state):
        if key.startswith("backbone.") or key.startswith("encoder."):
            h.update(key.encode())
            h.update(state[key].detach().cpu().contiguous().numpy().tobytes())
    settings = {k: cfg.get(k) for k in EVAL_KEYS}
    settings["data"] = {k: v for k, v in (settings["data"] or {}).items()
                        if k not in ("train_subset", "val_subset")}  # fmt: skip
    settings["backbone"] = cfg["backbone"]
    h.update(json.dumps(settings, sort_keys=True, default=str).encode())
    return h.hexdigest()[:12]


def copied_channels(data: dict, eval_dataset: str | None = None) -> bool:
    """The evaluation view's three channels are copies of one: the evaluated dataset is grey
    (stored with one channel, replicated by ``augment.to_float_rgb``) and the run's
    normalisation (the one a transfer keeps too) is alike in every channel."""
    same = all(len(set(map(float, data.get(k) or (0,)))) == 1 for k in ("mean", "std"))
    return (eval_dataset or data["dataset"]) in IDX_SOURCES and same


def pixels_config(cfg: dict, eval_dataset: str | None = None) -> dict:
    """The run's config with the ``pixels`` backbone on the evaluation view's distinct input
    (of ``eval_dataset`` under transfer): 1 x crop x crop where its channels are copies
    (``copied_channels``; an attack perturbs the stored grey image, so they stay copies), else
    3 x crop x crop."""
    out = copy.deepcopy(cfg)
    crop = int(cfg["augmentations"][0]["crop_size"])
    channels = 1 if copied_channels(cfg["data"], eval_dataset) else 3
    out["backbone"] = {"name": "pixels", "kwargs": {"shape": [channels, crop, crop]}}
    return out


def pixels_note(cfg: dict, eval_dataset: str | None = None) -> str:
    """The legend's sentence on what the raw-pixel control reads."""
    channels, h, w = pixels_config(cfg, eval_dataset)["backbone"]["kwargs"]["shape"]
    text = (f"Raw pixels: the evaluation view's normalised {channels} x {h} x {w} pixels, "
            "flattened, as the features")  # fmt: skip
    if channels == 1:
        text += (" (one channel: the three input channels are copies of the grey image; copies "
                 "leave the kNN's cosine unchanged and are, for the probe, one feature at 3x C)")  # fmt: skip
    return text + "."


def _control_model(prep: Prepared, kind: str, eval_dataset: str | None = None):
    if kind == UNTRAINED:
        model = initial_model(prep)[0]
        return model, prep.cfg
    cfg = {**pixels_config(prep.cfg, eval_dataset), "seed": PIXELS_SEED}
    pixels = prepare(None, base=cfg)
    model = initial_model(pixels)[0]
    return model, pixels.cfg


def write_control(prep: Prepared, kind: str, root: Path, eval_dataset: str | None = None) -> Path:
    """The control's directory under ``root/controls`` (its checkpoint written once; the raw
    pixels' shape follows the evaluated dataset, ``pixels_config``)."""
    if kind not in TITLES:
        raise ValueError(f"control kind must be one of {sorted(TITLES)}, got {kind!r}")
    model, cfg = _control_model(prep, kind, eval_dataset)
    state = model.state_dict()
    where = ("pixels", cfg["data"]["dataset"]) if kind == PIXELS else (
        "untrained", cfg["data"]["dataset"], prep.cfg["backbone"]["name"], f"s{cfg['seed']}")
    name = "-".join([*where, _digest(state, cfg)])
    run_dir = Path(root) / "controls" / name
    if not (run_dir / LAST).is_file():
        cfg = {**copy.deepcopy(cfg), "name": name}
        save_torch_atomic(run_dir / LAST, {"state_dict": state, "solo_hyper_config": cfg,
                                      "control": kind, "global_step": 0, "epoch": 0})  # fmt: skip
    return run_dir


def evaluate_control(
    prep: Prepared, kind: str, root: Path, linear_epochs: int | None = None,
    linear_config_path: str | None = None, device: str = "auto", quiet: bool = True,
    eval_dataset: str | None = None, budget: str = "full", count: str = "",
    run_dir: Path | None = None,
) -> dict:  # fmt: skip
    """The control's numbers, by ``protocol.evaluate_run`` (cached in its eval.json, or in
    eval-<dataset>.json under the transfer protocol: ``eval_dataset`` as for a run; a smoke
    ``budget`` apart), announced by a line on stderr (``count``: its place, e.g. " 1/2");
    ``run_dir``: the control's directory when ``write_control`` wrote it already."""
    run_dir = run_dir or write_control(prep, kind, root, eval_dataset)
    seed = f", seed {prep.cfg['seed']}" if kind == UNTRAINED else ""
    what = (f"{prep.cfg['backbone']['name']} at initialisation" if kind == UNTRAINED
            else "the evaluation view's pixels")  # fmt: skip
    print(f"[controls{count}] {TITLES[kind]}: {what} ({eval_dataset or prep.cfg['data']['dataset']}"
          f"{seed}, {budget} evaluation) -> {run_dir}", file=sys.stderr, flush=True)  # fmt: skip
    ev = evaluate_run(run_dir, linear_epochs, linear_config_path, False, device, quiet,
                      eval_dataset=eval_dataset, phase_lines=True, budget=budget)  # fmt: skip
    note = {"note": pixels_note(prep.cfg, eval_dataset)} if kind == PIXELS else {}
    return {"run_dir": str(run_dir), "control": kind, "seed": int(prep.cfg["seed"]), **note,
            "eval_budget": budget, **{k: ev.get(k) for k in FIGURE_METRICS}}  # fmt: skip


def controls_for(
    preps: list[Prepared], root: Path, linear_epochs: int | None = None,
    linear_config_path: str | None = None, device: str = "auto", quiet: bool = True,
    eval_dataset: str | None = None, budget: str = "full",
) -> tuple[list[dict], dict | None]:
    """(each run's untrained control, in the order of ``preps``; the raw-pixel control of the
    runs' dataset), evaluated on ``eval_dataset`` when given (transfer): each distinct control
    once (runs whose untrained networks are equal share one; the raw pixels once, whatever the
    seeds), each announced by a line on stderr."""
    dirs = [write_control(p, UNTRAINED, root, eval_dataset) for p in preps]
    firsts: dict[Path, Prepared] = {}
    for d, p in zip(dirs, preps):
        firsts.setdefault(d, p)  # the first run of each
    total = len(firsts) + bool(preps)
    evaluated = {
        d: evaluate_control(p, UNTRAINED, root, linear_epochs, linear_config_path, device, quiet,
                            eval_dataset, budget, f" {i}/{total}", run_dir=d)
        for i, (d, p) in enumerate(firsts.items(), 1)
    }  # fmt: skip
    untrained = [{**evaluated[d], "seed": int(p.cfg["seed"])} for d, p in zip(dirs, preps)]
    pixels = (evaluate_control(preps[0], PIXELS, root, linear_epochs, linear_config_path, device,
                               quiet, eval_dataset, budget, f" {total}/{total}")
              if preps else None)  # fmt: skip
    return untrained, pixels


def figure_rows(untrained: list[dict], pixels: dict | None) -> list[dict]:
    """The controls as comparison.png draws them: one row per distinct untrained network (its
    seed's point) and the raw pixels, labelled ``control: <title>``."""
    distinct = list({c["run_dir"]: c for c in untrained}.values())
    return [{**{k: c.get(k) for k in FIGURE_METRICS}, "seed": c["seed"], "control": c["control"],
             "config": f"control: {TITLES[c['control']]}"}
            for c in [*distinct, *([pixels] if pixels else [])]]  # fmt: skip


def default_label(row: dict) -> str:
    return row.get("config") or row["name"]


def gains(rows: list[dict], untrained: list[dict], label=None, metrics=None) -> list[dict]:
    """Per config (``label`` of a row) and metric (``metrics``: (key, title) pairs, default the
    linear probe and kNN): the run minus its own untrained backbone, paired over seeds (``rows``
    and ``untrained`` in the same order)."""
    label = label or default_label
    by_config: dict[str, list[tuple[dict, dict]]] = {}
    for row, control in zip(rows, untrained, strict=True):
        by_config.setdefault(label(row), []).append((row, control))
    out = []
    for config, members in by_config.items():
        for key, title in metrics or GAIN_METRICS:
            both = [(r[key], c[key]) for r, c in members
                    if isinstance(r.get(key), (int, float)) and isinstance(c.get(key), (int, float))]
            if both:
                iv = paired_interval([a for a, _ in both], [b for _, b in both])
                out.append({"config": config, "key": key, "metric": title, "interval": iv})
    return out


def interval_text(iv: Interval) -> str:
    return "-" if iv.low is None else f"[{iv.low:+.2f}, {iv.high:+.2f}]"


def gain_verdict(iv: Interval) -> str:
    if iv.within_noise is None:
        return "needs >= 2 seeds"
    if iv.within_noise:
        return "not above the untrained backbone (within noise)"
    return "above the untrained backbone" if iv.mean > 0 else "below the untrained backbone"


def controls_markdown(
    rows: list[dict], untrained: list[dict], pixels: dict | None, label=None
) -> str:
    """The controls' rows (mean ± std over seeds of the untrained backbones; the raw pixels) and
    each config's gain over its untrained backbone."""
    from solo_hyper.evaluation.stats import mean, sample_std

    def stat(values: list[float]) -> str:
        if not values:
            return "-"
        return f"{values[0]:.2f}" if len(values) == 1 else f"{mean(values):.2f} ± {sample_std(values):.2f}"

    lines = ["Controls, evaluated exactly as the runs (the same features, probe and kNN; "
             "`evaluation/controls.py`):", "", "| control | runs | linear top-1 | kNN top-1 |",
             "|---|---|---|---|"]  # fmt: skip
    distinct = list({c["run_dir"]: c for c in untrained}.values())
    lines.append(f"| {TITLES[UNTRAINED]} (each run's network at initialisation) | {len(distinct)} | "
                 + " | ".join(stat([c[k] for c in distinct if c.get(k) is not None])
                              for k, _ in GAIN_METRICS) + " |")  # fmt: skip
    if pixels is not None:
        lines.append(f"| {TITLES[PIXELS]} | 1 | "
                     + " | ".join(stat([pixels[k]] if pixels.get(k) is not None else [])
                                  for k, _ in GAIN_METRICS) + " |")  # fmt: skip
    if pixels is not None and pixels.get("note"):
        lines += ["", pixels["note"]]
    lines += ["", "Gain over the untrained backbone (each run minus its own network at "
              "initialisation, same seed; 95% Student-t interval):", ""]  # fmt: skip
    lines += gain_table(gains(rows, untrained, label))
    return "\n".join(lines)


def gain_table(found: list[dict], first: str = "config") -> list[str]:
    """The markdown lines of ``gains``' results: one row per config (or table row) and metric."""
    lines = [f"| {first} | metric | seeds | mean gain | 95% interval | verdict |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    for g in found:
        iv = g["interval"]
        lines.append(f"| {g['config']} | {g['metric']} | {iv.n} | {iv.mean:+.2f} | "
                     f"{interval_text(iv)} | {gain_verdict(iv)} |")  # fmt: skip
    return lines


__all__ = ["PIXELS", "TITLES", "UNTRAINED", "controls_for", "controls_markdown",
           "evaluate_control", "gain_table", "gains", "pixels_config", "write_control"]  # fmt: skip
