"""``python -m solo_hyper export --checkpoint RUN --out DIR``: a trained run as plain files.

Downstream code should not need this package's config (nor solo-learn, nor Lightning) to use a
pretrained encoder. ``DIR`` gets:
- ``backbone.pt``: the backbone as a plain ``state_dict`` in the layout of the model it came from:
  torchvision's ``resnet18``/``resnet50`` keys for solo's ResNets (without ``fc``; the CIFAR stem,
  when the run used it, is stated in model.json: replace ``conv1`` with the conv described there
  and ``maxpool`` with ``nn.Identity()``), timm's keys for solo's ViT/Swin, and this package's own
  classes (``solo_hyper.backbones``) for ``small_cnn`` / ``resnet18_nobn``;
- ``projector.pt``: the projector's ``state_dict`` (model.json names the space its outputs lie
  in: geometry and, for a hyperbolic head, its curvature);
- ``model.json``: what the files are and how to rebuild them, the input preprocessing (crop size,
  mean, std), and where they came from (checkpoint, config hash, code version).

The files are written into a temporary folder beside ``DIR`` and moved into place together; an
earlier export in ``DIR`` is kept, renamed ``DIR-<its time stamp>`` (the command says so).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

from solo_hyper.config import ConfigError, crop_entries
from solo_hyper.evaluation.features import embedding_space
from solo_hyper.run.checkpoints import load_pretrained
from solo_hyper.run.identity import code_version, config_hash, float32_value, write_json_atomic

TORCHVISION = ("resnet18", "resnet50")
OWN_CLASSES = {"small_cnn": "SmallCNN", "resnet18_nobn": "ResNet18NoBN"}


def _conv(conv: nn.Conv2d) -> dict:
    return {
        "in_channels": conv.in_channels, "out_channels": conv.out_channels,
        "kernel_size": list(conv.kernel_size), "stride": list(conv.stride),
        "padding": list(conv.padding), "bias": conv.bias is not None,
    }  # fmt: skip


def describe_backbone(name: str, encoder: nn.Module, kwargs: dict) -> dict:
    """How to rebuild the backbone without this package (or with only its backbones module)."""
    if name in TORCHVISION:
        stem_replaced = isinstance(encoder.maxpool, nn.Identity)
        return {
            "format": "torchvision",
            "constructor": f"torchvision.models.{name}",
            "fc": "removed: set model.fc = torch.nn.Identity() before load_state_dict",
            "cifar_stem": stem_replaced,
            "stem": {
                "conv1": _conv(encoder.conv1),
                "maxpool": "identity" if stem_replaced else "torchvision",
                "how": "model.conv1 = torch.nn.Conv2d(**conv1) with kernel_size/stride/padding "
                "as listed and bias=False; model.maxpool = torch.nn.Identity()"
                if stem_replaced
                else "torchvision's own stem",
            },
        }
    if name in OWN_CLASSES:
        return {
            "format": "solo_hyper",
            "constructor": f"solo_hyper.backbones.{OWN_CLASSES[name]}",
            "kwargs": dict(kwargs),
        }
    cfg = getattr(encoder, "pretrained_cfg", None) or getattr(encoder, "default_cfg", None) or {}
    return {
        "format": "timm",
        "constructor": "timm.create_model",
        "architecture": cfg.get("architecture"),
        "class": f"{type(encoder).__module__}.{type(encoder).__name__}",
        "note": "solo-learn builds its ViT/Swin with timm's classes; the keys are timm's",
    }


def describe_projector(model, cfg: dict, checkpoint: dict | None = None) -> dict:
    """The projector's class, sizes and the space its outputs live in, as the run declared it
    (``embedding_space``: geometry name and curvature; no space for solo-learn's own heads)."""
    projector = model.projector
    kwargs = cfg.get("method_kwargs") or {}
    out: dict = {"class": f"{type(projector).__module__}.{type(projector).__name__}"}
    space = embedding_space(model, cfg, checkpoint)
    if space is not None:
        out["space"] = space.to_dict()
        out["geometry"] = space.name
        if space.curved:
            out["curvature"] = float32_value(torch.as_tensor(space.curvature))
    for key in (
        "normalize",
        "clip_radius",
        "learnable_curvature",
        "proj_hidden_dim",
        "proj_output_dim",
    ):
        if key in kwargs:
            out[key] = kwargs[key]
    return out


EXPORT_FILES = {"backbone.pt", "projector.pt", "model.json"}


def check_out(out: Path) -> None:
    """``--out`` is a new folder, an empty one or an earlier export (kept aside); nothing else."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {str(out)!r} is a file; give a folder")
    if out.is_dir() and any(out.iterdir()):
        existing = [p.name for p in out.iterdir()]
        if not set(existing) <= EXPORT_FILES:
            raise ConfigError(
                f"--out {str(out)!r} holds other files ({sorted(existing)[:5]}); give an empty "
                "or new folder"
            )


def set_export_aside(out: Path) -> Path | None:
    """An earlier export in ``out`` -> ``<out>-<time stamp of its model.json>`` (None: none)."""
    if not out.is_dir() or not any(out.iterdir()):
        return None
    marker = out / "model.json" if (out / "model.json").is_file() else next(out.iterdir())
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(marker.stat().st_mtime))
    target, n = out.with_name(f"{out.name}-{stamp}"), 1
    while target.exists():
        n += 1
        target = out.with_name(f"{out.name}-{stamp}-{n}")
    out.rename(target)
    print(f"[solo-hyper] {out}: the earlier export is kept as {target}", file=sys.stderr)
    return target


def export_run(checkpoint: str | Path, out_dir: str | Path) -> dict:
    """Writes backbone.pt, projector.pt and model.json into ``out_dir``; returns model.json."""
    out = Path(out_dir)
    check_out(out)
    model, cfg, ckpt = load_pretrained(checkpoint)
    name = cfg["backbone"]["name"]
    encoder = model.encoder
    backbone_state = {
        k: v.detach().cpu().clone()
        for k, v in encoder.state_dict().items()
        if not k.startswith("fc.")
    }
    projector_state = {k: v.detach().cpu().clone() for k, v in model.projector.state_dict().items()}
    first = crop_entries(cfg)[0]
    info = {
        "method": cfg["method"],
        "backbone": {
            "name": name,
            "features_dim": int(model.features_dim),
            **describe_backbone(name, encoder, cfg["backbone"].get("kwargs") or {}),
        },
        "projector": describe_projector(model, cfg, ckpt),
        "input": {
            "channels": 3,
            "crop_size": first["crop_size"],
            "mean": list(cfg["data"]["mean"]),
            "std": list(cfg["data"]["std"]),
            "note": "images in [0, 1], normalised with mean/std (grey images repeated to 3 "
            "channels)",
        },  # fmt: skip
        "files": {"backbone": "backbone.pt", "projector": "projector.pt"},
        "source": {
            "checkpoint": ckpt["_path"],
            "epoch": ckpt.get("epoch"),
            "global_step": ckpt.get("global_step"),
            "config_hash": config_hash(cfg),
            "dataset": cfg["data"]["dataset"],
        },  # fmt: skip
        "code": code_version(),
        "config": cfg,  # solo_hyper.load_pretrained(DIR) rebuilds backbone and head from it
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp"))
    try:
        torch.save(backbone_state, tmp / "backbone.pt")
        torch.save(projector_state, tmp / "projector.pt")
        write_json_atomic(tmp / "model.json", info)
        set_export_aside(out)
        if out.is_dir():  # empty
            out.rmdir()
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return info
