"""Controls: what the evaluation reads without pretraining, beside every comparison.

A trained run is a measurement of its representation only beside (a) the same network at
initialisation, seeded exactly as the run (``run.train.initial_model``: no optimisation step),
and (b) the raw input (the evaluation view's pixels, flattened: the ``pixels`` backbone). Each
control is written as a checkpoint in a run-like directory (``write_control``) and evaluated by
the very function that evaluates runs (``protocol.evaluate_run``: the same features, probe, kNN,
splits; a campaign's control job, ``campaigns.controls``), so a difference between a run and its
control is the pretraining's. Controls are cached like runs:
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
from pathlib import Path

import torch

from solo_hyper.data import IDX_SOURCES
from solo_hyper.evaluation.stats import Interval, paired_interval
from solo_hyper.run.checkpoints import LAST
from solo_hyper.run.identity import save_torch_atomic
from solo_hyper.run.train import Prepared, initial_model, prepare

UNTRAINED, PIXELS = "untrained", "pixels"
PIXELS_SEED = 0  # the raw pixels' config seed, whatever the runs': it draws a smoke budget's subsets
TITLES = {UNTRAINED: "untrained backbone", PIXELS: "raw pixels"}
GAIN_METRICS = (("linear_acc1", "linear top-1"), ("knn_top1", "kNN top-1"))
FIGURE_METRICS = ("linear_acc1", "knn_top1", "knn_coarse_top1")  # a control's numbers in a figure


def _digest(state: dict[str, torch.Tensor], cfg: dict) -> str:
    """The control's identity: the backbone's initial weights and what its evaluation reads of the
    config (the data settings but the pretraining subsets, the evaluation view's size: the first
    crop's), not the pretraining views: two methods whose views differ (ReSSL's teacher view)
    share the control of their common network."""
    h = hashlib.sha256()
    for key in sorted(state):
        if key.startswith("backbone.") or key.startswith("encoder."):
            h.update(key.encode())
            h.update(state[key].detach().cpu().contiguous().numpy().tobytes())
    settings = {"data": {k: v for k, v in (cfg.get("data") or {}).items() if k not in ("train_subset", "val_subset")},
                "view": cfg["augmentations"][0]["crop_size"], "backbone": cfg["backbone"]}  # fmt: skip
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


def announcement(cfg: dict, kind: str, run_dir: Path, evaluation: str, count: str = "",
                 eval_dataset: str | None = None) -> str:  # fmt: skip
    """The line on stderr as a control's evaluation starts: which control of how many
    (``count``, e.g. " 1/2"), what it reads, on which dataset, by what ``evaluation``."""
    seed = f", seed {cfg['seed']}" if kind == UNTRAINED else ""
    what = (f"{cfg['backbone']['name']} at initialisation" if kind == UNTRAINED
            else "the evaluation view's pixels")  # fmt: skip
    return (f"[controls{count}] {TITLES[kind]}: {what} ({eval_dataset or cfg['data']['dataset']}"
            f"{seed}, {evaluation}) -> {run_dir}")  # fmt: skip


def control_numbers(cfg: dict, kind: str, run_dir: Path, ev: dict, eval_dataset: str | None = None,
                    budget: str = "full") -> dict:  # fmt: skip
    """A control's row of a comparison: its directory, kind and seed (``cfg``: the run it is the
    control of), the raw pixels' note, and its evaluation's numbers (``ev``: ``evaluate_run``'s,
    on ``eval_dataset`` under transfer, on ``budget``'s sets)."""
    note = {"note": pixels_note(cfg, eval_dataset)} if kind == PIXELS else {}
    return {"run_dir": str(run_dir), "control": kind, "seed": int(cfg["seed"]), **note,
            "eval_budget": budget, **{k: ev.get(k) for k in FIGURE_METRICS}}  # fmt: skip


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


__all__ = ["PIXELS", "TITLES", "UNTRAINED", "announcement", "control_numbers", "controls_markdown",
           "gain_table", "gains", "pixels_config", "write_control"]  # fmt: skip
