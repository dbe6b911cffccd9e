"""``solo_hyper.load_pretrained(path)``: a trained encoder and its head, for a plain PyTorch loop.

``path`` is a run directory (or one of its ``.ckpt`` files) of ``pretrain``, or a folder that
``export`` wrote. Either way the result is the backbone (images -> features) and the head
(features -> points of the embedding space the run declared: the Poincare ball of its curvature
for HCL, the sphere for SimCLR-like heads, ...), both plain ``nn.Module`` s in eval mode, and
that space, so that distances between outputs are the ones the method trained with.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from solo_hyper.config import ConfigError
from solo_hyper.evaluation.inference import backbone_attr
from solo_hyper.geometry import Manifold, space_from_dict


def backbone_of(model: nn.Module) -> nn.Module:
    """The method's backbone (``inference.backbone_attr``: solo 1.0.2's ``encoder``, solo
    main's ``backbone``)."""
    return getattr(model, backbone_attr(model))


@dataclass
class Pretrained:
    """What a run learnt, ready to use.

    Attributes:
        backbone: ``backbone(x)`` is the features of images.
        head: ``head(features)`` is points of ``space``.
        space: the head's space (None: a head of solo-learn's that declares no space).
        input: the input the backbone expects: crop size, mean and std of [0, 1] images.
        source: where it came from: the checkpoint, its epoch and step, the config's hash and
            the dataset.
    """

    backbone: nn.Module
    head: nn.Module
    space: Manifold | None
    input: dict
    source: dict


def _from_run(path: Path) -> Pretrained:
    from solo_hyper.config import crop_entries
    from solo_hyper.evaluation.features import embedding_space
    from solo_hyper.run.checkpoints import load_pretrained as load_run

    model, cfg, ckpt = load_run(path)
    first = crop_entries(cfg)[0]
    return Pretrained(
        backbone_of(model), model.projector, embedding_space(model, cfg, ckpt),
        {"crop_size": first["crop_size"], "mean": list(cfg["data"]["mean"]),
         "std": list(cfg["data"]["std"])},
        {"checkpoint": ckpt["_path"], "global_step": ckpt.get("global_step"), "method": cfg["method"]},
    )  # fmt: skip


def _from_export(folder: Path) -> Pretrained:
    from solo_hyper.data import DATASETS
    from solo_hyper.run.checkpoints import build_model

    info = json.loads((folder / "model.json").read_text())
    cfg = info.get("config")
    if cfg is None:
        raise ConfigError(f"{folder}/model.json has no 'config' (an export of an earlier version): "
                          "export the run again")  # fmt: skip
    num_classes = DATASETS[cfg["data"]["dataset"]].num_classes or 10  # the classifier is not used
    model = build_model(cfg, num_classes)
    backbone = torch.load(folder / info["files"]["backbone"], map_location="cpu", weights_only=True)
    missing, unexpected = backbone_of(model).load_state_dict(backbone, strict=False)
    if unexpected or any(not k.startswith("fc.") for k in missing):
        raise ConfigError(f"{folder}/backbone.pt does not match model.json's backbone "
                          f"(missing {missing[:3]}, unexpected {unexpected[:3]})")  # fmt: skip
    head = torch.load(folder / info["files"]["projector"], map_location="cpu", weights_only=True)
    model.projector.load_state_dict(head, strict=True)
    space_dict = info["projector"].get("space")
    space = space_from_dict(space_dict) if space_dict else None
    if isinstance(getattr(model.projector, "space", None), Manifold):
        space = model.projector.space  # the head's own (a learnt curvature: its trained value)
    return Pretrained(backbone_of(model), model.projector, space, info["input"], info["source"])


def load_pretrained(path: str | Path) -> Pretrained:
    """The backbone and head of a run directory, a checkpoint or an export folder.

    Args:
        path: a run directory, a ``.ckpt`` file or an ``export`` folder (with model.json).

    Returns:
        The backbone, head, space and expected input, in eval mode on the CPU (``.to(device)``
        them as any module).

    Raises:
        ConfigError: ``path`` does not exist, or is an export whose model.json and weights
            do not match.
    """
    p = Path(path)
    if p.is_dir() and (p / "model.json").is_file():
        out = _from_export(p)
    elif p.exists():
        out = _from_run(p)
    else:
        raise ConfigError(f"{str(p)!r} does not exist: give a run directory, a .ckpt file or an "
                          "export folder")  # fmt: skip
    for module in (out.backbone, out.head):
        module.cpu().eval()
    return out


__all__ = ["Pretrained", "load_pretrained"]
